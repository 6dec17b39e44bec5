"""Did the learner ask the same thing again? A learner who rephrases the last question right after the reply
signals that the reply missed; a follow-up on the same topic ("а в прошедшем времени?") is not that.

:func:`is_rephrase` compares the two questions by character trigrams of their words (robust to Russian
endings: «поехать» / «поехал»), and counts a weaker overlap too when both turns' searches found the same
top entry. No model call: it runs on every served turn.
"""

from __future__ import annotations

import re

__all__ = ("is_rephrase", "question_similarity")

_WORD = re.compile(r"[a-zа-яё가-힣0-9]+", re.IGNORECASE)
_STOP = frozenset("как что это а и в на по с к у о я ты мне меня не ли же или от до для чем чём мой моя "
                  "сказать скажу говорить корейски корейском значит означает будет можно нужно вопрос понял "
                  "the a is how what to say korean".split())
"""Short words and the frame of a question («как сказать по-корейски»): they say nothing about its subject."""
SIMILAR = 0.6
"""Trigram overlap above which two questions are the same question, whatever the search found."""
SIMILAR_SAME_TOP = 0.45
"""A lower overlap counts when both searches found the same top entry."""


def _trigrams(text: str) -> set[str]:
    grams: set[str] = set()
    for word in _WORD.findall(text.lower().replace("ё", "е")):
        if word in _STOP:
            continue
        padded = f" {word} "
        grams.update(padded[i:i + 3] for i in range(len(padded) - 2))
    return grams


def question_similarity(a: str, b: str) -> float:
    """Jaccard overlap (0..1) of the two questions' word trigrams, common short words left out."""
    x, y = _trigrams(a), _trigrams(b)
    if not x or not y:
        return 0.0
    return len(x & y) / len(x | y)


def is_rephrase(previous: str, current: str, previous_top: str | None = None, current_top: str | None = None) -> bool:
    """Whether ``current`` asks what ``previous`` asked (the learner's next message after a reply).

    Args:
        previous: the learner's previous question.
        current: the learner's next message.
        previous_top: id of the top entry the previous turn found (None: unknown or nothing found).
        current_top: id of the top entry this turn found.
    """
    if not previous.strip() or not current.strip():
        return False
    similarity = question_similarity(previous, current)
    if similarity >= SIMILAR:
        return True
    same_top = previous_top is not None and previous_top == current_top
    return same_top and similarity >= SIMILAR_SAME_TOP
