"""The chaos drill: the embedder process stopped (SIGSTOP) and then killed (SIGKILL) under concurrent searches.

Concurrent searches (plain retrieval: the query's embedding and the store, no LLM) run for ``duration_s``.
After ``stop_at_s`` the embedder's child process is stopped and left stopped; once a replacement child has
answered, it is killed ``kill_after_s`` later. Every search is watched by an observer's cap (``cap_s``, far
above the configured bound): a search still waiting then counts as hung. The report says how many searches
completed, failed cleanly (a hyde-tutor error), hung or crashed, the longest wait, whether the searches
that started after the last event succeeded, and how long :meth:`close` took.

    python -m hyde_tutor.evaluation.chaos     # one JSON line; HYDE_DENSE__EMBED_TIMEOUT_S sets the bound
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
from collections.abc import Iterator
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from ..config import Settings
from ..errors import HydeTutorError

__all__ = ["ChaosPlan", "ChaosReport", "chaos_drill", "run_chaos"]

SETUP_BOUND_S = 120.0
"""The bound on each embedding call while the drill ingests its corpus (setup, not under test): a batch of 64
long entries on a busy machine can take longer than the few seconds the drill gives a search."""


@dataclass(frozen=True, slots=True, kw_only=True)
class ChaosPlan:
    """How the drill runs: searching tasks, how long, when the child is stopped, when its replacement is killed,
    and the observer's cap (a search still waiting then counts as hung)."""

    concurrency: int = 20
    duration_s: float = 15.0
    stop_at_s: float = 2.0
    kill_after_s: float = 2.0
    cap_s: float = 30.0


@dataclass(frozen=True, slots=True)
class ChaosReport:
    """What the drill saw."""

    searches: int
    completed: int
    failed_cleanly: int
    hung: int
    """Still waiting at the observer's cap."""
    crashed: int
    """Ended with an exception that is not a hyde-tutor error."""
    longest_wait_s: float
    after_recovery: int
    """Searches that started after the last chaos event plus the bound."""
    completed_after_recovery: int
    close_s: float | None
    """How long closing the retriever took; None: it had not returned after 10 s."""
    starts: int | None = None
    """Embedder children started in all (1 + the replacements)."""
    last_start_s: float | None = None
    """How long the last child took to start: a search that waited for a replacement may wait this longer."""
    events: list[str] = field(default_factory=list)

    def to_json(self) -> str:
        return json.dumps({k: (round(v, 3) if isinstance(v, float) else v) for k, v in asdict(self).items()},
                          ensure_ascii=False)


async def run_chaos(hr: Any, collection: str, queries: list[str], plan: ChaosPlan = ChaosPlan(), *,
                    bound_s: float = 10.0) -> tuple[list[tuple[float, float, str]], list[str], float]:
    """Searches from ``plan.concurrency`` tasks while the child is stopped, then its replacement killed.

    Returns each search's (start, wait, outcome), the events, and when the last event happened (seconds
    from the start)."""
    concurrency, duration_s, stop_at_s, kill_after_s, cap_s = (
        plan.concurrency, plan.duration_s, plan.stop_at_s, plan.kill_after_s, plan.cap_s)
    inner = getattr(hr.retriever.dense, "inner", hr.retriever.dense)
    outcomes: list[tuple[float, float, str]] = []
    events: list[str] = []
    t0 = time.monotonic()
    last_event = [duration_s]

    def now() -> float:
        return time.monotonic() - t0

    async def searcher(w: int) -> None:
        i = w
        while now() < duration_s:
            started = now()
            try:
                await asyncio.wait_for(hr.search(collection, queries[i % len(queries)], top_k=3, use_hyde=False), cap_s)
                outcome = "completed"
            except TimeoutError:
                outcome = "hung"
            except HydeTutorError:
                outcome = "failed_cleanly"
            except Exception:  # noqa: BLE001 - counted, that is the point
                outcome = "crashed"
            outcomes.append((started, now() - started, outcome))
            i += concurrency

    async def chaos() -> None:
        await asyncio.sleep(stop_at_s)
        stopped = inner.pid
        os.kill(stopped, signal.SIGSTOP)
        events.append(f"{now():.2f}s SIGSTOP child {stopped}")
        last_event[0] = now()
        while now() < duration_s and inner.pid in (None, stopped):
            await asyncio.sleep(0.05)
        if inner.pid in (None, stopped):
            events.append(f"{now():.2f}s no replacement child appeared")
            return
        events.append(f"{now():.2f}s replacement child {inner.pid}")
        await asyncio.sleep(kill_after_s)
        killed = inner.pid
        if killed is not None:
            os.kill(killed, signal.SIGKILL)
            events.append(f"{now():.2f}s SIGKILL child {killed}")
            last_event[0] = now()

    await asyncio.gather(chaos(), *(searcher(w) for w in range(concurrency)))
    return outcomes, events, last_event[0] + bound_s


def _timed_close(hr: Any, limit_s: float = 10.0) -> float | None:
    started = time.monotonic()
    closer = threading.Thread(target=hr.close, daemon=True)
    closer.start()
    closer.join(limit_s)
    return None if closer.is_alive() else time.monotonic() - started


@contextlib.contextmanager
def _setup_bound(dense: Any, inner: Any) -> Iterator[None]:
    """Lift the embedding bound to :data:`SETUP_BOUND_S` on the batcher and its child process for the block."""
    saved = [(obj, attr, getattr(obj, attr)) for obj, attr in ((dense, "timeout_s"), (inner, "call_timeout_s"))
             if getattr(obj, attr, None) is not None]
    for obj, attr, value in saved:
        setattr(obj, attr, max(value, SETUP_BOUND_S))
    try:
        yield
    finally:
        for obj, attr, value in saved:
            setattr(obj, attr, value)


def chaos_drill(settings: Settings, plan: ChaosPlan = ChaosPlan(), *, data: Path = Path("data")) -> ChaosReport:
    """Ingest the bundled grammar with the configured embedder (it must run in a child process) in a temporary
    folder, then :func:`run_chaos`."""
    from ..corpus.ingest import IngestRequest, ingest_documents, read_documents
    from ..hyde import HydeRetriever
    from ..retrieval.retriever import Retriever

    bound_s = float(getattr(settings.dense, "embed_timeout_s", 0.0))
    with tempfile.TemporaryDirectory(prefix="hyde-chaos-") as tmp:
        local = settings.model_copy(update={"data_dir": Path(tmp)})
        retriever = Retriever.from_settings(local)
        inner = getattr(retriever.dense, "inner", retriever.dense)
        if not hasattr(inner, "pid"):
            retriever.close()
            raise HydeTutorError("The chaos drill needs the embedder in a child process (HYDE_DENSE__PROCESS=true).")
        docs, _ = read_documents(data / "grammar.jsonl")
        try:
            with _setup_bound(retriever.dense, inner):
                ingest_documents(docs, IngestRequest(collection="grammar", recreate=True, progress=False),
                                 retriever.store, retriever.dense, retriever.sparse)
        except BaseException:
            retriever.close()
            raise
        queries = [json.loads(line)["text"] for line in
                   (data / "eval" / "grammar" / "queries.jsonl").read_text(encoding="utf-8").splitlines() if line.strip()]
        hr = HydeRetriever(retriever, lambda d: None)  # type: ignore[arg-type, return-value]
        hr.warm_up(["grammar"], freeze_gc=False)
        outcomes, events, recovered_at = asyncio.run(run_chaos(hr, "grammar", queries, plan, bound_s=bound_s))
        starts, last_start_s = getattr(inner, "starts", None), getattr(inner, "last_start_s", None)
        close_s = _timed_close(hr)
        for line in events:  # a child the code under test left stopped: let it go
            if "SIGSTOP" in line:
                try:
                    os.kill(int(line.rsplit(" ", 1)[1]), signal.SIGKILL)
                except ProcessLookupError:
                    pass
    after = [o for o in outcomes if o[0] >= recovered_at]
    count = {k: sum(1 for o in outcomes if o[2] == k) for k in ("completed", "failed_cleanly", "hung", "crashed")}
    return ChaosReport(len(outcomes), **count, longest_wait_s=max((o[1] for o in outcomes), default=0.0),
                       after_recovery=len(after), completed_after_recovery=sum(1 for o in after if o[2] == "completed"),
                       close_s=close_s, starts=starts, last_start_s=last_start_s, events=events)


if __name__ == "__main__":
    print(chaos_drill(Settings()).to_json())
