"""scripts/named_split.py: follow-ups grouped by what their hypothesis names, and whether the label came first."""

from __future__ import annotations

from .conftest import load_script


def _module():
    return load_script("named_split")


def test_a_message_after_two_conversations_keeps_each_conversations_name() -> None:
    """«а если ещё нет?» follows different first turns: each recording is found by message and conversation."""
    from hyde_tutor.evaluation.beir import EvalQuery
    from hyde_tutor.hyde.conversation import render_conversation

    one, two = (("user", "Как сказать «я поел»?"), ("assistant", "-았/었-: 먹었어요.")), (
        ("user", "Как сказать «я сделал»?"), ("assistant", "-았/었-: 했어요."))
    rows = [{"kind": "hypothesis", "query": "а если ещё нет?", "conversation": render_conversation(h), "text": t}
            for h, t in ((one, "Конструкция: 안 / -지 않다"), (two, "Конструкция: 아직 안 -았/었어요"))]
    queries = [EvalQuery("q1", "а если ещё нет?", "", one), EvalQuery("q2", "а если ещё нет?", "", two)]
    assert _module().names_by_query(rows, queries) == {"q1": ["안 / -지 않다"], "q2": ["아직 안 -았/었어요"]}


def test_follow_ups_fall_in_the_group_of_what_their_hypothesis_names() -> None:
    patterns = {"g-b01": "-고 싶다", "g-b02": "-고 싶어하다", "g-b04": "-(으)ㄹ 줄 알다/모르다", "g-b03": "-(으)ㄹ 수 있다/없다"}
    labels = {"q1": ["g-b02"], "q2": ["g-b03"], "q3": ["g-b02"], "q4": ["g-b02"]}
    named = {"q1": ["-고 싶어 하다"], "q2": ["-(으)ㄹ 줄 모르다"], "q3": ["-길 잘했다"], "q4": ["-고 싶어 하다"]}
    firsts = {"q1": "g-b02", "q2": "g-b04", "q3": "g-b01", "q4": "g-b01"}
    groups = _module().split(patterns, labels, {"q2": ["g-b04"]}, named, firsts)
    assert (groups["label"]["n"], groups["label"]["label_first"]) == (2, 1)
    assert groups["label"]["misses"] == [("q4", "-고 싶어 하다", "g-b01")]
    # the lead's own reading: an inflected name names its entry
    inflected = _module().split(patterns, {"q5": ["g-b02"]}, {}, {"q5": ["-고 싶어했다"]}, {"q5": "g-b02"})
    assert (inflected["label"]["n"], inflected["label"]["label_first"]) == (1, 1)
    assert (groups["other"]["n"], groups["other"]["label_first"], groups["other"]["also_right"]) == (1, 0, 1)
    assert (groups["none"]["n"], groups["none"]["label_first"]) == (1, 0)
