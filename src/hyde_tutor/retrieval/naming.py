"""Whether a construction's name (what a hypothesis names in its header) names a grammar entry: the name as
written (:func:`name_match`), a negated construction (:func:`negation_match`) and an inflected one
(:func:`inflection_match`), each compared as the Korean analyser reads both notations
(:func:`~hyde_tutor.retrieval.patterns.pattern_sequences`). The named lead (``hyde/named.py``) ranks them in that
order.
"""

from __future__ import annotations

import itertools
import re

from .patterns import GAP, HANGUL, SOUND_OPTION, is_infix, pattern_sequences

__all__ = ["inflection_match", "name_match", "name_spellings", "negation_match"]

_TENSE = frozenset({"었"})
_STYLE = frozenset({"어요", "요", "ᆸ니다", "ᆸ니까", "다", "어"})
"""Plain speech-style endings: a name that adds only the past tense to one (``-았/었어요``) is about the tense."""
_STYLE_ENDINGS = frozenset((e, "E") for e in (*_STYLE, "ᆸ시오", "어라"))


_KOREAN_BRACKET = re.compile(rf"\((?!{SOUND_OPTION}\))([가-힣][가-힣\s]*)\)")
"""A bracketed Korean piece of a name other than ``(으)``'s kind: ``위해(서)``, ``-(으)ㄹ 걸 (그랬다)``."""


def name_spellings(name: str) -> list[str]:
    """``name`` as written, then without its bracketed Korean pieces, then with them read as part of it:
    ``-는 동안(에)`` is also ``-는 동안`` and ``-는 동안에``, ``-(으)ㄹ 걸 (그랬다)`` also ``-(으)ㄹ 걸`` and ``-(으)ㄹ 걸
    그랬다``. A name's brackets say the piece may be left out; an entry's notation may have it or not, so the lead
    reads every spelling and keeps the best match. (``(으)``, ``(스)``, ``(이)``, ``(ㄴ/는)`` stay: the analyser
    reads them both ways already.)"""
    spellings = [name, " ".join(_KOREAN_BRACKET.sub(" ", name).split()), _KOREAN_BRACKET.sub(r"\1", name)]
    return list(dict.fromkeys(spellings))


def _distinctive(notation: str) -> frozenset[tuple[tuple[str, str], ...]]:
    """The notation's sequences, less a lone jamo ending (``ᆫ`` of ``-(으)ㄴ/는데도``'s first alternative): a
    modifier or nominaliser ending alone is in dozens of notations and names none of them."""
    return frozenset(s for s in pattern_sequences(notation)
                     if not (len(s) == 1 and not HANGUL.search(s[0][0])))


def _longest(sequences: frozenset[tuple[tuple[str, str], ...]]) -> frozenset[tuple[tuple[str, str], ...]]:
    """The sequences with the most letters (``어서`` over ``어`` for ``-아/어서``)."""
    size = {s: sum(len(form) for form, _ in s) for s in sequences}
    top = max(size.values(), default=0)
    return frozenset(s for s in sequences if size[s] == top)


def name_match(name: str, notation: str) -> int:
    """How well an entry's ``notation`` matches the construction ``name`` (e.g. what a hypothesis names):
    2 when their longest morpheme sequences meet (``-고 싶어 하다`` and ``-고 싶어하다``; ``-(으)ㄹ 줄 모르다`` and
    ``-(으)ㄹ 줄 알다/모르다``), 1 when the name's longest sequence is only one of the notation's shorter ones
    (``-겠-`` and an entry that also lists ``-겠-``), 0 otherwise. Only the name's longest sequences (most
    letters) count, so ``-아/어서`` (written out as ``-아`` and ``-어서``) does not name ``-아/어 (반말)``."""
    wanted = _longest(_distinctive(name))
    found = _distinctive(notation)
    if not wanted & found:
        return 0
    return 2 if wanted & _longest(found) else 1


def _inflects(name: tuple[tuple[str, str], ...], entry: tuple[tuple[str, str], ...]) -> bool:
    """Whether ``name`` is ``entry`` inflected: only the past tense before it (an honorific or future infix before
    it has an entry of its own: ``-(으)시겠어요`` is about those, not about ``-아요/어요``; but ``-겠-`` before a
    construction with its own verb inflects it: ``-겠다고 하다`` is ``-다고 하다``), only endings after it,
    infixes included (the entry conjugated: ``-아/어 주시겠어요?`` is ``-아/어 주다``).
    A one-morpheme ``entry`` only with the past tense alone around it (``-았/었지만`` is ``-지만``), and never a plain
    style ending. Three more: an infix entry for a name of infixes, a plain style ending allowed after them and the
    past left out unless alone (``-(으)셨-`` and ``-(으)셨어요`` are ``-(으)시-``, ``-았/었겠다`` is ``-겠-``); an entry
    whose trailing particle the name leaves off (``-는 대신`` is ``-(으)ㄴ/는 대신에``); a construction with its own
    verb in another speech style (``-지 마십시오`` is ``-지 마세요``)."""
    if GAP in entry:
        return False
    if all(is_infix(m) for m in entry):
        name = name[:-1] if len(name) > 1 and name[-1] in _STYLE_ENDINGS else name
        return all(map(is_infix, name)) and (tuple(m for m in name if m[0] not in _TENSE) or name) == entry
    if len(entry) > len(name):
        return len(name) > 1 and entry[:len(name)] == name and all(m[1] == "J" for m in entry[len(name):])
    if len(name) == len(entry) > 1 and name[:-1] == entry[:-1] and {name[-1], entry[-1]} <= _STYLE_ENDINGS:
        return _has_verb(entry)  # another speech style: -지 마십시오 is -지 마세요
    for i in range(len(name) - len(entry) + 1):
        before, after = name[:i], name[i + len(entry):]
        if (name[i:i + len(entry)] == entry and all(_tense_before(m, entry) for m in before)
                and all(m[1] == "E" for m in after)):
            if len(entry) > 1 or (before and not after and entry[0][0] not in _STYLE):
                return True
    return False


def _tense_before(morpheme: tuple[str, str], entry: tuple[tuple[str, str], ...]) -> bool:
    """Whether ``morpheme``, before ``entry`` in a name, only inflects it: the past tense, or the future ``-겠-``
    before a construction with a verb of its own (``-겠다고 하다`` is ``-다고 하다`` quoting a promise, where
    ``-겠어요`` is about ``-겠-``)."""
    return morpheme[1] == "E" and (morpheme[0] in _TENSE or (morpheme[0] == "겠" and _has_verb(entry)))


def _has_verb(entry: tuple[tuple[str, str], ...]) -> bool:
    """Whether ``entry`` is a construction with a verb of its own (``-다고 하다``, ``-지 마세요``), not endings alone."""
    return any(tag == "V" for _, tag in entry)


_HONORIFIC_VERBS = {("계시", "V"): (("있", "V"), ("시", "E"))}
"""Honorific verbs a construction's name uses for its plain verb: ``-고 계시다`` is ``-고 있다`` with ``-(으)시-``."""


def _plain(name: tuple[tuple[str, str], ...]) -> tuple[tuple[str, str], ...]:
    """``name`` with each honorific verb written as its plain verb and the honorific infix."""
    return tuple(itertools.chain.from_iterable(_HONORIFIC_VERBS.get(m, (m,)) for m in name))


def inflection_match(name: str, notation: str) -> int:
    """How many morphemes of ``name`` are one of ``notation``'s sequences when the name is that entry inflected
    (``-(으)려고 했는데`` and ``-(으)려고 하다``: 2; ``-았/었지만`` and ``-지만``: 1; ``-아야/어야 했다`` and
    ``-아야/어야 하다``: 2; ``-(으)셨-`` and ``-(으)시-``: 1; ``-는 대신`` and ``-(으)ㄴ/는 대신에``: 2;
    ``-고 계시다`` and ``-고 있다``: 2, the name's honorific verb read as its plain verb with ``-(으)시-``), 0
    otherwise: an infix entry for a name with more than infixes and a style ending (``-았/었지만`` is not ``-았/었-``;
    ``-겠어요`` is ``-겠-``), an infix the notation lists beside a longer sequence (``-아/어야겠다``'s ``-겠-``), a
    word outside the entry (``-고 계시다`` is not ``계시다``) or a name shorter than the entry by more than a trailing
    particle (``-(으)ㄹ걸`` is not ``-(으)ㄹ걸요``) name nothing this way. For what :func:`name_match` cannot read
    (a name identical to the entry scores here too, but :func:`name_match` reads it first); it ranks below it."""
    entry = _distinctive(notation)
    longest = _longest(entry)
    return max((min(len(found), len(wanted)) for wanted in map(_plain, _longest(_distinctive(name)))
                for found in entry
                if (found in longest or not all(map(is_infix, found))) and _inflects(wanted, found)), default=0)


_NEGATIONS = ((("지", "E"), ("않", "V")), (("지", "E"), ("못하", "V")), (("안", "M"),), (("못", "M"),))
"""The negations a name can put before a construction (``-지 않-``, ``-지 못하-``, ``안``, ``못``)."""


def negation_match(name: str, notation: str) -> int:
    """How many morphemes of ``notation`` follow a negation in ``name`` when the name is exactly a negation and then
    that entry (``-지 않을게요`` and ``-(으)ㄹ게요``: 1; ``-지 않아도 되다`` and ``-아/어도 되다``: 2), 0 otherwise.
    A negated construction is still that construction (a negative promise is a promise): read as
    :func:`inflection_match` reads it, the name would be the negation's entry (``-지 않다``) with an ending. The
    entry must begin with an ending and not be a plain style ending alone (``-지 않아요`` is about the negation)."""
    entry = _distinctive(notation)
    for wanted in _longest(_distinctive(name)):
        for negation in _NEGATIONS:
            rest = wanted[len(negation):]
            if (wanted[:len(negation)] == negation and rest in entry and rest[0][1] == "E"
                    and not (len(rest) == 1 and rest[0][0] in _STYLE)):
                return len(rest)
    return 0
