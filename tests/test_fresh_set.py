"""scripts/fresh_set.py: writers' chats and a labeller's labels become a BEIR set, or every problem is named."""

from __future__ import annotations

import pytest

from .conftest import load_script


def _build():
    return load_script("fresh_set").build


def _chat(qid: str, kind: str = "followup") -> dict:
    return {"id": qid, "kind": kind, "history": [{"role": "user", "content": "Как сказать «хочу»?"},
                                                  {"role": "assistant", "content": "-고 싶다: 가고 싶어요."}],
            "text": "а если брат?", "intended": "-고 싶어 하다", "same": False}


def test_chats_and_labels_become_queries_and_qrels() -> None:
    queries, qrels = _build()([_chat("w9-01"), _chat("w9-02", "new")], {
        "w9-01": {"id": "w9-01", "relevant": ["g-b02"], "also_right": ["g-b02", "g-b03"], "turn1_entry": "g-b01",
                  "drop": None},
        "w9-02": {"id": "w9-02", "relevant": [], "turn1_entry": "", "drop": "no entry answers it"}},
        {"g-b01", "g-b02", "g-b03"})
    assert [q["_id"] for q in queries] == ["w9-01"] and qrels == [("w9-01", "g-b02")]  # the dropped one is out
    assert queries[0]["metadata"] == {"kind": "followup", "turn1_entry": "g-b01", "same_entry": False,
                                      "writer": "w9", "writer_note": "-고 싶어 하다",
                                      "also_right": ["g-b03"]}  # the label itself is not repeated there


def test_every_problem_is_named_at_once() -> None:
    with pytest.raises(ValueError) as err:
        _build()([_chat("w9-01"), _chat("w9-01"), _chat("w9-02"), _chat("w9-03"), _chat("w9-04")], {
            "w9-01": {"id": "w9-01", "relevant": ["g-x99"]}, "w9-03": {"id": "w9-03"},
            "w9-04": {"id": "w9-04", "relevant": ["g-b02"], "also_right": ["g-y98"]},
            "w9-09": {"id": "w9-09", "relevant": ["g-b02"]}}, {"g-b02"})
    message = str(err.value)
    for part in ("w9-01: written twice", "w9-02: no label", "['g-x99'] are not entries", "w9-04: ['g-y98'] are not entries", "w9-03: no relevant entry",
                 "w9-09: labelled, but no writer wrote it"):
        assert part in message, part
