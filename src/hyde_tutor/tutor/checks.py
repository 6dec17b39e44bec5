"""Checks that need no LLM, for the one Korean sentence a small model may add to a reply (issue 36).

A sentence is kept only when :func:`sentence_problem` finds nothing wrong with it:

* it is Hangul, digits, spaces and punctuation only (no Cyrillic or Latin inside: the 1.5B model wrote
  «그 цвет을 피우는»);
* it is whole: its last morpheme is a final ending (a token cap that cuts «가고 싶» leaves no final ending);
* the entry's pattern is in it, found by the Korean analyser (``retrieval/patterns.py``: kiwipiepy morphemes, not a
  substring: «가고 싶었어요» holds ``-고 싶다``, «고 싶은» in a noun phrase does not end the same way);
* it is not a sentence the conversation already showed (the model repeated turn 2's sentence in turn 3);
* it is no longer than the entry's longest example.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterable, Sequence
from typing import Any

from ..retrieval.analysis import morphemes
from ..retrieval.patterns import HANGUL, pattern_sequences, uses_pattern

__all__ = ["AGREE_MIN", "KOREAN_TEXT", "meaning_check", "meaning_check_of", "korean_sentences", "pattern_sequences", "sentence_problem", "uses_pattern"]

KOREAN_TEXT = re.compile(r"^[가-힣0-9\s.,!?~…\"'«»“”‘’()\-:;]+$")
"""What a Korean sentence of a reply may hold: Hangul syllables, digits, spaces, punctuation."""
NO_EXAMPLES_CHARS = 40
"""How long a sentence may be on an entry with no examples of its own."""
_SENTENCE = re.compile(r"[^.!?…]*[.!?…]+|[^.!?…]+$")


def _key(sentence: str) -> str:
    return "".join(HANGUL.findall(sentence))


def korean_sentences(text: str) -> list[str]:
    """The Korean sentences of a text (its runs of Hangul, spaces and punctuation, cut at sentence ends)."""
    runs = re.findall(r"[가-힣][가-힣0-9\s,~]*[.!?…]?", text)
    return [s.strip() for run in runs for s in _SENTENCE.findall(run) if len(HANGUL.findall(s)) >= 2]


def sentence_problem(sentence: str, notation: str, examples: Iterable[str],
                     earlier: Iterable[str] = ()) -> str | None:
    """Why ``sentence`` may not stand in a reply on the entry ``notation`` with ``examples``: a short reason,
    or None when it passes every check (see the module docstring). ``earlier``: Korean the conversation showed."""
    sentence = sentence.strip()
    if len(HANGUL.findall(sentence)) < 3:
        return "no Korean sentence"
    if not KOREAN_TEXT.match(sentence):
        return "not Hangul and punctuation only"
    if len(korean_sentences(sentence)) > 1:
        return "more than one sentence"
    tokens = [t for _, t, _, _ in morphemes(sentence) if not t.startswith(("S", "W_", "Z"))]
    if not tokens or tokens[-1] != "EF":
        return "not a whole sentence"
    longest = max((len(e) for e in examples), default=NO_EXAMPLES_CHARS)
    if len(sentence) > longest:
        return "longer than the entry's examples"
    if not uses_pattern(sentence, notation):
        return "the entry's pattern is not in it"
    key = _key(sentence)
    if any(_key(s) == key for s in earlier):
        return "a sentence shown before"
    return None


AGREE_MIN = 0.5
"""The least cosine (USE-multilingual-v3) between the model's Korean sentence and its translation. On the 480
example pairs of data/grammar.jsonl: 87.5 % of true pairs pass, 0.2 % of shuffled ones; «물고 싶어요» ("I want to
bite") for «Хочу поехать в Пусан.» scores 0.41, «부산에 가고 싶어요» 0.56."""
TOPIC_MIN = 0.3
"""The least cosine between the Korean sentence and the learner's message (with the previous question in front
of a follow-up): «부산에 가고 싶어요» scores 0.43 against «Как сказать, что я хочу поехать в Пусан?», «물고 싶어요» 0.25."""


def meaning_check(embed: Callable[[list[str]], Any], message: str):  # type: ignore[no-untyped-def]
    """``agrees(korean, russian)`` for a reply to ``message``: the Korean sentence and its translation close in
    a cross-lingual sentence embedding (``embed``: texts -> unit rows, the retriever's dense embedder), and the
    sentence close to the message. An embedder failure agrees with nothing (the sentence is not shown)."""
    def agrees(korean: str, russian: str) -> bool:
        try:
            rows = embed([korean, russian, message])
            return float(rows[0] @ rows[1]) >= AGREE_MIN and float(rows[0] @ rows[2]) >= TOPIC_MIN
        except Exception:  # noqa: BLE001 - unchecked: not shown
            return False
    return agrees


def meaning_check_of(retriever: Any, message: str, turns: Sequence[tuple[str, str]] = ()):  # type: ignore[no-untyped-def]
    """:func:`meaning_check` with a :class:`~hyde_tutor.hyde.HydeRetriever`'s dense embedder, for ``message`` after
    the conversation's ``(role, text)`` ``turns`` (a follow-up is read with the previous question in front); None
    when the retriever has no dense embedder."""
    dense = getattr(getattr(retriever, "retriever", None), "dense", None)
    if dense is None or not hasattr(dense, "embed"):
        return None
    previous = next((text for role, text in reversed(turns) if role == "user"), "")
    return meaning_check(dense.embed, f"{previous} {message}".strip())
