"""The served tutor's database, on SQLite and on a real PostgreSQL: the conversation store keeps conversations per
learner and refuses a stale save; the log opens from a URL or settings and takes writers from several processes.
The event log's contract (shared with the in-memory log) is in ``tests/test_events.py``."""

from __future__ import annotations

import multiprocessing
from pathlib import Path

import pytest
from pydantic_ai.conversation import Conversation
from pydantic_ai.conversation_store import ConversationConflict
from pydantic_ai.messages import ModelRequest, ModelResponse, TextPart, UserPromptPart

from hyde_tutor.config import Settings
from hyde_tutor.experiment.events import TurnRecord
from hyde_tutor.plugin.monitor import RetrievalRecord
from hyde_tutor.experiment.sqlconversations import SqlConversationStore
from hyde_tutor.experiment.sqlstore import SqlDatabase, database_url, open_event_log


def _turn(turn_id: str = "t1", subject: str = "s1", **kw) -> TurnRecord:
    return TurnRecord(turn_id=turn_id, subject=subject, conversation_id="c1", experiment="x", arm="hyde", **kw)


def _conversation(cid: str, *texts: str) -> Conversation:
    messages = []
    for text in texts:
        messages += [ModelRequest(parts=[UserPromptPart(text)]), ModelResponse(parts=[TextPart("ответ: " + text)])]
    return Conversation(messages=messages, conversation_id=cid)


async def test_conversations_are_kept_per_learner_and_a_stale_save_is_refused(sql_db: SqlDatabase) -> None:
    store = SqlConversationStore(sql_db)
    first = _conversation("learner-a:chat1", "привет")
    entries = await store.save(first, scope="learner-a")
    assert len(entries) == 2
    assert await store.load("learner-a:chat1", scope="learner-b") is None  # another learner reaches nothing
    loaded = await store.load("learner-a:chat1", scope="learner-a")
    assert [m.parts[0].content for m in loaded.messages] == ["привет", "ответ: привет"]
    loaded.messages += _conversation("x", "ещё").messages
    stale = await store.load("learner-a:chat1", scope="learner-a")
    assert len(await store.save(loaded, scope="learner-a")) == 2  # only the new messages are stored
    stale.messages += _conversation("x", "другое").messages
    with pytest.raises(ConversationConflict):
        await store.save(stale, scope="learner-a")
    again = await store.load("learner-a:chat1", scope="learner-a")
    assert len(again.messages) == 4
    assert [r.conversation_id for r in await store.list_conversations(scope="learner-a")] == ["learner-a:chat1"]
    assert await store.list_conversations(scope="learner-b") == []
    with pytest.raises(ConversationConflict):  # an id someone else holds cannot be created again
        await store.save(_conversation("learner-a:chat1", "захват"), scope="learner-b")
    await store.delete("learner-a:chat1", scope="learner-a")
    assert await store.load("learner-a:chat1", scope="learner-a") is None


def test_open_event_log_takes_a_url_or_settings(tmp_path: Path) -> None:
    settings = Settings(data_dir=tmp_path)
    assert database_url(settings) == f"sqlite:///{(tmp_path / 'served.db').resolve()}"
    log = open_event_log(settings)
    log.add_turn(_turn())
    assert [t.turn_id for t in open_event_log(database_url(settings)).turns()] == ["t1"]
    bad = Settings(data_dir=tmp_path, server={"database_url": "postgresql://nobody@/none?host=/nonexistent"})
    with pytest.raises(RuntimeError, match="HYDE_SERVER__DATABASE_URL"):
        open_event_log(bad)


def _write_turns(url: str, worker: int, n: int) -> None:
    log = open_event_log(url)
    for i in range(n):
        log.add_turn(_turn(f"w{worker}-{i}", subject=f"s{worker}"))
        log.update_turn(f"w{worker}-{i}", rephrase=bool(i % 2))
        log.add_retrieval(RetrievalRecord(experiment="x", arm="hyde", use_hyde=True, reason="experiment",
                                          tool="grammar_search", collection="grammar"), f"w{worker}-{i}")


def test_four_processes_write_one_sqlite_file_and_lose_nothing(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path / 'served.db'}"
    open_event_log(url)  # the tables, once
    ctx = multiprocessing.get_context("spawn")
    procs = [ctx.Process(target=_write_turns, args=(url, w, 40)) for w in range(4)]
    for p in procs:
        p.start()
    for p in procs:
        p.join(120)
        assert p.exitcode == 0
    log = open_event_log(url)
    assert len(log.turns()) == 160 and len(log.retrievals()) == 160
    assert sum(t.rephrase for t in log.turns()) == 80
