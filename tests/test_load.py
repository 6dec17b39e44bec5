"""Load: dynamic batching in front of the embedder, and the load drill with the REAL embedder.

Bounds here are loose on purpose (a shared 2-core machine); the targets live in the benchmark
(`hyde-tutor bench --load`, README)."""

from __future__ import annotations

import threading
import time
from pathlib import Path

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

    report = load_drill(Settings(), calls=200, concurrency=50, data=DATA)
    print(report.to_json())
    assert report.embedder == "use-multilingual-v3" and report.store == "EdgeStore"
    assert report.failed_calls == 0 and report.records == 200
    assert report.calls_per_s > 5 and report.p95_ms < 30_000  # loose: the targets are the benchmark's
    assert sum(report.fallbacks.values()) > 0  # the flaky LLM was there, and every failure fell back
