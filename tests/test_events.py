"""The in-memory event log keeps the contract every event log keeps (the SQL one is tested in its own file)."""

from __future__ import annotations

import pytest

from hyde_tutor.plugin.events import EventLog, ExperimentEvent, MemoryEventLog, RatingEvent, TurnRecord
from hyde_tutor.plugin.monitor import RetrievalRecord


def _turn(turn_id: str = "t1", subject: str = "s1") -> TurnRecord:
    return TurnRecord(turn_id=turn_id, subject=subject, conversation_id="c1", experiment="x", arm="hyde")


def test_a_turn_is_stored_once_and_outcomes_are_set_later() -> None:
    log = MemoryEventLog()
    assert isinstance(log, EventLog)
    log.add_turn(_turn())
    with pytest.raises(ValueError, match="already stored"):
        log.add_turn(_turn())
    assert log.update_turn("t1", rephrase=True, judge_score=0.5)
    assert not log.update_turn("nope", rephrase=True)
    with pytest.raises(ValueError, match="not outcome fields"):
        log.update_turn("t1", arm="raw")
    (turn,) = log.turns()
    assert (turn.rephrase, turn.judge_score, turn.arm) == (True, 0.5, "hyde")


def test_a_rating_reaches_only_the_subjects_own_turn() -> None:
    log = MemoryEventLog()
    log.add_turn(_turn())
    assert not log.add_rating(RatingEvent(turn_id="t1", subject="someone-else", rating=1))
    assert log.add_rating(RatingEvent(turn_id="t1", subject="s1", rating=-1, reason="не то"))
    with pytest.raises(ValueError, match=r"\+1 or -1"):
        log.add_rating(RatingEvent(turn_id="t1", subject="s1", rating=5))
    assert (log.turns()[0].rating, log.turns()[0].rating_reason) == (-1, "не то")


def test_retrievals_and_experiment_events_keep_their_order_and_turn() -> None:
    log = MemoryEventLog()
    rec = RetrievalRecord(experiment="x", arm="raw", use_hyde=False, reason="experiment", tool="grammar_search",
                          collection="grammar")
    log.add_retrieval(rec, "t1")
    log.add_retrieval(rec, None)
    assert [t for t, _ in log.retrievals()] == ["t1", None]
    assert len(log.retrievals("t1")) == 1
    log.add_experiment_event(ExperimentEvent(change="start", experiment="x", hyde_share=0.5, enabled=True))
    log.add_experiment_event(ExperimentEvent(change="stop", experiment="x", hyde_share=0.5, enabled=False))
    assert [e.change for e in log.experiment_events("x")] == ["start", "stop"]
    assert log.latest_experiment_event().change == "stop"


def test_the_last_turn_is_the_learners_latest_in_that_conversation() -> None:
    log = MemoryEventLog()
    assert log.latest_experiment_event() is None and log.last_turn("s1", "c1") is None
    log.add_turn(TurnRecord(turn_id="a", subject="s1", conversation_id="c1", experiment=None, arm="raw", timestamp=1.0))
    log.add_turn(TurnRecord(turn_id="b", subject="s1", conversation_id="c1", experiment=None, arm="raw", timestamp=2.0))
    log.add_turn(TurnRecord(turn_id="c", subject="s2", conversation_id="c1", experiment=None, arm="raw", timestamp=3.0))
    assert log.last_turn("s1", "c1").turn_id == "b"
    assert log.last_turn("s1", "other") is None
    assert log.experiment_events("other") == []
