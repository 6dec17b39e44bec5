"""The rephrase detector: the same question asked again is one; a follow-up or a new question is not."""

from __future__ import annotations

import pytest

from hyde_tutor.experiment.rephrase import is_rephrase, question_similarity


@pytest.mark.parametrize(("previous", "current"), [
    ("Как сказать «хочу поехать в Пусан»?", "Как по-корейски сказать, что я хочу поехать в Пусан?"),
    ("Как сказать «хочу поехать в Пусан»?", "хочу поехать в пусан, как это будет по-корейски"),
    ("Что значит -지만?", "не понял, что означает -지만"),
])
def test_the_same_question_again_is_a_rephrase(previous: str, current: str) -> None:
    assert is_rephrase(previous, current)


@pytest.mark.parametrize(("previous", "current"), [
    ("Что значит -지만?", "А как сказать «хочу есть»?"),
    ("Как сказать «хочу поехать в Пусан»?", "А в прошедшем времени?"),  # a follow-up, not the same question
    ("Как сказать «я могу плавать»?", "Как сказать «я могу читать»?"),  # the frame is shared, the subject is not
    ("Как сказать «хочу поехать в Пусан»?", ""),
])
def test_a_follow_up_or_a_new_question_is_not(previous: str, current: str) -> None:
    assert not is_rephrase(previous, current, "g-b01", "g-b01")


def test_the_same_top_entry_lowers_the_bar() -> None:
    previous, current = "Как вежливо сказать «хочу поехать в Пусан»?", "хочу поехать — как это?"
    assert 0.45 <= question_similarity(previous, current) < 0.6
    assert not is_rephrase(previous, current, "g-b01", "g-c02")
    assert is_rephrase(previous, current, "g-b01", "g-b01")
