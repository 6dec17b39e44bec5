"""Load: 1,000 tool calls from 50 concurrent asyncio tasks over a real embedded store, with a flaky LLM.

The tools are called the way an agent's tool manager calls them (``call_tool`` below: the tool's
argument schema validates the model's JSON, then ``HydeSearchToolset.call_tool`` runs it with a
``RunContext`` carrying ``TutorDeps``). The LLM is ``simulated_model`` with 20 % failures and 10 %
hangs, behind a short HyDE timeout, so every third or so call has to fall back to plain retrieval.

Figures: printed as one JSON line, and written to ``$HYDE_RELIABILITY_REPORT`` when that is set.
"""

from __future__ import annotations

import asyncio
import json
import os
import random
import time
from collections import Counter
from pathlib import Path
from typing import Any

import pytest
from pydantic_ai import RunContext
from pydantic_ai.models.test import TestModel
from pydantic_ai.toolsets import AbstractToolset
from pydantic_ai.usage import RunUsage

from hyde_tutor import EdgeStore, HydeSearchToolset, Monitor, TutorDeps
from hyde_tutor.config import HydeSettings
from hyde_tutor.hyde import HydeRetriever
from hyde_tutor.hyde.hypotheses import HypothesisGenerator
from hyde_tutor.hyde.cache import NoCache
from hyde_tutor.corpus.ingest import IngestRequest, ingest_documents, read_documents
from hyde_tutor.retrieval.retriever import Retriever
from hyde_tutor.llm.simulated import simulated_model

from .conftest import DATA

N_CALLS = 1000
N_TASKS = 50
SEED = 7
FAIL_RATE = 0.2
HANG_RATE = 0.1
LATENCY_MS = 2.0
TIMEOUT_S = 1.0


def tool_context(deps: TutorDeps) -> RunContext[TutorDeps]:
    """A run context like the one an agent run hands to its tools."""
    return RunContext(deps=deps, model=TestModel(), usage=RunUsage())


async def call_tool(toolset: AbstractToolset[TutorDeps], ctx: RunContext[TutorDeps], name: str,
                    args: dict[str, Any]) -> Any:
    """Call a tool as pydantic-ai's tool manager does (``hyde_tutor.evaluation.load.call_tool``): schema-validate
    the arguments, then ``call_tool``; returns what the model is shown.

    Raises what the agent would turn into a retry prompt (``pydantic.ValidationError`` for arguments the
    schema rejects, ``ModelRetry`` for arguments the tool rejects); anything else is a crash.
    """
    from hyde_tutor.evaluation.load import call_tool as drill_call

    return await drill_call(toolset, ctx, name, args)


@pytest.fixture(scope="module")
def corpus_store(tmp_path_factory: pytest.TempPathFactory):
    """The bundled grammar (160) and docs (44) corpora in a real EdgeStore, embedded by HashEmbedder."""
    from hyde_tutor import Bm25Encoder, KoreanAwareAnalyzer

    from .conftest import HashEmbedder

    embedder, bm25 = HashEmbedder(), Bm25Encoder(KoreanAwareAnalyzer())
    store = EdgeStore(tmp_path_factory.mktemp("load") / "edge")
    for name in ("grammar", "docs"):
        docs, errors = read_documents(DATA / f"{name}.jsonl")
        assert not errors
        ingest_documents(docs, IngestRequest(collection=name, progress=False), store, embedder, bm25)
    yield store, embedder, bm25
    store.close()


def _queries() -> list[str]:
    out = []
    for name in ("grammar", "docs"):
        for line in (DATA / "eval" / name / "queries.jsonl").read_text(encoding="utf-8").splitlines():
            out.append(json.loads(line)["text"])
    return out


async def test_1000_tool_calls_from_50_tasks_with_a_flaky_llm(corpus_store, tmp_path: Path, capsys) -> None:
    store, embedder, bm25 = corpus_store
    settings = HydeSettings(n_hypotheses=1, timeout_s=TIMEOUT_S, cache="off")  # one LLM call per search
    model = simulated_model(LATENCY_MS, fail_rate=FAIL_RATE, hang_rate=HANG_RATE, seed=SEED)
    hr = HydeRetriever(Retriever(store, embedder, bm25),
                       lambda d: HypothesisGenerator(model, "simulated", d, cache=NoCache(), hyde=settings), settings)
    monitor = Monitor(tmp_path / "metrics.jsonl", window=N_CALLS)
    toolset = HydeSearchToolset()
    queries = _queries()
    plan = random.Random(SEED)
    calls = [("grammar_search" if i % 2 == 0 else "docs_search",
              {"query": queries[i % len(queries)], "top_k": plan.randint(1, 10)}) for i in range(N_CALLS)]
    outputs: list[Any] = [None] * N_CALLS
    crashes: list[str] = []

    async def worker(w: int) -> None:
        ctx = tool_context(TutorDeps(retriever=hr, monitor=monitor, subject_id=None))
        for i in range(w, N_CALLS, N_TASKS):
            name, args = calls[i]
            try:
                outputs[i] = await call_tool(toolset, ctx, name, args)
            except Exception as exc:  # noqa: BLE001 - any exception is a failed tool call
                crashes.append(f"{name}: {type(exc).__name__}: {exc}")

    async def main() -> None:
        await asyncio.gather(*(worker(w) for w in range(N_TASKS)))

    from .test_no_stalls import _max_stall

    done = asyncio.Event()
    ticker = asyncio.create_task(_max_stall(done))
    started = time.perf_counter()
    await main()
    wall_s = time.perf_counter() - started
    done.set()
    max_stall_ms = await ticker * 1000

    # zero failed tool calls: no exception, no error result, every call has results
    assert crashes == []
    assert all(isinstance(o, dict) and "error" not in o and o["results"] for o in outputs)
    for o, (_, args) in zip(outputs, calls, strict=True):
        assert len(o["results"]) <= args["top_k"]
        assert o["used_hyde"] == (o["fallback_reason"] is None)

    # the monitor saw every call, and every HyDE failure with its reason
    records = monitor.records()
    monitor.flush()  # the JSONL is written by the monitor's writer thread
    jsonl = [json.loads(line) for line in (tmp_path / "metrics.jsonl").read_text(encoding="utf-8").splitlines()]
    assert monitor.total == len(records) == len(jsonl) == N_CALLS
    assert sum(a.count for a in monitor.aggregates().values()) == N_CALLS
    assert Counter(r.tool for r in records) == Counter(name for name, _ in calls)
    assert all(r.use_hyde and r.error is None and r.results > 0 for r in records)
    assert all(r.used_hyde == (r.fallback_reason is None) for r in records)
    by_tool = Counter(o["fallback_reason"] for o in outputs)
    by_monitor = Counter(r.fallback_reason for r in records)
    by_jsonl = Counter(line["fallback_reason"] for line in jsonl)
    assert by_tool == by_monitor == by_jsonl
    reasons = {k: v for k, v in by_monitor.items() if k is not None}
    assert set(reasons) == {"llm_error", "timeout"}  # the simulated text is always a valid hypothesis
    assert sum(reasons.values()) + by_monitor[None] == N_CALLS
    (agg,) = monitor.aggregates().values()
    assert agg.fallback_rate == pytest.approx(sum(reasons.values()) / N_CALLS)
    assert agg.error_rate == 0.0

    # the reasons match what the simulated LLM did: each call rolls once, in a seeded sequence
    rng = random.Random(SEED)
    rolls = [rng.random() for _ in range(N_CALLS)]
    hangs = sum(r < HANG_RATE for r in rolls)
    fails = sum(HANG_RATE <= r < HANG_RATE + FAIL_RATE for r in rolls)
    assert reasons["timeout"] >= hangs  # every hang became a timeout (a slow call may time out too)
    assert reasons["llm_error"] <= fails  # nothing but an injected failure is an llm_error
    assert sum(reasons.values()) >= hangs + fails  # no injected fault was silently swallowed
    assert wall_s < 120  # hangs are cut by the timeout; nothing waits for them

    figures = {
        "calls": N_CALLS, "tasks": N_TASKS, "failed_tool_calls": len(crashes), "records": monitor.total,
        "max_event_loop_stall_ms": round(max_stall_ms, 1),
        "llm": {"latency_ms": LATENCY_MS, "fail_rate": FAIL_RATE, "hang_rate": HANG_RATE, "hyde_timeout_s": TIMEOUT_S,
                "injected_failures": fails, "injected_hangs": hangs},
        "used_hyde": by_monitor[None], "fallbacks": dict(sorted(reasons.items())),
        "slow_calls_timed_out": reasons["timeout"] - hangs,  # not injected: the machine was too busy
        "monitor_total": monitor.total, "fallback_rate": round(agg.fallback_rate, 4),
        "p50_ms": round(agg.p50_ms, 1), "p95_ms": round(agg.p95_ms, 1),
        "wall_s": round(wall_s, 2), "calls_per_s": round(N_CALLS / wall_s, 1),
    }
    with capsys.disabled():
        print(f"\nreliability load: {json.dumps(figures)}")
    if os.environ.get("HYDE_RELIABILITY_REPORT"):
        Path(os.environ["HYDE_RELIABILITY_REPORT"]).write_text(json.dumps(figures, indent=2) + "\n", encoding="utf-8")
