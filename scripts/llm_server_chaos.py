"""The embedded model server killed at start, between calls and mid-call: how many HyDE generations after
each kill still work, how many fail (and fall back to plain retrieval), and the longest wait.

    python scripts/llm_server_chaos.py        # SmolLM2-135M, one JSON line; about a minute on 2 cores

Phases: (1) the server is killed while it loads; then the backend is asked for again. (2) 4 calls, the server
killed, 4 calls. (3) the server killed during a call, then 4 calls.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import signal
import tempfile
import threading
import time
from pathlib import Path

from hyde_tutor.config import HydeSettings, LLMSettings, Settings
from hyde_tutor.errors import HydeTutorError
from hyde_tutor.hyde.cache import NoCache
from hyde_tutor.hyde.hypotheses import HypothesisGenerator
from hyde_tutor.llm.backends import make_llm
from hyde_tutor.llm.server import smollm2_path

QUESTION = "Как сказать, что я хочу поехать в Пусан?"


def _kill_while_loading(settings: Settings) -> str:
    """Start the backend in a thread and kill its server once it is spawned, before it answers."""
    from hyde_tutor.llm import server as server_module

    outcome: list[str] = []

    def start() -> None:
        try:
            make_llm(settings)
            outcome.append("started")
        except HydeTutorError as exc:
            outcome.append(f"failed: {str(exc)[:80]}")

    starter = threading.Thread(target=start)
    starter.start()
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        procs = [s._proc for s in server_module._local_servers.values() if s._proc is not None]
        if procs:
            os.kill(procs[0].pid, signal.SIGKILL)
            break
        time.sleep(0.01)
    starter.join()
    return outcome[0] if outcome else "no start"


async def _calls(gen: HypothesisGenerator, n: int, outcomes: list[tuple[str, float]]) -> None:
    for _ in range(n):
        started = time.monotonic()
        result = await gen.generate(QUESTION, n=1)
        outcomes.append((result.failure_reason or "ok", time.monotonic() - started))
        if result.errors and os.environ.get("CHAOS_VERBOSE"):
            print(result.errors)


async def _phases(backend, gen: HypothesisGenerator, phases: dict[str, list[tuple[str, float]]]) -> None:  # type: ignore[no-untyped-def]
    await _calls(gen, 4, phases["after_start_kill"])
    with contextlib.suppress(ProcessLookupError, AttributeError):  # the old code handed out a dead server
        os.kill(backend.server._proc.pid, signal.SIGKILL)
    await asyncio.sleep(0.5)
    await _calls(gen, 4, phases["after_kill_between"])
    proc = backend.server._proc
    if proc is not None and proc.poll() is None:
        threading.Timer(0.3, os.kill, (proc.pid, signal.SIGKILL)).start()
    await _calls(gen, 5, phases["after_kill_mid_call"])  # the first is the call killed mid-way


def main() -> dict[str, object]:
    with tempfile.TemporaryDirectory(prefix="llm-chaos-") as tmp:
        os.environ["HYDE_DATA_DIR"] = tmp
        model = Path(tmp) / "model.gguf"
        model.symlink_to(smollm2_path())
        settings = Settings(llm=LLMSettings(provider="local", local_model=str(model), max_tokens=8, threads=1,
                                            startup_timeout_s=60))
        at_start = _kill_while_loading(settings)
        try:
            backend = make_llm(settings)
        except HydeTutorError as exc:  # the old code hands out the dead server here
            return {"at_start": at_start, "after_start_kill": f"make_llm failed: {exc}"[:200]}
        gen = HypothesisGenerator(backend.model, backend.name, "grammar", cache=NoCache(), llm=settings.llm,
                                  hyde=HydeSettings(timeout_s=30, min_hangul_chars=0), options=backend.call_options)
        phases: dict[str, list[tuple[str, float]]] = {"after_start_kill": [], "after_kill_between": [],
                                                       "after_kill_mid_call": []}
        try:
            asyncio.run(_phases(backend, gen, phases))  # one loop: the backend's HTTP connections live on it
        finally:
            backend.close()
    report: dict[str, object] = {"at_start": at_start}
    for name, outcomes in phases.items():
        report[name] = {"ok": sum(o == "ok" for o, _ in outcomes), "failed": sum(o != "ok" for o, _ in outcomes),
                        "reasons": sorted({o for o, _ in outcomes if o != "ok"}),
                        "longest_wait_s": round(max((w for _, w in outcomes), default=0.0), 2)}
    return report


if __name__ == "__main__":
    print(json.dumps(main(), ensure_ascii=False))
