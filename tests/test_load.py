"""Load: dynamic batching in front of the embedder, and the load drill with the REAL embedder.

Bounds here are loose on purpose (a shared 2-core machine); the targets live in the benchmark
(`hyde-tutor bench --load`, README)."""

from __future__ import annotations

import threading
import time
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from hyde_tutor.errors import EmbedderError
from hyde_tutor.retrieval.embedders.batching import BatchingEmbedder

from .conftest import HashEmbedder


class SlowEmbedder(HashEmbedder):
    """Takes 20 ms per call whatever its size, like a model whose cost is per call, not per text."""

    def __init__(self) -> None:
        super().__init__()
        self.sizes: list[int] = []

    def embed(self, texts):
        self.sizes.append(len(texts))
        time.sleep(0.02)
        return super().embed(texts)


def test_concurrent_calls_share_one_embed_call_and_get_their_own_rows() -> None:
    inner = SlowEmbedder()
    batcher = BatchingEmbedder(inner)
    texts = [f"текст номер {i}" for i in range(24)]
    out: dict[int, np.ndarray] = {}

    def one(i: int) -> None:
        out[i] = batcher.embed([texts[i]])

    threads = [threading.Thread(target=one, args=(i,)) for i in range(24)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert len(inner.sizes) < 24 and sum(inner.sizes) == 24  # coalesced: fewer calls than callers
    expected = HashEmbedder().embed(texts)
    for i in range(24):
        assert np.allclose(out[i][0], expected[i])  # each caller got its own row
    batcher.close()


def test_a_failing_batch_fails_every_caller_in_it_and_close_ends_waiting_calls() -> None:
    class Broken(HashEmbedder):
        def embed(self, texts):
            raise EmbedderError("the model went away")

    batcher = BatchingEmbedder(Broken())
    with pytest.raises(EmbedderError, match="went away"):
        batcher.embed(["a"])
    batcher.close()
    with pytest.raises(EmbedderError, match="closed"):
        batcher.embed(["b"])
    assert batcher.embed([]).shape == (0, 64)


def test_the_retriever_batches_its_configured_embedder(isolated_env: Path) -> None:
    from hyde_tutor import Retriever, Settings

    r = Retriever.from_settings(Settings())
    try:
        assert isinstance(r.dense, BatchingEmbedder) and r.dense.name == "use-multilingual-v3"
    finally:
        r.close()


def test_the_load_drill_with_the_real_embedder(isolated_env: Path, capsys) -> None:
    from hyde_tutor.config import Settings
    from hyde_tutor.evaluation.load import load_drill

    from .conftest import DATA

    import gc

    frozen = gc.get_freeze_count()
    report = load_drill(Settings(), calls=200, concurrency=50, data=DATA)
    print(report.to_json())
    assert report.embedder == "use-multilingual-v3" and report.store == "EdgeStore"
    assert report.failed_calls == 0 and report.records == 200
    assert report.calls_per_s > 5 and report.p95_ms < 30_000  # loose: the targets are the benchmark's
    assert sum(report.fallbacks.values()) > 0  # the flaky LLM was there, and every failure fell back
    assert gc.get_freeze_count() == frozen  # the drill's warm-up froze the GC, and the drill undid it


def test_a_caller_that_gave_up_is_dropped_from_its_batch_and_the_others_get_their_rows() -> None:
    """A cancelled search's future is skipped: setting a result on it would raise in the batcher's thread
    and leave every other caller of that batch waiting forever."""
    gate = threading.Event()

    class Gated(HashEmbedder):
        def embed(self, texts):
            gate.wait(5)
            return super().embed(texts)

    batcher = BatchingEmbedder(Gated())
    first = batcher.submit(["первый"])  # the worker takes it and waits at the gate
    time.sleep(0.05)
    gone, kept = batcher.submit(["ушёл"]), batcher.submit(["остался"])  # queued behind it, one batch
    assert gone.cancel()
    gate.set()
    assert first.result(5).shape == (1, 64) and kept.result(5).shape == (1, 64)
    assert np.allclose(kept.result()[0], HashEmbedder().embed(["остался"])[0])
    assert batcher.embed(["потом"]).shape == (1, 64)  # the worker is still alive
    batcher.close()


async def test_concurrent_async_encodes_share_batches_without_holding_worker_threads(tmp_path: Path, bm25) -> None:
    """``Retriever.aencode`` awaits the batch: with only 2 worker threads, 20 concurrent searches still join
    a few batches. Blocking a worker thread per search (``to_thread(encode)``) let 2 texts in per batch."""
    import asyncio
    import concurrent.futures

    from hyde_tutor.retrieval.retriever import Retriever
    from hyde_tutor.retrieval.store.edge import EdgeStore

    inner = SlowEmbedder()
    retriever = Retriever(EdgeStore(tmp_path), BatchingEmbedder(inner), bm25)
    asyncio.get_running_loop().set_default_executor(concurrent.futures.ThreadPoolExecutor(2))
    encoded = await asyncio.gather(*(retriever.aencode([f"вопрос {i}"]) for i in range(20)))
    assert [e.dense.shape for e in encoded] == [(1, 64)] * 20 and all(e.sparse for e in encoded)
    assert sum(inner.sizes) == 20 and len(inner.sizes) <= 4, inner.sizes
    retriever.close()


def test_the_process_embedder_gives_the_in_process_vectors_and_survives_a_killed_child() -> None:
    import os
    import signal

    from hyde_tutor.retrieval.embedders import UseEmbedder
    from hyde_tutor.retrieval.worker import ProcessEmbedder

    texts = ["Как сказать, что я хочу поехать в Пусан?", "주말에 부산에 가고 싶어요."]
    embedder = ProcessEmbedder("use", name="use-multilingual-v3", dim=512, threads=1)
    try:
        here = UseEmbedder(threads=1)
        assert np.allclose(embedder.embed(texts), here.embed(texts), atol=1e-6)
        here.close()
        pid = embedder.pid
        assert pid is not None and embedder.starts == 1
        os.kill(pid, signal.SIGKILL)  # out of memory, or an operator's kill, between two calls
        time.sleep(0.2)
        assert embedder.embed(texts).shape == (2, 512) and embedder.starts == 2 and embedder.pid != pid
        killer = threading.Timer(0.3, os.kill, (embedder.pid, signal.SIGKILL))  # ... and during one
        killer.start()
        with pytest.raises(EmbedderError, match="process stopped during a call.*next call starts a new one"):
            embedder.embed([f"{texts[0]} {i}" for i in range(20_000)])
        killer.join()
        assert embedder.embed(texts).shape == (2, 512) and embedder.starts == 3
        assert embedder.embed([]).shape == (0, 512)
    finally:
        embedder.close()
    assert embedder.pid is None
    with pytest.raises(EmbedderError, match="closed"):
        embedder.embed(texts)


def test_an_embedder_process_that_cannot_load_says_why() -> None:
    from hyde_tutor.retrieval.worker import ProcessEmbedder

    with pytest.raises(EmbedderError, match="Unknown embedder recipe 'bert'"):
        ProcessEmbedder("bert", name="x", dim=3)
    broken = ProcessEmbedder("use", name="use-multilingual-v3", dim=512, bogus=1)
    with pytest.raises(EmbedderError, match="did not start.*TypeError.*bogus"):
        broken.embed(["текст"])
    broken.close()


def _cold_retriever(tmp_path: Path, bm25: Any) -> tuple[Any, HashEmbedder, Any]:
    """A HydeRetriever over one ingested grammar entry, with nothing loaded yet: its Korean analyser has not read
    a Korean text (kiwipiepy would load on the first, about 2 s) and its collection is not opened. Returns the
    retriever, its embedder and that analyser."""
    from hyde_tutor import Bm25Encoder, KoreanAwareAnalyzer
    from hyde_tutor.corpus.documents import Document
    from hyde_tutor.corpus.ingest import IngestRequest, ingest_documents
    from hyde_tutor.hyde import HydeRetriever
    from hyde_tutor.retrieval.retriever import Retriever
    from hyde_tutor.retrieval.store.edge import EdgeStore

    store, embedder = EdgeStore(tmp_path), HashEmbedder()
    ingest_documents([Document("g1", "-고 싶다 хотеть", {"pattern": "-고 싶다"})],
                     IngestRequest(collection="grammar", progress=False), store, embedder, bm25)
    fresh = KoreanAwareAnalyzer()
    hr = HydeRetriever(Retriever(store, embedder, Bm25Encoder(fresh)), lambda d: None)  # type: ignore[arg-type, return-value]
    return hr, embedder, fresh


def test_warm_up_opens_the_collections_and_freezes_what_is_alive(tmp_path: Path, bm25) -> None:
    import gc

    hr, embedder, fresh = _cold_retriever(tmp_path, bm25)
    calls, frozen = embedder.calls, gc.get_freeze_count()
    try:
        hr.warm_up(["grammar"], freeze_gc=False)
        assert hr.retriever.is_checked("grammar") and embedder.calls > calls and gc.get_freeze_count() == frozen
        assert "_kiwi" in vars(fresh)  # the Korean analyser is loaded before the first learner's Korean text
        hr.warm_up(["grammar"])
        assert gc.get_freeze_count() > frozen
    finally:
        gc.unfreeze()
        hr.close()


def test_the_chat_warms_up_in_the_background_and_a_missing_collection_does_not_stop_it(tmp_path: Path, bm25) -> None:
    from hyde_tutor.tutor.chat import warm_up_in_background

    hr, _, fresh = _cold_retriever(tmp_path, bm25)
    try:
        stopped = threading.Event()
        stopped.set()  # the chat quit before the warm-up began: nothing is opened any more
        thread = warm_up_in_background(hr, ("grammar",), stopped)
        thread.join(60)
        assert not hr.retriever.is_checked("grammar") and "_kiwi" not in vars(fresh)
        thread = warm_up_in_background(hr, ("no-such-collection", "grammar"), threading.Event())
        thread.join(60)
        assert not thread.is_alive() and thread.daemon
        assert hr.retriever.is_checked("grammar") and "_kiwi" in vars(fresh)
    finally:
        hr.close()
