"""The served tutor's database under contention and failure (issue 37): a read never queues behind a writer
(SQLite: only writes begin IMMEDIATE), a conversation's history is read in one transaction, and a failing save
never carries the learner's text into an error message or the log."""

from __future__ import annotations

import sqlite3
import warnings
from pathlib import Path

import pytest
import sqlalchemy as sa
from pydantic_ai.conversation import Conversation
from pydantic_ai.messages import ModelRequest, ModelResponse, TextPart, UserPromptPart

from hyde_tutor.experiment import sqlstore
from hyde_tutor.experiment.events import ExperimentEvent, TurnRecord
from hyde_tutor.experiment.sqlconversations import SqlConversationStore
from hyde_tutor.experiment.sqlstore import SqlDatabase, SqlEventLog

SECRET_TEXT = "мой-секретный-вопрос-7319"


def _conversation(cid: str, *texts: str) -> Conversation:
    messages = []
    for text in texts:
        messages += [ModelRequest(parts=[UserPromptPart(text)]), ModelResponse(parts=[TextPart("ответ: " + text)])]
    return Conversation(messages=messages, conversation_id=cid)


async def test_a_read_does_not_wait_behind_a_held_write_lock(tmp_path: Path, monkeypatch) -> None:
    monkeypatch.setattr(sqlstore, "BUSY_TIMEOUT_S", 0.05)  # a read that queued behind the writer would fail at once
    path = tmp_path / "served.db"
    database = SqlDatabase(f"sqlite:///{path}")
    log, store = SqlEventLog(database), SqlConversationStore(database)
    log.add_turn(TurnRecord(turn_id="t1", subject="s1", conversation_id="c1", experiment="x", arm="hyde"))
    log.add_experiment_event(ExperimentEvent(change="start", experiment="x", hyde_share=0.5, enabled=True))
    await store.save(_conversation("s1-c1", "привет", "ещё"), scope="s1")
    writer = sqlite3.connect(path, isolation_level=None, timeout=0.05)
    writer.execute("BEGIN IMMEDIATE")  # another worker holds the write lock, mid-transaction
    writer.execute("INSERT INTO hyde_ratings (turn_id, subject, rating) VALUES ('t1', 's1', 1)")
    try:
        assert [t.turn_id for t in log.turns()] == ["t1"] and log.turn("t1") is not None
        assert log.last_turn("s1", "c1") is not None and log.latest_experiment_event().experiment == "x"
        assert log.experiment_events("__health__") == [] and log.ratings() == []  # the uncommitted rating unseen
        loaded = await store.load("s1-c1", scope="s1")
        assert loaded is not None and len(loaded.messages) == 4
        with pytest.raises(sa.exc.OperationalError, match="locked"):  # a write still takes the lock (and waits)
            log.add_turn(TurnRecord(turn_id="t2", subject="s1", conversation_id="c1", experiment="x", arm="raw"))
    finally:
        writer.rollback()
        writer.close()
        database.close()
    assert [t.turn_id for t in SqlEventLog(f"sqlite:///{path}").turns()] == ["t1"]


async def test_a_history_is_read_in_one_transaction(sql_db: SqlDatabase) -> None:
    store = SqlConversationStore(sql_db)
    await store.save(_conversation("s1-c1", *[f"вопрос {i}" for i in range(10)]), scope="s1")
    begun: list[int] = []

    def count(conn) -> None:  # type: ignore[no-untyped-def]
        begun.append(1)

    sa.event.listen(sql_db.engine, "begin", count)
    try:
        record = await store.read_record("s1-c1")
        before = len(begun)
        history = await store.read_history(record.head_id)
    finally:
        sa.event.remove(sql_db.engine, "begin", count)
    assert len(history) == 20 and len(begun) - before == 1


async def test_a_failing_conversation_save_carries_no_learner_text(sql_db: SqlDatabase) -> None:
    store = SqlConversationStore(sql_db)
    with sql_db.engine.begin() as conn:
        conn.execute(sa.text("DROP TABLE hyde_conversation_entries"))  # the save will fail inside the database
    try:
        with pytest.raises(sa.exc.DBAPIError) as failed:
            await store.save(_conversation("s1-c1", SECRET_TEXT), scope="s1")
        text = f"{failed.value}\n{failed.value!r}\n{failed.value.__cause__}"
        assert SECRET_TEXT not in text
        assert "hyde_conversation_entries" in text and "hidden" in text  # it still says where it failed
    finally:
        sql_db.metadata.create_all(sql_db.engine)


def test_a_failing_save_in_a_served_turn_logs_no_learner_text(tmp_path: Path, caplog) -> None:
    from starlette.testclient import TestClient

    from hyde_tutor.config import Settings
    from hyde_tutor.server import create_app

    from .served_stub import stub_parts

    parts = stub_parts(tmp_path, Settings(data_dir=tmp_path / "data", server={"allowed_hosts": ["testserver"]}))
    try:
        with parts.store.database.engine.begin() as conn:
            conn.execute(sa.text("DROP TABLE hyde_conversation_entries"))
        client = TestClient(create_app(parts))
        client.get("/")
        body = {"id": "chat1", "trigger": "submit-message",
                "messages": [{"id": "m1", "role": "user", "parts": [{"type": "text", "text": SECRET_TEXT}]}]}
        with caplog.at_level("DEBUG"), warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            response = client.post("/api/chat", json=body)
        said = caplog.text + "\n".join(str(w.message) for w in caught)
        assert response.status_code == 200 and "conversation_store" in said  # the failure was reported ...
        assert SECRET_TEXT not in said  # ... without the learner's text
    finally:
        for close in parts.closers:
            close()


async def test_a_history_is_one_query_whatever_its_length_and_reads_as_the_walk_does(sql_db: SqlDatabase) -> None:
    """Issue 40: the history was one SELECT per entry (an 8-turn chat: ~30 per load, two loads a turn)."""
    from pydantic_ai.conversation_store import ConversationStore

    store = SqlConversationStore(sql_db)
    await store.save(_conversation("s1-c1", *[f"вопрос {i}" for i in range(12)]), scope="s1")
    record = await store.read_record("s1-c1")
    statements: list[str] = []

    def count(conn, cursor, statement, *args) -> None:  # type: ignore[no-untyped-def]
        if not statement.lstrip().upper().startswith(("BEGIN", "COMMIT", "ROLLBACK")):
            statements.append(statement)

    sa.event.listen(sql_db.engine, "before_cursor_execute", count)
    try:
        history = await store.read_history(record.head_id)
    finally:
        sa.event.remove(sql_db.engine, "before_cursor_execute", count)
    assert len(history) == 24 and len(statements) == 1
    for limit in (None, 0, 1, 5, 24, 30):  # the base class's walk, one entry at a time, is the reference
        walked = await ConversationStore.read_history(store, record.head_id, limit=limit)
        assert await store.read_history(record.head_id, limit=limit) == walked, limit
    assert await store.read_history(None) == []


async def test_a_history_with_a_missing_entry_names_it(sql_db: SqlDatabase) -> None:
    store = SqlConversationStore(sql_db)
    await store.save(_conversation("s1-c1", "раз", "два"), scope="s1")
    record = await store.read_record("s1-c1")
    history = await store.read_history(record.head_id)
    gone = history[1].id
    with sql_db.engine.begin() as conn:
        conn.execute(sql_db.entries.delete().where(sql_db.entries.c.id == gone))
    with pytest.raises(LookupError, match=f"conversation entry '{gone}' is not stored"):
        await store.read_history(record.head_id)
    assert len(await store.read_history(record.head_id, limit=2)) == 2  # the part above the gap still reads
    with pytest.raises(LookupError, match="'nope' is not stored"):
        await store.read_history("nope")


async def test_sqlite_reads_run_on_the_event_loop_and_everything_else_in_a_thread(sql_db: SqlDatabase,
                                                                                   monkeypatch) -> None:
    """A conversation's reads on SQLite run at once on the event loop's thread (a WAL read never waits for a
    writer, above; a worker thread waited for the GIL behind the busy loop: docs/MEASUREMENTS.md); on PostgreSQL,
    and for every write, in a worker thread."""
    import threading

    store = SqlConversationStore(sql_db)
    await store.save(_conversation("c1", "привет"), scope="s1")
    threads: dict[str, int] = {}
    for name in ("_read_record_sync", "_read_history_sync", "_write_record_sync"):
        inner = getattr(store, name)

        def spy(*args, _inner=inner, _name=name):  # type: ignore[no-untyped-def]
            threads[_name] = threading.get_ident()
            return _inner(*args)

        monkeypatch.setattr(store, name, spy)
    loaded = await store.load("c1", scope="s1")
    loaded.messages.append(ModelRequest(parts=[UserPromptPart("ещё")]))
    await store.save(loaded, scope="s1")
    here = threading.get_ident()
    inline = sql_db.url.startswith("sqlite")
    assert (threads["_read_record_sync"] == here) is inline and (threads["_read_history_sync"] == here) is inline
    assert threads["_write_record_sync"] != here
