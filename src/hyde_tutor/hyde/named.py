"""The entry a hypothesis names goes first (``HydePolicy.named_lead``, issue 39).

A hypothesis in the grammar format names its construction in its first line («Конструкция: -아/어 (반말)»). Its
words can still rank a neighbouring entry a hair higher (its examples share the earlier question's words); its
name cannot be outvoted: when an entry of the fused top N has that pattern, it goes first. The notations are
compared by the Korean analyser (:func:`~hyde_tutor.retrieval.naming.name_match`), so spelling and spacing do
not matter and a name matches one alternative of an entry's notation.
"""

from __future__ import annotations

import logging
import re
from collections.abc import Mapping, Sequence
from typing import Any

from ..retrieval.naming import inflection_match, name_match, name_spellings, negation_match
from .domains import DomainProfile
from .result import RetrievedDoc
from .stages import keep_on_top

__all__ = ["NO_NAME", "kept_texts", "lead_named", "named_construction", "name_strength", "notation_of"]

_log = logging.getLogger("hyde_tutor.hyde")
_NEXT_HEADER = re.compile(r"\s+(?:[*_]+\s*)?[А-ЯЁA-Z][а-яёa-z]+(?:\s[а-яёa-z]+)?\s*:")
_CUT = re.compile(r"\s[—–]\s|\s\(напр|;")
_STRIP = "*_«»\"'`“” .,!:;"
_PARTS = re.compile(r"\s+/\s+")


def named_construction(text: str, header: str) -> str | None:
    """The construction a hypothesis names after ``header`` (case aside, markdown emphasis allowed), up to the
    line's end or the next «Header:» (one or two words), without a trailing gloss («-고 싶다 — желание») or
    punctuation; None when the header is missing or names nothing."""
    found = re.search(rf"(?:[*_]+\s*)?{re.escape(header.rstrip(':'))}\s*:\s*[*_]*\s*(.+)", text, re.IGNORECASE)
    if not found:
        return None
    name = _NEXT_HEADER.split(found.group(1).split("\n", 1)[0], maxsplit=1)[0]
    name = _CUT.split(name, maxsplit=1)[0].strip(_STRIP)
    return name or None


def notation_of(payload: Mapping[str, Any] | None, field: str) -> str | None:
    """An entry's notation: the payload's ``field``, else a BEIR export's title («-고 싶다 — желание …»)."""
    if not payload:
        return None
    value = payload.get(field) or str(payload.get("title") or "").split(" — ", 1)[0]
    return str(value) if value else None


def kept_texts(hypotheses: Sequence[Any], channels: Mapping[str, Any]) -> list[str]:
    """The texts of the hypotheses whose channel (``hyde:<perspective>``) the agreement gate kept: an off-topic
    hypothesis names nothing the search should follow."""
    return [h.text for h in hypotheses if f"hyde:{h.perspective}" in channels]


NO_NAME: tuple[int, ...] = (0,) * 6
"""What :func:`name_strength` gives an entry the names do not name."""


def name_strength(names: Sequence[str], notation: str) -> tuple[int, ...]:
    """How well an entry's ``notation`` matches the constructions ``names``, as the lead ranks it (compare the
    tuples): :func:`name_match` of a whole name, then :func:`negation_match` (a negated construction is that
    construction: «-지 않을게요» is -(으)ㄹ게요, not -지 않다), then :func:`inflection_match` of a whole name, then the
    same three for the parts of a name «A / B» (split on a spaced slash only; a comma can be inside one
    construction's name). Each name is read in each of its :func:`name_spellings` (``-(으)ㄹ 걸 (그랬다)`` also as
    ``-(으)ㄹ 걸 그랬다``). All zeros: the names do not name the entry."""
    def score(candidates: Sequence[str]) -> tuple[int, int, int]:
        exact = max((name_match(n, notation) for n in candidates), default=0)
        if exact:
            return exact, 0, 0
        negated = max((negation_match(n, notation) for n in candidates), default=0)
        return 0, negated, 0 if negated else max((inflection_match(n, notation) for n in candidates), default=0)

    spelled = [s for n in names for s in name_spellings(n)]
    whole = score(spelled)
    parts = [p for n in spelled if _PARTS.search(n) for p in _PARTS.split(n) if p.strip()]
    return (*whole, *((0, 0, 0) if any(whole) or not parts else score(parts)))


def lead_named(fused: Sequence[RetrievedDoc], texts: Sequence[str], profile: DomainProfile,
               depth: int) -> list[RetrievedDoc]:
    """``fused`` with the entry of its top ``depth`` that best matches a construction the hypotheses ``texts``
    name (the profile's ``name_header``) moved first, its score raised to stay on top (``stages.keep_on_top``);
    the best-ranked among equally good matches (:func:`name_strength`: the name as written first, then as a negated
    construction, «-지 않을게요» naming -(으)ㄹ게요, then as an inflected form of an entry, «-(으)려고 했는데» naming
    -(으)려고 하다; «A / B» names A or B where no entry of the top ``depth`` matches the whole name). Unchanged when
    nothing matches, ``depth`` is 0, the domain's hypotheses name nothing, or the analyser fails (logged: the fused
    ranking stands). Blocking (the analyser)."""
    if not (depth and profile.name_header and profile.name_field):
        return list(fused)
    try:
        names = [n for n in (named_construction(t, profile.name_header) for t in texts) if n]
        best, first = NO_NAME, None
        for doc in fused[:depth] if names else ():
            notation = notation_of(doc.payload, profile.name_field)
            strength = name_strength(names, notation) if notation else NO_NAME
            if strength > best:
                best, first = strength, doc
    except Exception:  # noqa: BLE001 - a HyDE refinement never fails the search
        _log.warning("hyde-tutor: the named lead failed; the fused ranking stands", exc_info=True)
        return list(fused)
    if first is None or first is fused[0]:
        return list(fused)
    return keep_on_top(fused, [first.id], 1)
