"""Two uvicorn worker processes, one database, 50 learners at once: every turn's events are stored once and none
is lost, each learner stays in one arm across requests and workers, and ratings reach their turns. On SQLite
(the default file) and on a real PostgreSQL."""

from __future__ import annotations

import asyncio
import json
import os
import socket
import subprocess
import sys
import time
from collections import Counter
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from hyde_tutor.experiment.assignment import Experiment
from hyde_tutor.experiment.sqlstore import open_event_log

from .conftest import ROOT
from .pg_cluster import pg_cluster

LEARNERS = 50
TOKEN = "workers-op-token"


@pytest.fixture(params=["sqlite", "postgresql"])
def database_url(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[str]:
    if request.param == "sqlite":
        yield f"sqlite:///{tmp_path / 'served.db'}"
    else:
        with pg_cluster() as url:
            yield url


@pytest.fixture()
def two_workers(tmp_path: Path, database_url: str) -> Iterator[str]:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    env = {**os.environ, "HYDE_DATA_DIR": str(tmp_path / "data"), "HYDE_SERVER__DATABASE_URL": database_url,
           "HYDE_SERVER__OPERATOR_TOKEN": TOKEN, "HYDE_SERVER__RATE_PER_MINUTE": "1000", "HYDE_STUB_TOKEN_S": "0.01",
           "HYDE_SERVER__NEW_LEARNERS_PER_MINUTE": "1000",  # 50 learners from one address
           "PYTHONPATH": os.pathsep.join([str(ROOT / "src"), str(ROOT)])}
    log = open(tmp_path / "uvicorn.log", "wb")
    proc = subprocess.Popen([sys.executable, "-m", "uvicorn", "tests.served_stub:worker_app", "--factory",
                             "--workers", "2", "--host", "127.0.0.1", "--port", str(port), "--log-level", "warning"],
                            cwd=ROOT, env=env, stdout=log, stderr=subprocess.STDOUT)
    url = f"http://127.0.0.1:{port}"
    deadline = time.monotonic() + 120
    while len(list((tmp_path / "data").glob("worker-*"))) < 2 or not _healthy(url):
        assert proc.poll() is None, (tmp_path / "uvicorn.log").read_text()[-3000:]
        assert time.monotonic() < deadline, "two workers did not start in 120 s"
        time.sleep(0.3)
    try:
        yield url
    finally:
        proc.terminate()
        proc.wait(60)
        log.close()


def _healthy(url: str) -> bool:
    try:
        return httpx.get(url + "/healthz", timeout=2).status_code == 200
    except httpx.HTTPError:
        return False


async def _learner(url: str, n: int) -> dict:
    async with httpx.AsyncClient(base_url=url, timeout=120) as client:
        await client.get("/")
        turn_ids = []
        for i, text in enumerate(("Как сказать «хочу»: 가고 싶어요", "Что значит -지만?")):
            body = {"id": f"chat{n}", "trigger": "submit-message",
                    "messages": [{"id": f"m{n}-{i}", "role": "user", "parts": [{"type": "text", "text": text}]}]}
            response = await client.post("/api/chat", json=body)
            assert response.status_code == 200, response.text
            replies = [json.loads(line[6:]) for line in response.text.splitlines() if line.startswith("data: {")]
            (reply,) = [c["data"] for c in replies if c["type"] == "data-reply"]
            assert not reply["failed"]
            turn_ids.append(reply["turn_id"])
        rated = await client.post("/api/rating", json={"turn_id": turn_ids[0], "rating": 1 if n % 2 else -1})
        assert rated.status_code == 200
        return {"learner": client.cookies["hyde_learner"].rsplit(".", 1)[0], "turns": turn_ids}


def test_two_workers_and_50_learners_store_every_turn_once(two_workers: str, database_url: str) -> None:
    url = two_workers
    assert httpx.post(f"{url}/api/operator/experiment", json={"action": "start", "share": 0.5, "name": "load"},
                      headers={"Authorization": f"Bearer {TOKEN}"}).status_code == 200

    async def everyone() -> list[dict]:
        return await asyncio.gather(*(_learner(url, n) for n in range(LEARNERS)))

    learners = asyncio.run(everyone())
    log = open_event_log(database_url)
    turns = log.turns("load")
    sent = [t for learner in learners for t in learner["turns"]]
    assert len(sent) == len(set(sent)) == 2 * LEARNERS
    assert sorted(t.turn_id for t in turns) == sorted(sent)  # every turn once, none lost
    per_turn = Counter(turn_id for turn_id, _ in log.retrievals())
    assert all(per_turn[t] == 1 for t in sent) and sum(per_turn.values()) == 2 * LEARNERS
    experiment = Experiment("load", 0.5)
    for learner in learners:  # sticky: one arm per learner, the pure hash of its id, whichever worker served it
        arms = {t.arm for t in turns if t.subject == learner["learner"]}
        assert arms == {experiment.arm(learner["learner"])}
    assert {a for t in turns for a in [t.arm]} == {"hyde", "raw"}
    assert len(log.ratings()) == LEARNERS and sum(1 for t in turns if t.rating is not None) == LEARNERS
    assert sum(1 for t in turns if t.rephrase is not None) == LEARNERS  # each first turn got its outcome


def test_a_stopping_server_finishes_the_turn_in_flight(tmp_path: Path) -> None:
    """SIGTERM while a reply streams: uvicorn stops accepting, the turn ends with its reply, and it is recorded."""
    import signal
    import threading

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    db = f"sqlite:///{tmp_path / 'served.db'}"
    env = {**os.environ, "HYDE_DATA_DIR": str(tmp_path / "data"), "HYDE_SERVER__DATABASE_URL": db,
           "HYDE_STUB_TOKEN_S": "0.4", "PYTHONPATH": os.pathsep.join([str(ROOT / "src"), str(ROOT)])}
    proc = subprocess.Popen([sys.executable, "-m", "uvicorn", "tests.served_stub:worker_app", "--factory", "--host",
                             "127.0.0.1", "--port", str(port), "--timeout-graceful-shutdown", "30"],
                            cwd=ROOT, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    url = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + 120
        while not _healthy(url):
            assert proc.poll() is None and time.monotonic() < deadline
            time.sleep(0.3)
        got: dict = {}
        started = threading.Event()

        def one_turn() -> None:
            body = {"id": "c1", "trigger": "submit-message",
                    "messages": [{"id": "m1", "role": "user", "parts": [{"type": "text", "text": "Что значит -지만?"}]}]}
            with httpx.Client(base_url=url, timeout=60) as client:
                client.get("/")  # the page sets the learner's cookie
                with client.stream("POST", "/api/chat", json=body) as response:
                    lines = []
                    for line in response.iter_lines():
                        lines.append(line)
                        started.set()
                    got["lines"] = lines

        thread = threading.Thread(target=one_turn)
        thread.start()
        assert started.wait(30)
        proc.send_signal(signal.SIGTERM)
        thread.join(60)
        assert any('"data-reply"' in line for line in got["lines"])
        assert proc.wait(60) in (0, -signal.SIGTERM)  # uvicorn re-raises the signal once it has shut down
        (turn,) = open_event_log(db).turns()
        assert not turn.failed and turn.seconds > 1.5
    finally:
        if proc.poll() is None:
            proc.kill()
