"""Where a served turn's time goes: the server's stage timings (``GET /api/operator/timings``) and the timed
conversation store."""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest
from pydantic_ai.conversation_store import InMemoryConversationStore
from starlette.testclient import TestClient

from hyde_tutor.server import create_app
from hyde_tutor.tutor.timings import STAGES, StageTimes, TimedConversationStore

from .served_stub import stub_parts
from .test_server_api import TOKEN, _settings, ask


def test_stage_times_summarise_each_stage_in_order_with_percentiles() -> None:
    times = StageTimes(keep=100)
    for ms in range(1, 101):
        times.add("load", ms / 1000)
    with times.time("turn"):
        pass
    times.add("custom", 0.5)
    summary = times.summary()
    assert list(summary) == ["load", "turn", "custom"]  # STAGES order, then the others
    assert summary["load"] == {"n": 100, "mean_ms": 50.5, "p50_ms": 51.0, "p95_ms": 96.0}
    times.add("load", 1.0)  # keeps the last 100 only
    assert times.summary()["load"]["n"] == 100 and times.summary()["load"]["p95_ms"] == 97.0
    times.clear()
    assert times.summary() == {}
    with pytest.raises(ValueError, match="keep must be at least 1"):
        StageTimes(keep=0)


def test_a_stage_that_raises_is_still_timed() -> None:
    times = StageTimes()
    with pytest.raises(RuntimeError), times.time("events"):
        raise RuntimeError("the database went away")
    assert times.summary()["events"]["n"] == 1


def test_the_timed_store_times_reads_and_writes_and_changes_nothing() -> None:
    from pydantic_ai.messages import ModelRequest, ModelResponse, TextPart, UserPromptPart
    from pydantic_ai.usage import RunUsage

    from pydantic_ai.conversation_store import Conversation

    times = StageTimes()
    inner = InMemoryConversationStore()
    store = TimedConversationStore(inner, times)

    async def scenario() -> tuple[int, int]:
        messages = [ModelRequest(parts=[UserPromptPart("привет")]), ModelResponse(parts=[TextPart("안녕하세요")])]
        await store.save(Conversation(messages=messages, usage=RunUsage(requests=1), conversation_id="c1"),
                         scope="learner")
        loaded = await store.load("c1", scope="learner")
        direct = await inner.load("c1", scope="learner")
        assert loaded is not None and direct is not None
        return len(loaded.messages), len(direct.messages)

    assert asyncio.run(scenario()) == (2, 2)
    summary = times.summary()
    assert summary["store write"]["n"] >= 1 and summary["store read"]["n"] >= 1


def test_a_served_turn_fills_every_stage_and_the_operator_reads_them(tmp_path: Path) -> None:
    parts = stub_parts(tmp_path, _settings(tmp_path))
    with TestClient(create_app(parts)) as client:
        assert client.get("/api/operator/timings").status_code == 401
        for text in ("Как сказать «хочу»?", "А в прошедшем времени?"):
            response, chunks = ask(client, text)
            assert response.status_code == 200 and chunks
        auth = {"Authorization": f"Bearer {TOKEN}"}
        stages = client.get("/api/operator/timings", headers=auth).json()["stages"]
        # every stage of a tools-mode turn (no structured reply: "reply" is the text reply's grounding)
        for stage in ("request", "load", "search", "cards", "run", "reply", "events", "store read", "store write",
                      "turn"):
            assert stages[stage]["n"] >= 2, stage
        assert stages["cards"]["n"] == 2  # once a turn, however many searches it made
        assert stages["cards"]["p50_ms"] < stages["turn"]["p50_ms"]
        assert set(stages) <= set(STAGES)
        assert stages["turn"]["p50_ms"] >= stages["run"]["p50_ms"] > 0
        cleared = client.get("/api/operator/timings?clear=1", headers=auth).json()["stages"]
        assert cleared["turn"]["n"] == 2
        assert client.get("/api/operator/timings", headers=auth).json()["stages"] == {}
