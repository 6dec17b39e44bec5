"""The served tutor under traffic that does not behave (issue 37): a client without a cookie, a flood of new
learners, forwarded headers from anyone, bodies that never end, several messages in one request, malformed
bodies, an unreachable vector store, a bad experiment name, the secret file's mode, and the served path's
collections. Each test names what it guards; all on the stub model."""

from __future__ import annotations

import json
import os
import socket
import stat
from collections.abc import Iterator
from pathlib import Path

import pytest
from starlette.testclient import TestClient

from hyde_tutor.config import Settings
from hyde_tutor.server import create_app

from .served_stub import stub_parts

TOKEN = "op-secret-token"
HOSTS = ["testserver", "127.0.0.1", "localhost"]
QUESTION = "Как сказать «хочу»: 가고 싶어요"


def _settings(tmp_path: Path, **server) -> Settings:
    return Settings(data_dir=tmp_path / "data", server={"operator_token": TOKEN, "allowed_hosts": HOSTS, **server})


@pytest.fixture()
def make_parts(tmp_path: Path) -> Iterator:
    made = []

    def make(**server):  # type: ignore[no-untyped-def]
        parts = stub_parts(tmp_path / f"p{len(made)}", _settings(tmp_path / f"p{len(made)}", **server))
        made.append(parts)
        return parts

    yield make
    for parts in made:
        for close in parts.closers:
            close()


def _body(text: str = QUESTION, *, chat_id: str = "chat1", messages: list | None = None, **extra) -> dict:
    message = {"id": f"m{abs(hash(text))}", "role": "user", "parts": [{"type": "text", "text": text}]}
    return {"id": chat_id, "trigger": "submit-message", "messages": messages or [message], **extra}


def _reply(response) -> dict:  # type: ignore[no-untyped-def]
    chunks = [json.loads(line[6:]) for line in response.text.splitlines() if line.startswith("data: {")]
    return next(c["data"] for c in chunks if c["type"] == "data-reply")


# --- 1. every learner real -------------------------------------------------------------------------------------

def test_the_chat_refuses_a_request_without_a_learner_and_makes_none(make_parts) -> None:
    parts = make_parts()
    client = TestClient(create_app(parts))
    for _ in range(3):  # a cookie-less loop: refused every time, nothing minted, nothing spent
        response = client.post("/api/chat", json=_body())
        assert response.status_code == 403 and "open the chat page" in response.json()["error"]
        assert "set-cookie" not in response.headers
    assert client.post("/api/rating", json={"turn_id": "t1", "rating": 1}).status_code == 403
    assert parts.tutor.log.turns() == []
    assert client.get("/").status_code == 200 and "hyde_learner" in client.cookies  # the page makes the learner
    answered = client.post("/api/chat", json=_body())
    assert answered.status_code == 200 and not _reply(answered)["failed"]
    assert len({t.subject for t in parts.tutor.log.turns()}) == 1


def test_the_page_makes_at_most_the_configured_new_learners_a_minute_per_address(make_parts) -> None:
    app = create_app(make_parts(new_learners_per_minute=3))
    client = TestClient(app, client=("203.0.113.7", 5000))
    for _ in range(3):
        client.cookies.clear()
        assert client.get("/").status_code == 200 and "hyde_learner" in client.cookies
    client.cookies.clear()
    refused = client.get("/")
    assert refused.status_code == 429 and 0 < int(refused.headers["Retry-After"]) <= 60
    assert "NEW_LEARNERS_PER_MINUTE" in refused.json()["error"] and "set-cookie" not in refused.headers
    known = TestClient(app, client=("203.0.113.7", 5001))
    known.get("/", headers={"X-Forwarded-For": "198.51.100.1"})  # no proxy is trusted: the header changes nothing
    assert "hyde_learner" not in known.cookies
    other = TestClient(app, client=("203.0.113.8", 5000))  # another address has its own count
    for _ in range(5):  # past the limit of 3: a learner with its cookie is not a new learner
        assert other.get("/").status_code == 200


def test_x_forwarded_for_is_believed_only_from_a_trusted_proxy(make_parts) -> None:
    app = create_app(make_parts(new_learners_per_minute=1, trusted_proxies=["10.0.0.0/24"]))

    def fresh(peer: str, forwarded: str) -> int:
        return TestClient(app, client=(peer, 4000)).get("/", headers={"X-Forwarded-For": forwarded}).status_code

    assert fresh("10.0.0.1", "198.51.100.1") == 200
    assert fresh("10.0.0.2", "198.51.100.1") == 429  # the same client through another of our proxies
    assert fresh("10.0.0.1", "198.51.100.2") == 200  # another client behind the proxy
    assert fresh("10.0.0.1", "192.0.2.99, 198.51.100.2") == 429  # what the client wrote on the left is not believed
    assert fresh("203.0.113.5", "198.51.100.3") == 200  # an untrusted peer: its own address counts, not the header
    assert fresh("203.0.113.5", "198.51.100.4") == 429


# --- 2. body limits --------------------------------------------------------------------------------------------

CHUNK = 64 * 1024


async def _post_chunked(app, path: str, headers: list[tuple[bytes, bytes]], total: int) -> tuple[int, int]:  # type: ignore[no-untyped-def]
    """POST ``total`` bytes in chunks with no Content-Length straight to the ASGI app: (status, bytes it pulled)."""
    pulled = 0
    sent: list[dict] = []

    async def receive() -> dict:
        nonlocal pulled
        if pulled >= total:
            return {"type": "http.disconnect"}
        pulled += CHUNK
        return {"type": "http.request", "body": b" " * CHUNK, "more_body": pulled < total}

    async def send(message: dict) -> None:
        sent.append(message)

    scope = {"type": "http", "asgi": {"version": "3.0"}, "http_version": "1.1", "method": "POST", "scheme": "http",
             "path": path, "raw_path": path.encode(), "query_string": b"", "root_path": "",
             "server": ("testserver", 80), "client": ("127.0.0.1", 1234),
             "headers": [(b"host", b"testserver"), (b"content-type", b"application/json"),
                         (b"transfer-encoding", b"chunked"), *headers]}
    await app(scope, receive, send)
    return next(m["status"] for m in sent if m["type"] == "http.response.start"), pulled


@pytest.mark.parametrize("path", ["/api/chat", "/api/rating", "/api/operator/experiment"])
async def test_a_200_mib_chunked_body_is_cut_at_the_cap_without_being_read(make_parts, path: str) -> None:
    parts = make_parts()
    app = create_app(parts)
    _, cookie = parts.identity.new_cookie()
    headers = [(b"cookie", f"hyde_learner={cookie}".encode()), (b"authorization", f"Bearer {TOKEN}".encode())]
    status, pulled = await _post_chunked(app, path, headers, 200 * 1024 * 1024)
    cap = parts.settings.server.max_body_bytes
    assert status == 413 and pulled <= cap + CHUNK  # refused at the cap: the other 199.9 MiB never read
    declared = [*headers, (b"content-length", str(10**9).encode())]
    assert await _post_chunked(app, path, declared, 10**9) == (413, 0)  # a declared length over it: nothing read


# --- 3. one new message per request ----------------------------------------------------------------------------

def test_a_long_first_message_cannot_ride_in_front_of_a_short_last_one(make_parts) -> None:
    parts = make_parts()
    client = TestClient(create_app(parts))
    client.get("/")
    long = {"id": "m1", "role": "user", "parts": [{"type": "text", "text": "я" * 30_000}]}
    short = {"id": "m2", "role": "user", "parts": [{"type": "text", "text": "Что значит -지만?"}]}
    response = client.post("/api/chat", json=_body(messages=[long, short]))
    assert response.status_code == 422 and "one new learner message" in response.json()["error"]
    split = {"id": "m3", "role": "user", "parts": [{"type": "text", "text": "я" * 1500}, {"type": "text", "text": "я" * 1500}]}
    assert client.post("/api/chat", json=_body(messages=[split])).status_code == 422  # the limit is on the message
    assert parts.tutor.log.turns() == []
    assert client.post("/api/chat", json=_body(messages=[short])).status_code == 200


# --- 4. the cookie's Secure flag -------------------------------------------------------------------------------

def _set_cookie(response) -> str:  # type: ignore[no-untyped-def]
    (value,) = [v for k, v in response.headers.multi_items() if k == "set-cookie"]
    return value.lower()


def test_the_cookie_is_secure_by_the_scheme_not_the_bind_address(make_parts) -> None:
    app = create_app(make_parts(host="0.0.0.0", trusted_proxies=["127.0.0.1"]))
    plain = _set_cookie(TestClient(app).get("/"))  # http on 0.0.0.0: a Secure cookie would be dropped
    assert "hyde_learner=" in plain and "secure" not in plain and "httponly" in plain
    assert "secure" in _set_cookie(TestClient(app, base_url="https://testserver").get("/"))
    proxied = TestClient(app, client=("127.0.0.1", 4000)).get("/", headers={"X-Forwarded-Proto": "https"})
    assert "secure" in _set_cookie(proxied)  # https at the trusted proxy, http behind it
    forged = TestClient(app, client=("203.0.113.9", 4000)).get("/", headers={"X-Forwarded-Proto": "https"})
    assert "secure" not in _set_cookie(forged)


def test_the_cookie_is_secure_behind_a_tls_proxy_on_the_loopback(make_parts) -> None:
    app = create_app(make_parts(host="127.0.0.1", trusted_proxies=["127.0.0.1"]))
    response = TestClient(app, client=("127.0.0.1", 4000)).get("/", headers={"X-Forwarded-Proto": "https"})
    assert "secure" in _set_cookie(response)


# --- 7. malformed requests -------------------------------------------------------------------------------------

def test_malformed_requests_get_a_one_line_422_and_take_no_rate_limit_slot(make_parts) -> None:
    parts = make_parts(rate_per_minute=2)
    client = TestClient(create_app(parts), raise_server_exceptions=False)
    client.get("/")
    no_id = _body(messages=[{"role": "user", "parts": [{"type": "text", "text": QUESTION}]}])
    no_trigger = {k: v for k, v in _body().items() if k != "trigger"}
    unknown = _body(trigger="submit-everything")
    errors = []
    for body in (no_id, no_trigger, unknown, [1, 2], _body(chat_id="../x")):
        response = client.post("/api/chat", json=body)
        assert response.status_code == 422, (body, response.text)
        errors.append(response.json()["error"])
    assert all("\n" not in e for e in errors) and "messages.0.id" in errors[0]
    assert "submit-message" in errors[1] and "regenerate-message" in errors[1] and "regenerate-message" in errors[2]
    for _ in range(2):  # the two messages a minute are still there
        assert client.post("/api/chat", json=_body()).status_code == 200
    assert client.post("/api/chat", json=_body()).status_code == 429
    turn_id = parts.tutor.log.turns()[0].turn_id
    for value in ("1e400", "1.9", "true", '"1"'):
        response = client.post("/api/rating", content=f'{{"turn_id": "{turn_id}", "rating": {value}}}',
                               headers={"Content-Type": "application/json"})
        assert response.status_code == 422 and "rating must be 1 or -1" in response.json()["error"], value
    assert client.post("/api/rating", json={"turn_id": {"a": 1}, "rating": 1}).status_code == 422
    assert parts.tutor.log.turns()[0].rating is None  # 1.9 was not taken as 1
    assert client.post("/api/rating", json={"turn_id": turn_id, "rating": -1.0}).status_code == 200
    assert parts.tutor.log.turns()[0].rating == -1


# --- 8. health reaches the vector store ------------------------------------------------------------------------

def test_health_says_503_when_the_vector_store_does_not_answer(make_parts) -> None:
    from hyde_tutor.retrieval.store.client import QdrantClientStore

    parts = make_parts()
    client = TestClient(create_app(parts))
    assert client.get("/healthz").status_code == 200
    with socket.socket() as s:  # a local port nobody listens on
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    parts.tutor.retriever.retriever.store = QdrantClientStore.connect(f"http://127.0.0.1:{port}", timeout_s=2)
    response = client.get("/healthz")
    assert response.status_code == 503 and "vector store unreachable" in response.json()["error"]


# --- 9. the operator's experiment name -------------------------------------------------------------------------

def test_the_operator_endpoint_refuses_a_bad_experiment_name(make_parts) -> None:
    parts = make_parts()
    client = TestClient(create_app(parts))
    auth = {"Authorization": f"Bearer {TOKEN}"}
    for name in (42, "x" * 5000, "a b", "<script>", "", ["e1"]):
        response = client.post("/api/operator/experiment", json={"action": "start", "name": name}, headers=auth)
        assert response.status_code == 422 and "name must be" in response.json()["error"], name
    for share in ("true", '"0.5"', "1e400", "NaN"):
        response = client.post("/api/operator/experiment", content=f'{{"action": "start", "share": {share}}}',
                               headers={**auth, "Content-Type": "application/json"})
        assert response.status_code == 422 and "share must be" in response.json()["error"], share
    assert parts.tutor.log.experiment_events() == []
    ok = client.post("/api/operator/experiment", json={"action": "start", "name": "hyde-vs-raw_2.b"}, headers=auth)
    assert ok.status_code == 200 and ok.json()["experiment"] == "hyde-vs-raw_2.b"


# --- 10. the secret file ---------------------------------------------------------------------------------------

def test_the_server_secret_is_never_readable_by_others_even_under_umask_0(tmp_path: Path, monkeypatch) -> None:
    from hyde_tutor.server import learners

    seen: list[int] = []

    def watching(real):  # type: ignore[no-untyped-def]
        def call(path, *args, **kwargs):  # type: ignore[no-untyped-def]
            seen.append(stat.S_IMODE(os.stat(path).st_mode))  # the file's mode at each step after its creation
            return real(path, *args, **kwargs)
        return call

    monkeypatch.setattr(os, "chmod", watching(os.chmod))
    monkeypatch.setattr(os, "link", watching(os.link))
    old = os.umask(0)
    try:
        secret = learners.server_secret(None, tmp_path / "data")
    finally:
        os.umask(old)
    assert len(secret) == 64 and seen and all(mode & 0o077 == 0 for mode in seen), [oct(m) for m in seen]
    assert stat.S_IMODE((tmp_path / "data" / "server-secret").stat().st_mode) == 0o600
    assert learners.server_secret(None, tmp_path / "data") == secret
    assert [p.name for p in (tmp_path / "data").iterdir()] == ["server-secret"]


# --- 11. the served path searches the agent's own collections --------------------------------------------------

async def test_the_served_path_searches_the_agents_own_collections(make_parts) -> None:
    from pydantic_ai import Agent
    from pydantic_ai.models.function import FunctionModel

    from hyde_tutor.plugin.toolset import TutorDeps
    from hyde_tutor.plugin.capabilities import HydeTutor, RetrieveFirst

    def down(messages, info):  # type: ignore[no-untyped-def]
        raise ConnectionError("down")

    parts = make_parts()
    tutor = parts.tutor
    tutor.agent = Agent(FunctionModel(down), deps_type=TutorDeps,
                        capabilities=[RetrieveFirst(grammar_collection="docs", docs_collection=None, grammar_top_k=1)])
    tutor.retrieve_first = True
    turn = await tutor.start_turn("s1", "c1", "Что значит -지만?")
    cards = await turn.prefetch()
    assert [r.collection for r in turn.monitor.turn_records] == ["docs"] and len(cards) == 1
    # a model that failed before any search: the fallback searches what the agent searches (tools mode here)
    tutor.agent = Agent(FunctionModel(down), deps_type=TutorDeps,
                        capabilities=[HydeTutor(mode="tools", grammar_collection="docs", docs_collection=None)])
    tutor.retrieve_first = False
    turn = await tutor.start_turn("s1", "c2", "Что значит -지만?")
    reply = await turn.finish(None, "ConnectionError: down")
    assert reply["failed"] and {str(e.get("id")) for e in turn.deps.found} == {"d1"}  # the docs collection's one entry
