"""Hypothesis domains (which prompt files write a collection's hypotheses, which guard checks them) and
the text shaping every hypothesis goes through: prompt echoes removed, length normalised."""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Literal

Domain = Literal["grammar", "docs", "passage"]


@dataclass(frozen=True, slots=True, kw_only=True)
class DomainProfile:
    """What a collection's domain decides about its hypotheses: which prompt files write them and
    which guard checks their shape. ``grammar`` and ``docs`` are the Korean tutor's corpora (a passage
    there always carries Korean examples); ``passage`` is the HyDE paper's generic "write a passage
    that answers the question", for any other collection, with no language guard."""

    name: Domain
    prompt: str
    """System prompt file name (``prompts/<prompt>.v<N>.md``)."""
    request: str
    """User message template with ``{query}`` and ``{perspective}``."""
    perspectives: str
    """Perspectives file: one ``## name`` section each; N hypotheses use the first N."""
    multi_request: str
    """User message template asking ONE call for N hypotheses (``{query}``, ``{n}``, ``{perspectives}``)."""
    followup_request: str = "hypothesis_followup_request"
    """User message template for a follow-up question (``{conversation}``, ``{query}``, ``{perspective}``)."""
    min_hangul_chars: int
    """Drop a hypothesis with fewer Hangul characters (``HYDE_HYDE__MIN_HANGUL_CHARS`` overrides)."""
    name_header: str | None = None
    """The header with which the prompt's format names the construction (``Конструкция:``); with ``name_field``
    the pipeline can tell which entry a hypothesis names (``HydePolicy.named_lead``). None: the domain's
    hypotheses name nothing."""
    name_field: str | None = None
    """The payload field holding an entry's own notation of its construction (``pattern``)."""


DOMAINS: dict[str, DomainProfile] = {
    "grammar": DomainProfile(name="grammar", prompt="hypothesis_grammar", request="hypothesis_request",
                             perspectives="perspectives", multi_request="hypothesis_multi_request", min_hangul_chars=4,
                             name_header="Конструкция:", name_field="pattern"),
    "docs": DomainProfile(name="docs", prompt="hypothesis_docs", request="hypothesis_request",
                          perspectives="perspectives", multi_request="hypothesis_multi_request", min_hangul_chars=4),
    "passage": DomainProfile(name="passage", prompt="hypothesis_passage", request="hypothesis_passage_request",
                             perspectives="perspectives_passage", multi_request="hypothesis_passage_multi_request",
                             followup_request="hypothesis_passage_followup_request", min_hangul_chars=0),
}
PROMPT_NAMES: dict[str, str] = {name: d.prompt for name, d in DOMAINS.items()}
HANGUL = re.compile("[가-힣]")


def normalise_length(text: str, length: int, exact: bool = False) -> str:
    """Collapse whitespace; cut to at most ``length`` chars on a word boundary; pad with spaces if ``exact``."""
    flat = " ".join(text.split())
    if len(flat) > length:
        head = flat[: length + 1]
        cut = head.rfind(" ")
        flat = (flat[:cut] if cut > 0 else flat[:length]).rstrip()
    return flat.ljust(length) if exact else flat


_SEGMENT_END = re.compile(r"(?<=[.!?…])\s+|\n+|\s+(?=[—–]\s)")
_NON_WORD = re.compile(r"[^\w]+")


def _flat(text: str) -> str:
    """Lower case, punctuation and whitespace collapsed to single spaces: the form echoes are compared in."""
    return " ".join(_NON_WORD.sub(" ", text.lower()).split())


def strip_prompt_echo(text: str, prompt_texts: Sequence[str], min_words: int = 3) -> tuple[str, int]:
    """Drop the sentences and lines of ``text`` that copy the prompt; return the rest and how many were dropped.

    Small models often copy the prompt's sample entry (its Korean examples included) instead of writing
    one about the learner's question. Those copies pull every query towards the sample's topic, so a
    segment of at least ``min_words`` words found verbatim (ignoring case and punctuation) in a prompt
    is removed. Short labels such as "Пример:" are kept.
    """
    haystack = " " + " ".join(_flat(p) for p in prompt_texts) + " "
    kept: list[str] = []
    dropped = 0
    for segment in _SEGMENT_END.split(text):
        flat = _flat(segment)
        if len(flat.split()) >= min_words and f" {flat} " in haystack:
            dropped += 1
        else:
            kept.append(segment)
    return (" ".join(kept) if dropped else text), dropped


_SECTION = re.compile(r"^[ \t]*#{2,4}[ \t]*(\d{1,2})\b[^\n]*$", re.MULTILINE)


@dataclass(frozen=True, slots=True)
class Sections:
    """A one-call reply split into its hypotheses: ``texts[i]`` answers perspective ``i`` (None: missing)."""

    texts: tuple[str | None, ...]
    extra: int = 0
    """Sections beyond the N asked for (dropped)."""

    @property
    def missing(self) -> int:
        return sum(1 for t in self.texts if not t)


def split_sections(reply: str, n: int) -> Sections:
    """Split a reply to the one-call request (``### 1`` ... ``### N`` headers) into N texts.

    Robust to what models do: a header's number places its section (a repeated or out-of-range number
    takes the next free slot, a section past N is counted in ``extra`` and dropped); a reply with no
    headers at all is one hypothesis (it is still answer-shaped); text before the first header is dropped.
    """
    marks = list(_SECTION.finditer(reply))
    if not marks:
        body = reply.strip()
        return Sections(tuple([body or None] + [None] * (n - 1)))
    slots: list[str | None] = [None] * n
    extra = 0
    for i, mark in enumerate(marks):
        end = marks[i + 1].start() if i + 1 < len(marks) else len(reply)
        body = reply[mark.end():end].strip()
        if not body:
            continue
        wanted = int(mark.group(1)) - 1
        slot = wanted if 0 <= wanted < n and slots[wanted] is None else next(
            (j for j, t in enumerate(slots) if t is None), None)
        if slot is None:
            extra += 1
        else:
            slots[slot] = body
    return Sections(tuple(slots), extra)


def echoes_query(text: str, query: str, min_overlap: float = 0.8) -> bool:
    """Whether ``text`` is the query said again: at least ``min_overlap`` of its words are the query's
    (an agent that copies the question into the hypothesis adds nothing a raw search lacks)."""
    words = _flat(text).split()
    if not words:
        return False
    asked = set(_flat(query).split())
    return sum(1 for w in words if w in asked) / len(words) >= min_overlap
