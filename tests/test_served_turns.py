"""Every served turn is answered and counted as it happened: long conversations, abandoned streams, refused
requests, a failing event log, and the period a turn belongs to (the Starlette app on a stub model)."""

from __future__ import annotations

from pathlib import Path

import pytest
from starlette.testclient import TestClient

from hyde_tutor.config import Settings
from hyde_tutor.server import create_app

from .served_stub import stub_parts
from .test_server_api import ask

HOSTS = ["testserver", "127.0.0.1", "localhost"]


def _settings(tmp_path: Path) -> Settings:
    return Settings(data_dir=tmp_path / "data", server={"allowed_hosts": HOSTS, "rate_per_minute": 1000})


@pytest.mark.parametrize(("mode", "requests_a_turn"), [("tools", 2), ("retrieve-first", 1)])
def test_a_served_conversation_of_twenty_turns_answers_every_turn(tmp_path: Path, mode: str,
                                                                  requests_a_turn: int) -> None:
    parts = stub_parts(tmp_path, _settings(tmp_path), mode=mode)
    with TestClient(create_app(parts)) as client:
        replies = []
        for i in range(20):
            response, chunks = ask(client, f"Вопрос {i}: как сказать «хочу»? 가고 싶어요", chat_id="long")
            assert response.status_code == 200
            replies.append(next(c for c in chunks if c["type"] == "data-reply")["data"])
    assert [r["failed"] for r in replies] == [False] * 20, [r["text"][:60] for r in replies if r["failed"]]
    turns = parts.tutor.log.turns()
    assert len(turns) == 20 and len({t.conversation_id for t in turns}) == 1
    # each turn counts its own requests and tokens, not the whole conversation's so far
    assert [t.agent_requests for t in turns] == [requests_a_turn] * 20
    assert max(t.agent_tokens_in for t in turns) < 4 * min(t.agent_tokens_in for t in turns) + 1000
    loaded = parts.store.load  # the stored conversation holds all twenty exchanges
    import asyncio

    conversation = asyncio.run(loaded(turns[0].conversation_id, scope=turns[0].subject))
    assert conversation is not None and conversation.usage.requests == 20 * requests_a_turn
