"""The words of a structured reply the learner can read before the model has finished.

The embedded model answers in a structure (:class:`~hyde_tutor.tutor.grounding.GroundedAnswer`: which found
entry, a Korean sentence and its translation) that is rendered with the chosen entry only when it is complete, so
a served turn used to show nothing until the last token. Yet the reply's head depends on the chosen entry
alone: once that is decided (at once when the search is sure of its top entry, else when the model's JSON has
written its ``entry`` field, its first), :class:`ReplyPacer` hands that head over, and the rest when the reply
is done. What it hands over is always a prefix of the reply the learner keeps, so a client that only
concatenates the text (a stock Vercel AI ``useChat``) shows the same reply as the page::

    pacer = ReplyPacer(entries, margin)
    now = pacer.start()                 # the head, when the search is sure; else ""
    for delta in model_json_deltas:
        now = pacer.feed(delta)         # the head, once the JSON names its entry
    rest = pacer.finish(final_text)     # what the reply adds to what was shown

A text reply (capable models) streams as the model writes it; its pacer only remembers it (:meth:`streamed`), so
that a reply replaced afterwards (:func:`~hyde_tutor.tutor.grounding.ground_reply`) follows in full.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Sequence
from typing import Any

from ..corpus.rendering import distinct_entries
from .grounding import GroundedAnswer, HeadlineRule, entry_parts, headline_entry, render_parts

__all__ = ("ReplyPacer", "lead_text")

_ENTRY_FIELD = re.compile(r'"entry"\s*:\s*(\d+)\s*[,}\s]')


def lead_text(entries: Sequence[dict[str, Any]], number: int) -> str:
    """The part of a structured reply that depends only on its headline entry (``number``, 1-based; the top one
    when out of range): the entry's own parts (:func:`~hyde_tutor.tutor.grounding.entry_parts`: headline,
    explanation, examples), which every structured reply headed by it begins with. No line break after them:
    the rest of the reply brings its own."""
    found = distinct_entries(entries)
    return render_parts(entry_parts(found[number - 1] if 1 <= number <= len(found) else found[0]))


class ReplyPacer:
    """What of one structured reply is final, as the turn goes (see the module's docstring). Not thread-safe;
    one per turn."""

    def __init__(self, entries: Sequence[dict[str, Any]], margin: float | None, rule: HeadlineRule = "unsure",
                 lead: Callable[[Sequence[dict[str, Any]], int], str] = lead_text) -> None:
        self.entries = list(entries)
        self.margin = margin
        self.rule: HeadlineRule = rule
        self._lead = lead
        self._json = ""
        self.headline: int | None = None
        self.shown = ""
        """Everything handed over so far."""

    def _decide(self, model_entry: int) -> str:
        answer = GroundedAnswer.model_construct(entry=model_entry, korean="", russian="")
        self.headline = headline_entry(answer, self.entries, self.rule, self.margin)
        text = self._lead(self.entries, self.headline)
        self.shown += text
        return text

    def start(self) -> str:
        """The head when the search alone decides the headline (one entry found, the search sure of its top
        entry, or the rule ``top``: the model's pick would not change it); else ``""``."""
        if self.headline is not None or not distinct_entries(self.entries):
            return ""
        other = GroundedAnswer.model_construct(entry=2, korean="", russian="")
        if headline_entry(other, self.entries, self.rule, self.margin) == 1:
            return self._decide(1)
        return ""

    def feed(self, json_delta: str) -> str:
        """Another piece of the model's JSON: the head once its ``entry`` field is complete, else ``""``."""
        if self.headline is not None or not distinct_entries(self.entries):
            return ""
        self._json += json_delta
        match = _ENTRY_FIELD.search(self._json)
        return self._decide(int(match.group(1))) if match else ""

    def streamed(self, text: str) -> None:
        """A text reply's words, shown as the model wrote them (no structure: nothing to decide)."""
        self.shown += text

    def finish(self, text: str) -> str:
        """What to hand over when the reply the learner keeps is ``text``: nothing when it is what was shown;
        its rest when it continues what was shown; else (a replaced reply, or the model failed after its head
        went out) the whole of it, after a blank line when something was shown."""
        if self.shown.strip() == text.strip():
            rest = ""
        elif not self.shown:
            rest = text
        elif text.startswith(self.shown):
            rest = text[len(self.shown):]
        else:
            rest = "\n\n" + text
        self.shown += rest
        return rest
