"""The load drill (``hyde-tutor bench --load``): many concurrent tool calls against the CONFIGURED embedder
and store, with a simulated flaky LLM, in a temporary folder.

Each call goes through the search tool the way an agent's tool manager calls it (the tool's argument
schema validates the arguments, then ``HydeSearchToolset.call_tool`` runs it with a ``RunContext``
carrying ``TutorDeps``). The LLM is :func:`~hyde_tutor.llm.simulated.simulated_model` (a fixed latency,
20 % failures, 10 % hangs by default) behind a short HyDE timeout, so a third of the calls have to fall
back to plain retrieval. What is measured is everything else: embedding, sparse encoding, the store,
fusion, the event loop. A ticker coroutine measures the longest time the event loop was blocked.
"""

from __future__ import annotations

import asyncio
import gc
import json
import random
import tempfile
import time
from collections import Counter
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from ..config import Settings

__all__ = ["LoadReport", "SimulatedLLM", "call_tool", "load_drill", "max_loop_stall", "run_load"]


@dataclass(frozen=True, slots=True)
class LoadReport:
    """What the drill measured."""

    calls: int
    concurrency: int
    calls_per_s: float
    p50_ms: float
    p95_ms: float
    max_loop_stall_ms: float
    failed_calls: int
    records: int
    wall_s: float
    embedder: str = ""
    store: str = ""
    llm: dict[str, float] = field(default_factory=dict)
    fallbacks: dict[str, int] = field(default_factory=dict)
    errors: list[str] = field(default_factory=list)

    def to_json(self) -> str:
        return json.dumps({k: (round(v, 2) if isinstance(v, float) else v) for k, v in asdict(self).items()},
                          ensure_ascii=False)


async def max_loop_stall(until: asyncio.Event, tick_s: float = 0.005) -> float:
    """The longest the event loop went without running this coroutine (seconds)."""
    worst, last = 0.0, time.perf_counter()
    while not until.is_set():
        await asyncio.sleep(tick_s)
        now = time.perf_counter()
        worst, last = max(worst, now - last - tick_s), now
    return worst


async def call_tool(toolset: Any, ctx: Any, name: str, args: dict[str, Any]) -> Any:
    """Call a tool as pydantic-ai's tool manager does; returns what the model would be shown."""
    from pydantic_ai import ToolReturn

    tools = await toolset.get_tools(ctx)
    tool = tools[name]
    result = await toolset.call_tool(name, tool.args_validator.validate_python(args), ctx, tool)
    return result.return_value if isinstance(result, ToolReturn) else result


async def run_load(hr: Any, queries: list[str], *, calls: int = 400, concurrency: int = 50,
                   monitor: Any = None, seed: int = 7, collections: tuple[str, str] = ("grammar", "docs")) -> LoadReport:
    """``calls`` tool calls (grammar_search and docs_search in turn) from ``concurrency`` tasks."""
    from pydantic_ai import RunContext
    from pydantic_ai.models.test import TestModel
    from pydantic_ai.usage import RunUsage

    from ..plugin.monitor import Monitor
    from ..plugin.toolset import HydeSearchToolset, TutorDeps

    monitor = monitor if monitor is not None else Monitor(None, window=calls)
    toolset = HydeSearchToolset(grammar_collection=collections[0], docs_collection=collections[1])
    plan = random.Random(seed)
    jobs = [("grammar_search" if i % 2 == 0 else "docs_search",
             {"query": queries[i % len(queries)], "top_k": plan.randint(1, 10)}) for i in range(calls)]
    latencies: list[float] = []
    errors: list[str] = []

    queue = iter(range(calls))  # one shared queue: a task takes the next call when its last one ends

    async def worker(w: int) -> None:
        ctx = RunContext(deps=TutorDeps(retriever=hr, monitor=monitor), model=TestModel(), usage=RunUsage())
        for i in queue:
            name, args = jobs[i]
            started = time.perf_counter()
            try:
                out = await call_tool(toolset, ctx, name, args)
                if not isinstance(out, dict) or "results" not in out:
                    errors.append(f"{name}: no results in {type(out).__name__}")
            except Exception as exc:  # noqa: BLE001 - any exception is a failed call
                errors.append(f"{name}: {type(exc).__name__}: {exc}"[:200])
            latencies.append((time.perf_counter() - started) * 1000)

    before = monitor.total
    done = asyncio.Event()
    ticker = asyncio.create_task(max_loop_stall(done))
    started = time.perf_counter()
    await asyncio.gather(*(worker(w) for w in range(concurrency)))
    wall = time.perf_counter() - started
    done.set()
    stall = await ticker
    records = monitor.records()[-(monitor.total - before):] if monitor.total > before else []
    fallbacks = Counter(r.fallback_reason for r in records if r.fallback_reason)
    return LoadReport(
        calls=calls, concurrency=concurrency, calls_per_s=calls / wall, p50_ms=float(np.percentile(latencies, 50)),
        p95_ms=float(np.percentile(latencies, 95)), max_loop_stall_ms=stall * 1000, failed_calls=len(errors),
        records=monitor.total - before, wall_s=wall, fallbacks=dict(fallbacks), errors=errors[:5],
    )


@dataclass(frozen=True, slots=True, kw_only=True)
class SimulatedLLM:
    """The drill's flaky LLM (:func:`~hyde_tutor.llm.simulated.simulated_model`) and the HyDE timeout it meets."""

    latency_ms: float = 2.0
    fail_rate: float = 0.2
    hang_rate: float = 0.1
    timeout_s: float = 1.0
    """HyDE's per-call timeout in the drill: a hang ends here and the search falls back."""


def load_drill(settings: Settings, *, calls: int = 400, concurrency: int = 50, llm: SimulatedLLM = SimulatedLLM(),
               data: Path = Path("data"), progress: Any = None) -> LoadReport:
    """Build the bundled corpora with the configured embedder and store in a temporary folder, then run
    :func:`run_load` with a simulated LLM (N=1 hypothesis per search)."""
    llm_latency_ms, fail_rate, hang_rate, timeout_s = llm.latency_ms, llm.fail_rate, llm.hang_rate, llm.timeout_s
    from ..corpus.ingest import IngestRequest, ingest_documents, read_documents
    from ..hyde import HydeRetriever
    from ..hyde.cache import NoCache
    from ..hyde.hypotheses import HypothesisGenerator
    from ..llm.simulated import simulated_model
    from ..retrieval.retriever import Retriever

    say = progress or (lambda message: None)
    frozen = gc.get_freeze_count()
    with tempfile.TemporaryDirectory(prefix="hyde-load-") as tmp:
        local = settings.model_copy(update={"data_dir": Path(tmp)})
        if local.qdrant.url:  # a server: separate collections, so the operator's are never touched
            say("note: a Qdrant server is configured; the drill writes load_grammar / load_docs there")
        retriever = Retriever.from_settings(local)
        try:
            names = {"grammar": "load_grammar" if local.qdrant.url else "grammar",
                     "docs": "load_docs" if local.qdrant.url else "docs"}
            for source, name in names.items():
                docs, _ = read_documents(data / f"{source}.jsonl")
                say(f"ingesting {len(docs)} {source} documents with {retriever.dense.name}…")
                ingest_documents(docs, IngestRequest(collection=name, recreate=True, progress=False), retriever.store,
                                 retriever.dense, retriever.sparse)
            queries = [json.loads(line)["text"] for source in ("grammar", "docs")
                       for line in (data / "eval" / source / "queries.jsonl").read_text(encoding="utf-8").splitlines()
                       if line.strip()]
            hyde = local.hyde.model_copy(update={"n_hypotheses": 1, "timeout_s": timeout_s, "enabled": True,
                                                 "domains": {names["grammar"]: "grammar", names["docs"]: "docs"}})
            model = simulated_model(llm_latency_ms, fail_rate, hang_rate)
            hr = HydeRetriever(retriever, lambda d: HypothesisGenerator(model, "simulated", d, cache=NoCache(), hyde=hyde),
                               hyde, weak_model=False)
            say("warming up (collections, embedder process, analyser; gc.freeze), as a server does at start-up…")
            hr.warm_up(list(names.values()))
            say(f"{calls} tool calls from {concurrency} tasks, simulated LLM {llm_latency_ms:g} ms "
                f"({fail_rate:.0%} errors, {hang_rate:.0%} hangs, HyDE timeout {timeout_s:g} s)…")
            report = asyncio.run(run_load(hr, queries, calls=calls, concurrency=concurrency,
                                          collections=(names["grammar"], names["docs"])))
        finally:
            if frozen == 0 and gc.get_freeze_count():  # a caller's process (a test, a notebook) gets its GC back
                gc.unfreeze()
            if local.qdrant.url:
                for name in names.values():
                    retriever.store.delete_collection(name)
            retriever.close()
    return LoadReport(**{**asdict(report), "embedder": retriever.dense.name, "store": type(retriever.store).__name__,
                         "llm": {"latency_ms": llm_latency_ms, "fail_rate": fail_rate, "hang_rate": hang_rate,
                                 "hyde_timeout_s": timeout_s}})
