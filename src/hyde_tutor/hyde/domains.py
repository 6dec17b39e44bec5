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
    min_hangul_chars: int
    """Drop a hypothesis with fewer Hangul characters (``HYDE_HYDE__MIN_HANGUL_CHARS`` overrides)."""


DOMAINS: dict[str, DomainProfile] = {
    "grammar": DomainProfile(name="grammar", prompt="hypothesis_grammar", request="hypothesis_request",
                             perspectives="perspectives", min_hangul_chars=4),
    "docs": DomainProfile(name="docs", prompt="hypothesis_docs", request="hypothesis_request",
                          perspectives="perspectives", min_hangul_chars=4),
    "passage": DomainProfile(name="passage", prompt="hypothesis_passage", request="hypothesis_passage_request",
                             perspectives="perspectives_passage", min_hangul_chars=0),
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
