"""A drill of `hyde-tutor serve` through HTTP: N concurrent learner sessions against a real uvicorn, each asking
questions of the grammar eval set; time to first token, turns per second, failed turns, and the events stored.

    # a stub model (pydantic-ai FunctionModel) writing ~1 token per --token-s, over the real corpus and retriever
    HYDE_DATA_DIR=/tmp/x python scripts/serve_drill.py --sessions 50 --turns 8 --token-s 0.025
    # a third of the learners close the stream at a random point of a random turn and leave (an A/B experiment runs)
    HYDE_DATA_DIR=/tmp/x python scripts/serve_drill.py --sessions 50 --turns 4 --leave 0.333
    # the configured model (the embedded one with no key), a few sessions
    HYDE_DATA_DIR=/tmp/x python scripts/serve_drill.py --model configured --sessions 3 --turns 1
    # the server under py-spy (a sampling profile, raw collapsed stacks; scripts/profile_table.py reads them)
    HYDE_DATA_DIR=/tmp/x python scripts/serve_drill.py --py-spy /tmp/server.txt
    # two uvicorn workers (one per core)
    HYDE_DATA_DIR=/tmp/x python scripts/serve_drill.py --workers 2

The collections must be ingested in HYDE_DATA_DIR first (`hyde-tutor ingest`). The server runs in a child
process (`python -m uvicorn ... --factory`), one worker or ``--workers N`` (each serving its own copy of the
embedded store); its database is a fresh SQLite file under HYDE_DATA_DIR/drill-<time>.db (``--database`` names
another, e.g. a PostgreSQL URL). The learners talk HTTP through ``drill_http.Connection`` (one keep-alive socket
each, light on the CPU the server shares). The figures are the client's view, then the server's own: its stage
timings (``GET /api/operator/timings``, wall-clock per stage; with several workers, one worker's) and the CPU
seconds per turn of the server's processes, of their child processes and of this client (all share the cores).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import random
import resource
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import httpx
import numpy as np
from drill_http import Connection

ROOT = Path(__file__).resolve().parents[1]
REPLY_WORDS = ("Скажите так: 주말에 부산에 가고 싶어요. Конструкция -고 싶다 выражает желание самого говорящего: "
               "основа глагола плюс 고 싶다, в вежливой речи 고 싶어요. Например, 뭐 먹고 싶어요? — Что ты хочешь поесть? "
               "Для третьего лица говорят 고 싶어 하다: 친구가 가고 싶어 해요.").split(" ")


TOKEN = "drill-operator-token"
PY_SPY = Path(sys.executable).parent / "py-spy"
"""The sampling profiler ``--py-spy`` runs (the ``profile`` extra: ``pip install -e '.[profile]'``)."""
HYPOTHESIS = "Конструкция: -고 싶다\nНазвание: желание\nПример: 가고 싶어요. — Хочу пойти."


def stub_app():  # type: ignore[no-untyped-def]
    """uvicorn factory: the configured retriever and database, a stub tools-mode model at DRILL_TOKEN_S per token."""
    from pydantic_ai.messages import ModelRequest, ModelResponse, TextPart, ToolCallPart, ToolReturnPart, UserPromptPart
    from pydantic_ai.models.function import DeltaToolCall, FunctionModel

    from hyde_tutor.tutor.chat import build_tutor_agent
    from hyde_tutor.server import app_from_settings

    token_s = float(os.environ.get("DRILL_TOKEN_S", "0.025"))

    def question(messages):  # type: ignore[no-untyped-def]
        return next(p.content for m in messages if isinstance(m, ModelRequest) for p in m.parts
                    if isinstance(p, UserPromptPart))

    def answered(messages) -> bool:  # type: ignore[no-untyped-def]
        return isinstance(messages[-1], ModelRequest) and any(isinstance(p, ToolReturnPart) for p in messages[-1].parts)

    def args(messages):  # type: ignore[no-untyped-def]  # a capable model writes its own hypothesis: no generation
        return {"query": question(messages), "hypothesis": HYPOTHESIS}

    def call(messages, info):  # type: ignore[no-untyped-def]
        if answered(messages):
            return ModelResponse(parts=[TextPart(" ".join(REPLY_WORDS))])
        return ModelResponse(parts=[ToolCallPart("grammar_search", args(messages))])

    async def stream(messages, info):  # type: ignore[no-untyped-def]
        if not answered(messages):
            await asyncio.sleep(token_s * 10)  # the tool call's ~10 tokens
            yield {0: DeltaToolCall(name="grammar_search", json_args=json.dumps(args(messages), ensure_ascii=False))}
            return
        await asyncio.sleep(token_s * 5)  # the second request's prompt
        for word in REPLY_WORDS:
            await asyncio.sleep(token_s)
            yield word + " "

    return app_from_settings(agent=build_tutor_agent(FunctionModel(call, stream_function=stream)))


async def learner(url: str, n: int, questions: list[str], turns: int,
                  leave: tuple[int, int] | None = None) -> list[dict]:
    """One learner's turns; ``leave`` = (turn, j): in that turn close the stream after the cards (j = 0) or after
    the j-th text chunk, and ask nothing more."""
    out = []
    async with Connection(url) as client:
        async with asyncio.timeout(900):
            await client.get("/")
        for i in range(turns):
            text = questions[(n * turns + i) % len(questions)]
            body = {"id": f"drill{n}", "trigger": "submit-message",
                    "messages": [{"id": f"m{n}-{i}", "role": "user", "parts": [{"type": "text", "text": text}]}]}
            started = time.perf_counter()
            first = cards = None
            failed, turn_id, deltas, left = True, None, 0, False
            async with asyncio.timeout(900):
                async for line in client.stream_lines("/api/chat", body):
                    if not line.startswith("data: {"):
                        continue
                    chunk = json.loads(line[6:])
                    now = time.perf_counter() - started
                    deltas += chunk["type"] == "text-delta"
                    if chunk["type"] == "text-delta" and first is None:
                        first = now
                    elif chunk["type"] == "data-entries" and cards is None:
                        cards = now
                    elif chunk["type"] == "data-reply":
                        failed, turn_id = chunk["data"]["failed"], chunk["data"]["turn_id"]
                        first = first if first is not None else now  # a structured answer arrives whole
                    if leave is not None and leave[0] == i and (cards is not None and deltas >= leave[1]):
                        left = True
                        client.close()  # the learner closes the connection mid-stream
                        break
            out.append({"turn": i, "ttft": first, "cards": cards, "total": time.perf_counter() - started, "failed": failed,
                        "status": client.status, "turn_id": turn_id, "left": left})
            if left:
                break
    return out


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--sessions", type=int, default=50)
    parser.add_argument("--turns", type=int, default=8, help="questions per session, one after another")
    parser.add_argument("--token-s", type=float, default=0.025, help="stub model: seconds per token (0.025 = 40/s)")
    parser.add_argument("--model", choices=("stub", "configured"), default="stub")
    parser.add_argument("--leave", type=float, default=0.0,
                        help="share of learners who close the stream at a random point of a random turn and leave; "
                             "an A/B experiment (hyde,raw at 50 %%) runs so the report's abandoned rate has arms")
    parser.add_argument("--seed", type=int, default=7)
    parser.add_argument("--json", type=Path, help="write the per-turn rows and the server's stage timings here")
    parser.add_argument("--database", help="the server's database URL (default: a fresh SQLite file); "
                                           "'throwaway-postgresql' starts a PostgreSQL cluster for the drill "
                                           "(tests/pg_cluster.py: Debian's postgresql 15) and removes it after")
    parser.add_argument("--loop", default="auto", help="uvicorn's --loop (auto: uvloop when installed)")
    parser.add_argument("--http", default="auto", help="uvicorn's --http (auto: httptools when installed)")
    parser.add_argument("--workers", type=int, default=1, help="uvicorn worker processes (each serves its own copy "
                                                                "of the embedded store)")
    parser.add_argument("--py-spy", type=Path, help="profile the server with py-spy into this file (raw stacks)")
    args = parser.parse_args(argv)
    if args.py_spy and not PY_SPY.exists():
        parser.error(f"--py-spy needs py-spy, which is not installed ({PY_SPY}): pip install -e '.[profile]'")
    data_dir = Path(os.environ.get("HYDE_DATA_DIR", ".hyde")).resolve()
    if args.database == "throwaway-postgresql":
        sys.path.insert(0, str(ROOT))
        from tests.pg_cluster import pg_cluster

        with pg_cluster() as url:
            args.database = url
            drill(args, data_dir)
        return
    drill(args, data_dir)


def drill(args: argparse.Namespace, data_dir: Path) -> None:
    """One drill against a server started here (see the module's docstring)."""
    database = args.database or f"sqlite:///{data_dir / f'drill-{int(time.time())}.db'}"
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    target = "serve_drill:stub_app" if args.model == "stub" else "hyde_tutor.server.build:app_from_environment"
    env = {**os.environ, "HYDE_DATA_DIR": str(data_dir), "HYDE_SERVER__DATABASE_URL": database,
           "HYDE_SERVER__OPERATOR_TOKEN": TOKEN,
           "HYDE_SERVER__RATE_PER_MINUTE": "1000", "HYDE_SERVER__NEW_LEARNERS_PER_MINUTE": "1000",
           "DRILL_TOKEN_S": str(args.token_s),
           "HYDE_SERVER__TURN_TIMEOUT_S": "900", "HYDE_SERVER__WORKERS": str(args.workers), **({"HYDE_EXPERIMENT__ENABLED": "true"} if args.leave else {})}
    server = subprocess.Popen([sys.executable, "-m", "uvicorn", target, "--factory", "--app-dir", str(ROOT / "scripts"),
                               "--port", str(port), "--log-level", "warning", "--loop", args.loop, "--http", args.http,
                               "--workers", str(args.workers)], env=env, cwd=ROOT)
    url = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + 300
        while True:
            try:
                if httpx.get(url + "/healthz", timeout=2).status_code == 200:
                    break
            except httpx.HTTPError:
                pass
            if server.poll() is not None or time.monotonic() > deadline:
                sys.exit("the server did not start")
            time.sleep(0.5)
        if args.workers > 1:
            _wait_idle(server.pid, deadline)  # the first healthy answer came from one worker; the others may still load
        spy = None
        if args.py_spy:
            spy = subprocess.Popen([str(PY_SPY), "record", "--pid", str(server.pid), "--gil", "--format", "raw",
                                    "--rate", "100", "--output", str(args.py_spy),
                                    *(["--subprocesses"] if args.workers > 1 else [])], stdout=subprocess.DEVNULL)
            time.sleep(2)
        operator = {"authorization": f"Bearer {TOKEN}"}
        httpx.get(url + "/api/operator/timings?clear=1", headers=operator, timeout=10)
        server_cpu, client_cpu = _cpu_seconds(server.pid, args.workers), _own_cpu_seconds()  # (main, children), client
        questions = [json.loads(line)["text"] for line in (ROOT / "data/eval/grammar/queries.jsonl").read_text().splitlines()]

        rng = random.Random(args.seed)
        leaving = set(rng.sample(range(args.sessions), round(args.sessions * args.leave)))
        plans = {n: (rng.randrange(args.turns), rng.randrange(len(REPLY_WORDS) - 5)) for n in leaving}

        async def everyone() -> list[list[dict]]:
            return await asyncio.gather(*(learner(url, n, questions, args.turns, plans.get(n))
                                          for n in range(args.sessions)))

        started = time.perf_counter()
        rows = [r for session in asyncio.run(everyone()) for r in session]
        wall = time.perf_counter() - started
        after = _cpu_seconds(server.pid, args.workers)
        server_cpu, client_cpu = (after[0] - server_cpu[0], after[1] - server_cpu[1]), _own_cpu_seconds() - client_cpu
        stages = httpx.get(url + "/api/operator/timings", headers=operator, timeout=30).json()["stages"]
        if spy is not None:
            spy.send_signal(signal.SIGINT)
            spy.wait(120)
    finally:
        server.terminate()
        server.wait(120)
    from hyde_tutor.experiment.sqlstore import open_event_log

    log = open_event_log(database)
    stored = {t.turn_id for t in log.turns()}
    ttft = np.array([r["ttft"] for r in rows if r["ttft"] is not None])
    cards = np.array([r["cards"] for r in rows if r["cards"] is not None])
    totals = np.array([r["total"] for r in rows])
    failed = sum(1 for r in rows if (r["failed"] and not r["left"]) or r["status"] != 200)
    answered = {r["turn_id"] for r in rows if not r["left"]}  # a learner who left never got the turn's id
    once = len(stored) == len(rows) and answered <= stored
    print(f"model {args.model}" + (f" ({1 / args.token_s:.0f} tokens/s)" if args.model == "stub" else "")
          + f", {args.sessions} concurrent sessions x {args.turns} turns = {len(rows)} turns in {wall:.1f} s")
    print(f"time to first token p50 {np.percentile(ttft, 50):.2f} s, p95 {np.percentile(ttft, 95):.2f} s; "
          f"cards p50 {np.percentile(cards, 50):.2f} s, p95 {np.percentile(cards, 95):.2f} s; turn p50 {np.percentile(totals, 50):.2f} s, "
          f"p95 {np.percentile(totals, 95):.2f} s")
    print(by_turn(rows))
    print(f"turns/s {len(rows) / wall:.2f}; failed turns {failed}; events: {len(stored)} turns stored for "
          f"{len(rows)} turns served ({'all, once' if once else 'MISMATCH'}), "
          f"{len(log.retrievals())} retrievals")
    print(f"cpu per turn: server {'process' if args.workers == 1 else f'({args.workers} workers)'} "
          f"{server_cpu[0] / len(rows) * 1000:.1f} ms, its embedder process{'es' if args.workers > 1 else ''}"
          f"{' and model servers' if args.model == 'configured' else ''} "
          f"{server_cpu[1] / len(rows) * 1000:.1f} ms, this client "
          f"{client_cpu / len(rows) * 1000:.1f} ms ({os.cpu_count()} cores; wall per turn "
          f"{wall / len(rows) * 1000:.1f} ms)")
    print(f"server stages ({'wall-clock' if args.workers == 1 else 'one worker of ' + str(args.workers)}, ms): " + "; ".join(
        f"{name} n={s['n']} p50 {s['p50_ms']:.1f} p95 {s['p95_ms']:.1f} mean {s['mean_ms']:.1f}"
        for name, s in stages.items()))
    if args.leave:
        abandoned(log, rows)
    print("load: " + Path("/proc/loadavg").read_text().strip())
    if args.json:
        args.json.write_text(json.dumps({"rows": rows, "stages": stages, "server_cpu_s": server_cpu,
                                         "client_cpu_s": client_cpu, "wall_s": wall}, indent=1))


def by_turn(rows: list[dict]) -> str:
    """Cards p50 / p95 by the learner's turn: every learner starts at once, so the first turns arrive as one wave
    (50 requests in the same millisecond) and the later ones spread out; the wave is most of the tail."""
    parts = []
    for label, first, last in (("1st", 0, 0), ("2nd", 1, 1), ("3rd", 2, 2), ("4th on", 3, None)):
        cards = [r["cards"] for r in rows
                 if first <= r["turn"] and (last is None or r["turn"] <= last) and r["cards"] is not None]
        if cards:
            parts.append(f"{label} {np.percentile(cards, 50):.2f} / {np.percentile(cards, 95):.2f} s")
    return "cards p50 / p95 by the learner's turn: " + "; ".join(parts)


def _cpu_seconds(pid: int, workers: int = 1) -> tuple[float, float]:
    """User + system CPU seconds of the server (all its threads; with several workers, uvicorn's supervisor and its
    worker processes), and of the processes those started (the embedders')."""
    import psutil

    process = psutil.Process(pid)

    def used(p: psutil.Process) -> float:
        try:
            times = p.cpu_times()
        except psutil.NoSuchProcess:
            return 0.0
        return times.user + times.system

    servers = [process] + (process.children() if workers > 1 else [])
    serving = {p.pid for p in servers}
    rest = {c.pid: c for p in servers for c in p.children(recursive=True) if c.pid not in serving}
    return sum(used(p) for p in servers), sum(used(c) for c in rest.values())


def _wait_idle(pid: int, deadline: float) -> None:
    """Wait until every worker process of the uvicorn supervisor ``pid`` and its children (the embedder) have
    started and stopped loading (each under 10 % of a core for half a second)."""
    import psutil

    while time.monotonic() < deadline:
        try:
            workers = psutil.Process(pid).children()
            busy = [p for w in workers for p in (w, *w.children(recursive=True)) if p.cpu_percent(interval=0.5) >= 10]
        except psutil.NoSuchProcess:
            continue  # a worker restarted: look again
        if workers and not busy:
            return
    sys.exit("the workers did not settle")


def _own_cpu_seconds() -> float:
    usage = resource.getrusage(resource.RUSAGE_SELF)
    return usage.ru_utime + usage.ru_stime


def abandoned(log, rows: list[dict]) -> None:  # type: ignore[no-untyped-def]
    """The turns the learners left: all recorded, marked, with their searches; the report's abandoned rate per arm."""
    from hyde_tutor.experiment.outcomes import outcome_report

    turns = log.turns()
    marked = [t for t in turns if t.abandoned]
    kept = sum(1 for t in marked if log.retrievals(t.turn_id))
    left = sum(r["left"] for r in rows)
    print(f"turns started {sum(r['status'] == 200 for r in rows)}, recorded {len(turns)}; closed by the learner "
          f"{left}, recorded abandoned {len(marked)} (with their searches: {kept}; "
          f"seconds p50 {np.percentile([t.seconds for t in marked], 50) if marked else 0:.2f})")
    report = outcome_report(log)
    for section in report["periods"]:
        arms = section["by_assigned_arm"]["arms"]
        print("report, abandoned rate per arm: " + "; ".join(
            f"{arm} {row['abandoned']['value']:.3f} [{row['abandoned']['low']:.3f}, {row['abandoned']['high']:.3f}] "
            f"of {row['turns']} turns" for arm, row in arms.items()))


if __name__ == "__main__":
    main()
