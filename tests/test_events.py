"""Every event log keeps one contract: the in-memory log, and the SQL log on SQLite and on a real PostgreSQL.

The served tutor swaps one for another by settings, so each test here runs over all three.
"""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from hyde_tutor.experiment.events import EventLog, ExperimentEvent, MemoryEventLog, RatingEvent, TurnRecord
from hyde_tutor.plugin.monitor import RetrievalRecord
from hyde_tutor.experiment.sqlstore import SqlEventLog

from .conftest import open_database


@pytest.fixture(params=["memory", "sqlite", "postgresql"])
def log(request: pytest.FixtureRequest) -> Iterator[EventLog]:
    if request.param == "memory":
        yield MemoryEventLog()
        return
    database = open_database(request.param, request)
    yield SqlEventLog(database)
    database.close()


def _turn(turn_id: str = "t1", subject: str = "s1", **kw) -> TurnRecord:
    return TurnRecord(turn_id=turn_id, subject=subject, conversation_id="c1", experiment="x", arm="hyde", **kw)


def test_a_turn_is_stored_once_and_outcomes_are_set_later(log: EventLog) -> None:
    assert isinstance(log, EventLog)
    log.add_turn(_turn(found_ids=("g1", "g2"), first_token_s=0.25))
    with pytest.raises(ValueError, match="already stored"):
        log.add_turn(_turn())
    assert log.update_turn("t1", rephrase=True, judge_score=0.5)
    assert not log.update_turn("nope", rephrase=True)
    with pytest.raises(ValueError, match="not outcome fields"):
        log.update_turn("t1", arm="raw")
    (turn,) = log.turns()
    assert (turn.rephrase, turn.judge_score, turn.arm) == (True, 0.5, "hyde")
    assert turn.found_ids == ("g1", "g2") and turn.first_token_s == 0.25 and turn.grounded is None
    assert log.turns("other") == [] and len(log.turns("x")) == 1


def test_a_rating_reaches_only_the_subjects_own_turn(log: EventLog) -> None:
    log.add_turn(_turn())
    assert not log.add_rating(RatingEvent(turn_id="t1", subject="someone-else", rating=1))
    assert log.add_rating(RatingEvent(turn_id="t1", subject="s1", rating=-1, reason="не то"))
    with pytest.raises(ValueError, match=r"\+1 or -1"):
        log.add_rating(RatingEvent(turn_id="t1", subject="s1", rating=5))
    assert (log.turns()[0].rating, log.turns()[0].rating_reason) == (-1, "не то")
    assert [r.subject for r in log.ratings("t1")] == ["s1"]


def test_a_learners_ratings_of_many_turns_are_read_at_once_and_only_their_own(log: EventLog) -> None:
    for turn_id, subject in (("t1", "s1"), ("t2", "s1"), ("t3", "s1"), ("t4", "s2")):
        log.add_turn(_turn(turn_id, subject))
    assert log.add_rating(RatingEvent(turn_id="t1", subject="s1", rating=1))
    assert log.add_rating(RatingEvent(turn_id="t2", subject="s1", rating=1, reason="сначала"))
    assert log.add_rating(RatingEvent(turn_id="t2", subject="s1", rating=-1, reason="передумал"))  # the last counts
    assert log.add_rating(RatingEvent(turn_id="t4", subject="s2", rating=1))
    assert log.rated("s1", ["t1", "t2", "t3", "t4", "nope"]) == {"t1": (1, None), "t2": (-1, "передумал")}
    assert log.rated("s2", ["t1", "t2", "t4"]) == {"t4": (1, None)}  # another learner's ratings are not theirs
    assert log.rated("s1", []) == {}


def test_retrievals_and_experiment_events_keep_their_order_and_turn(log: EventLog) -> None:
    rec = RetrievalRecord(experiment="x", arm="raw", use_hyde=False, reason="experiment", tool="grammar_search",
                          collection="grammar", stages_ms={"total_ms": 3.5}, hypothesis_sources=["agent"])
    log.add_retrieval(rec, "t1")
    log.add_retrieval(rec, None)
    assert [t for t, _ in log.retrievals()] == ["t1", None]
    (only,) = log.retrievals("t1")
    assert only[1] == rec
    log.add_experiment_event(ExperimentEvent(change="start", experiment="x", hyde_share=0.5, enabled=True))
    log.add_experiment_event(ExperimentEvent(change="stop", experiment="x", hyde_share=0.5, enabled=False))
    assert [e.change for e in log.experiment_events("x")] == ["start", "stop"]
    assert log.experiment_events("other") == []
    assert log.latest_experiment_event().change == "stop"


def test_the_last_turn_is_the_learners_latest_in_that_conversation(log: EventLog) -> None:
    assert log.latest_experiment_event() is None and log.last_turn("s1", "c1") is None
    log.add_turn(_turn("a", timestamp=1.0))
    log.add_turn(_turn("b", timestamp=2.0))
    log.add_turn(_turn("c", subject="s2", timestamp=3.0))
    assert log.last_turn("s1", "c1").turn_id == "b"
    assert log.last_turn("s1", "other") is None and log.last_turn("s3", "c1") is None


def test_an_abandoned_turn_keeps_its_mark_and_its_start_time(log: EventLog) -> None:
    log.add_turn(_turn("a", abandoned=True, seconds=1.5, timestamp=10.0))
    log.add_turn(_turn("b", timestamp=11.0))
    first, second = log.turns()
    assert (first.abandoned, first.seconds, first.timestamp) == (True, 1.5, 10.0)
    assert second.abandoned is False


def test_a_database_made_before_a_turn_field_existed_gets_its_column(tmp_path) -> None:
    import sqlalchemy as sa

    from hyde_tutor.experiment.sqlstore import SqlDatabase

    url = f"sqlite:///{tmp_path / 'old.db'}"
    old = SqlDatabase(url)
    SqlEventLog(old).add_turn(_turn("old"))
    with old.engine.begin() as conn:
        conn.exec_driver_sql("ALTER TABLE hyde_turns DROP COLUMN abandoned")  # as a database made before it was
    assert "abandoned" not in {c["name"] for c in sa.inspect(old.engine).get_columns("hyde_turns")}
    old.close()
    log = SqlEventLog(url)
    log.add_turn(_turn("new", abandoned=True))
    assert {t.turn_id: t.abandoned for t in log.turns()} == {"old": False, "new": True}
    log.close()
