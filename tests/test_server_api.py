"""The served tutor's HTTP API on a stub model: a streamed turn and its records, ratings, identities, the
operator endpoints, the limits and the Host check."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path

import pytest
from starlette.testclient import TestClient

from hyde_tutor.config import Settings
from hyde_tutor.server import create_app

from .served_stub import stub_parts

TOKEN = "op-secret-token"
HOSTS = ["testserver", "127.0.0.1", "localhost"]


def _settings(tmp_path: Path, **server) -> Settings:
    return Settings(data_dir=tmp_path / "data", server={"operator_token": TOKEN, "allowed_hosts": HOSTS,
                                                        "host_secret": "host-secret", **server})


@pytest.fixture()
def served(tmp_path: Path) -> Iterator[tuple[TestClient, object]]:
    parts = stub_parts(tmp_path, _settings(tmp_path, rate_per_minute=4))
    with TestClient(create_app(parts)) as client:
        yield client, parts


def ask(client: TestClient, text: str, chat_id: str = "chat1", **headers: str):  # type: ignore[no-untyped-def]
    """One chat message, as the page sends it: a learner without a cookie (and not named by a host application or a
    ``Cookie`` header) opens the page first, which sets the cookie."""
    if "hyde_learner" not in client.cookies and not {"X-Hyde-Learner", "Cookie"} & set(headers):
        assert client.get("/").status_code == 200
    body = {"id": chat_id, "trigger": "submit-message",
            "messages": [{"id": f"m{abs(hash(text))}", "role": "user", "parts": [{"type": "text", "text": text}]}]}
    response = client.post("/api/chat", json=body, headers=headers)
    chunks = [json.loads(line[6:]) for line in response.text.splitlines()
              if line.startswith("data: ") and line != "data: [DONE]"] if response.status_code == 200 else []
    return response, chunks


def test_a_turn_streams_its_reply_cards_first_and_is_recorded_with_its_retrievals(served, caplog) -> None:
    from hyde_tutor.experiment.operations import learner_tag

    client, parts = served
    with caplog.at_level("INFO", logger="hyde_tutor.served"):
        response, chunks = ask(client, "Как сказать «хочу»: 가고 싶어요")
    assert response.status_code == 200 and response.headers["content-type"].startswith("text/event-stream")
    assert "hyde_learner" in client.cookies  # set by the page, GET /
    types = [c["type"] for c in chunks]
    deltas = [c["delta"] for c in chunks if c["type"] == "text-delta"]
    # the stub writes every token at once: the first words go out alone, the rest joined (tutor/coalesce.py;
    # a model slower than its window streams token by token: tests/test_coalesce.py)
    assert len(deltas) >= 2 and len(deltas[0]) < len(reply_text := "".join(deltas)) and reply_text
    assert types.index("data-entries") < types.index("text-delta") < types.index("data-reply")
    # the cards go out when the search ends, not when the model's next response starts (which ends the step)
    assert types.index("data-entries") < types.index("finish-step")
    assert not [t for t in types if t.startswith("tool-")]  # tool calls and raw results stay on the server
    cards = next(c for c in chunks if c["type"] == "data-entries")["data"]["entries"]
    assert cards[0]["pattern"] == "-고 싶다" and "operator" not in json.dumps(chunks)
    reply = next(c for c in chunks if c["type"] == "data-reply")["data"]
    assert reply["text"] == "".join(deltas) and not reply["failed"]
    (turn,) = parts.tutor.log.turns()
    assert turn.turn_id == reply["turn_id"] and turn.arm == "unassigned" and turn.experiment is None
    assert turn.grounded is True and turn.grounded_rank == 1 and turn.found_ids[0] == "g1"
    assert turn.agent_requests == 2 and turn.hypothesis_tokens > 0 and turn.first_token_s is not None
    (retrieval,) = parts.tutor.log.retrievals(turn.turn_id)
    assert retrieval[1].tool == "grammar_search" and retrieval[1].hypothesis_sources == ["agent"]
    (line,) = [r.getMessage() for r in caplog.records if r.name == "hyde_tutor.served"]
    assert learner_tag(turn.subject) in line and "arm unassigned" in line
    assert turn.subject not in line and "хочу" not in line  # the learner hashed, the text never


def test_feedback_is_stored_on_the_learners_own_turn_and_tied_to_its_retrievals(served, tmp_path: Path) -> None:
    client, parts = served
    _, chunks = ask(client, "Как сказать «хочу»: 가고 싶어요")
    turn_id = next(c for c in chunks if c["type"] == "data-reply")["data"]["turn_id"]
    ok = client.post("/api/rating", json={"turn_id": turn_id, "rating": 1, "reason": "  понятно\n и коротко "})
    assert ok.status_code == 200
    (turn,) = parts.tutor.log.turns()
    assert (turn.rating, turn.rating_reason) == (1, "понятно и коротко")
    assert [t for t, _ in parts.tutor.log.retrievals()] == [turn_id]  # the rating's turn holds the retrievals
    with TestClient(client.app) as stranger:  # another learner (own cookie) cannot rate it
        stranger.get("/")
        assert stranger.post("/api/rating", json={"turn_id": turn_id, "rating": -1}).status_code == 404
    assert client.post("/api/rating", json={"turn_id": turn_id, "rating": 5}).status_code == 422
    assert parts.tutor.log.turns()[0].rating == 1


def test_a_tampered_cookie_and_a_false_host_secret_are_refused(served) -> None:
    client, parts = served
    ask(client, "Что значит -지만?")
    learner, sig = client.cookies["hyde_learner"].rsplit(".", 1)
    client.cookies.clear()
    forged = {"Cookie": f"hyde_learner=c-someone-else.{sig}"}  # another id under this learner's signature
    response, _ = ask(client, "Что значит -지만?", **forged)
    assert response.status_code == 403 and "cookie" in response.json()["error"]
    assert client.post("/api/rating", json={"turn_id": "x", "rating": 1}, headers=forged).status_code == 403
    response, _ = ask(client, "Что значит -지만?", **{"X-Hyde-Learner": "u42", "X-Hyde-Host-Secret": "wrong"})
    assert response.status_code == 403
    response, _ = ask(client, "Что значит -지만?", **{"X-Hyde-Learner": "u42", "X-Hyde-Host-Secret": "host-secret"})
    assert response.status_code == 200 and parts.tutor.log.turns()[-1].subject == "h-u42"
    assert len(parts.tutor.log.turns()) == 2  # the refused requests recorded nothing


def test_operator_endpoints_need_the_token_and_toggle_the_experiment_without_a_restart(served) -> None:
    client, parts = served
    assert client.get("/api/operator/status").status_code == 401
    assert client.get("/api/operator/status", headers={"Authorization": "Bearer nope"}).status_code == 401
    assert client.post("/api/operator/experiment", json={"action": "start"}).status_code == 401
    assert client.get("/api/operator/report").status_code == 401
    auth = {"Authorization": f"Bearer {TOKEN}"}
    started = client.post("/api/operator/experiment", json={"action": "start", "share": 1.0, "name": "e1"}, headers=auth)
    assert started.status_code == 200 and started.json()["enabled"] is True
    _, chunks = ask(client, "Как сказать «хочу»: 가고 싶어요", **auth)
    assert parts.tutor.log.turns()[0].arm == "hyde" and parts.tutor.log.turns()[0].experiment == "e1"
    view = next(c for c in chunks if c["type"] == "data-reply")["data"]["operator"]
    assert view["arm"] == "hyde" and view["searches"][0]["why"].startswith("HyDE")
    assert view["hypotheses"] and view["hypotheses"][0]["source"] == "agent"
    status = client.get("/api/operator/status", headers=auth).json()
    assert status["experiment"] == "e1" and status["turns"] == {"hyde": 1}
    assert client.post("/api/operator/experiment", json={"action": "share", "share": 2}, headers=auth).status_code == 422
    assert client.post("/api/operator/experiment", json={"action": "stop"}, headers=auth).json()["enabled"] is False
    ask(client, "Что значит -지만?")
    assert parts.tutor.log.turns()[-1].arm == "unassigned"
    assert client.get("/api/operator/report", headers=auth).status_code == 200


def test_the_operator_endpoints_are_off_without_a_configured_token(tmp_path: Path) -> None:
    parts = stub_parts(tmp_path, Settings(data_dir=tmp_path / "d", server={"allowed_hosts": HOSTS}))
    with TestClient(create_app(parts)) as client:
        response = client.get("/api/operator/status", headers={"Authorization": "Bearer anything"})
        assert response.status_code == 403 and "HYDE_SERVER__OPERATOR_TOKEN" in response.json()["error"]


def test_size_rate_and_host_limits(served) -> None:
    client, parts = served
    response, _ = ask(client, "я" * 2001)
    assert response.status_code == 422 and "2000" in response.json()["error"]
    big = client.post("/api/chat", content=b"{" + b" " * 70_000 + b"}", headers={"Content-Type": "application/json"})
    assert big.status_code == 413
    for _ in range(4):
        assert ask(client, "Что значит -지만?")[0].status_code == 200
    limited, _ = ask(client, "Что значит -지만?")
    assert limited.status_code == 429 and 0 < int(limited.headers["Retry-After"]) <= 60
    rebinding = client.get("/", headers={"Host": "evil.example"})
    assert rebinding.status_code == 400
    assert client.get("/healthz").json()["status"] == "ok"


def test_a_rephrase_marks_the_previous_turn_and_the_conversation_continues(served) -> None:
    client, parts = served
    ask(client, "Как сказать «хочу»: 가고 싶어요")
    ask(client, "Как по-корейски сказать, что я хочу: 가고 싶어요?")
    ask(client, "А что значит -지만?")
    first, second, third = parts.tutor.log.turns()
    assert (first.rephrase, second.rephrase, third.rephrase) == (True, False, None)
    assert len({first.conversation_id, second.conversation_id, third.conversation_id}) == 1
    ask(client, "Как сказать «хочу»: 가고 싶어요", chat_id="chat2")  # another chat: no previous turn
    assert parts.tutor.log.turns()[-1].conversation_id != first.conversation_id


def test_a_failing_model_gives_the_entries_and_one_line_and_no_internals(tmp_path: Path) -> None:
    parts = stub_parts(tmp_path, _settings(tmp_path), fail=True)
    with TestClient(create_app(parts)) as client:
        response, chunks = ask(client, "Как сказать «хочу»: 가고 싶어요")
    assert response.status_code == 200 and "secret-internal-host" not in response.text
    reply = next(c for c in chunks if c["type"] == "data-reply")["data"]
    assert reply["failed"] and reply["text"].startswith("[модель не смогла ответить (ConnectionError)]")
    assert "-고 싶다" in reply["text"]
    (turn,) = parts.tutor.log.turns()
    assert turn.failed and turn.found_ids


def test_another_learner_with_the_same_chat_id_reaches_nothing_of_the_first(served) -> None:
    client, parts = served
    ask(client, "Как сказать «хочу»: 가고 싶어요")
    with TestClient(client.app) as other:
        response, chunks = ask(other, "Как сказать «хочу»: 가고 싶어요")  # same chat id "chat1", same question
        assert response.status_code == 200
    first, second = parts.tutor.log.turns()
    assert first.subject != second.subject and first.conversation_id != second.conversation_id
    assert first.rephrase is None  # the other learner's message is not this learner's next message


class _Judge:
    def __init__(self) -> None:
        self.seen: list[tuple[str, str, int]] = []

    async def maybe_judge(self, turn, question, entries):  # type: ignore[no-untyped-def]
        self.seen.append((turn.turn_id, question, len(entries)))
        return {"judge_score": 0.75, "judge_calls": 1, "judge_tokens": 120}


def test_the_judge_hook_scores_a_turn_after_it_is_recorded(tmp_path: Path) -> None:
    parts = stub_parts(tmp_path, _settings(tmp_path))
    parts.tutor.judge = judge = _Judge()
    with TestClient(create_app(parts)) as client:  # leaving it drains the judgements in flight
        ask(client, "Как сказать «хочу»: 가고 싶어요")
    (turn,) = parts.tutor.log.turns()
    assert judge.seen == [(turn.turn_id, "Как сказать «хочу»: 가고 싶어요", len(turn.found_ids))]
    assert (turn.judge_score, turn.judge_calls, turn.judge_tokens) == (0.75, 1, 120)


async def test_a_served_tutor_finds_the_previous_turn_in_any_event_log(tmp_path: Path) -> None:
    from pydantic_ai.messages import ModelRequest, UserPromptPart

    from hyde_tutor.experiment.events import MemoryEventLog

    parts = stub_parts(tmp_path, _settings(tmp_path))
    parts.tutor.log = log = MemoryEventLog()
    first = await parts.tutor.start_turn("s1", "c1", "Как сказать «хочу»: 가고 싶어요", ())
    await first.finish(None, "ConnectionError: down")
    history = (ModelRequest(parts=[UserPromptPart("Как сказать «хочу»: 가고 싶어요")]),)
    second = await parts.tutor.start_turn("s1", "c1", "Как по-корейски сказать, что я хочу: 가고 싶어요?", history)
    assert second.previous is not None and second.previous.turn_id == first.turn_id
    assert (await parts.tutor.start_turn("s2", "c1", "?", ())).previous is None
    await second.finish(None, "ConnectionError: down")
    # the failed first turn is not in the stored conversation, so its rephrase is left undecided, never guessed
    assert [t.rephrase for t in log.turns()] == [None, None] and all(t.failed for t in log.turns())


def test_a_capable_model_gets_the_relevance_judge_and_the_embedded_one_does_not(tmp_path: Path) -> None:
    from hyde_tutor.config import Settings
    from hyde_tutor.llm.backends import make_llm
    from hyde_tutor.experiment.judge import RelevanceJudge
    from hyde_tutor.server.build import default_judge

    capable = make_llm(Settings(data_dir=tmp_path, llm={"base_url": "http://127.0.0.1:9/v1", "model": "m"}))
    assert isinstance(default_judge(capable, Settings(data_dir=tmp_path)), RelevanceJudge)
    assert default_judge(capable, Settings(data_dir=tmp_path, judge={"share": 0})) is None
    assert default_judge(None, Settings(data_dir=tmp_path)) is None
    replay = make_llm(Settings(data_dir=tmp_path, llm={"provider": "replay"}))
    assert default_judge(replay, Settings(data_dir=tmp_path)) is None


@pytest.mark.parametrize("workers", [1, 2])
def test_with_several_workers_a_chat_response_closes_its_connection(tmp_path: Path, workers: int) -> None:
    """Several uvicorn workers share one socket and a kept-alive connection stays with the worker that accepted it,
    so 50 learners were served 288/112 by two workers (docs/MEASUREMENTS.md); the chat response now closes its
    connection and the next turn goes to whichever worker accepts it first. One worker keeps the connection."""
    parts = stub_parts(tmp_path, _settings(tmp_path, workers=workers))
    with TestClient(create_app(parts)) as client:
        response, chunks = ask(client, "Как сказать «хочу»: 가고 싶어요")
        assert response.status_code == 200 and chunks
        assert (response.headers.get("connection") == "close") is (workers > 1)
        assert client.get("/").headers.get("connection") != "close"  # the page and the rest keep theirs
