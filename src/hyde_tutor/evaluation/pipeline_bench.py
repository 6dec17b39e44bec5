"""HyDE pipeline overhead with a simulated LLM: the concurrent pipeline vs the ideal and a sequential loop.

Everything runs in a temporary directory: the benchmark never writes into the user's data dir.
"""

from __future__ import annotations

import asyncio
import tempfile
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np

from .bench import timed
from ..config import Settings
from ..corpus.documents import Document
from ..hyde.fusion import reciprocal_rank_fusion
from ..hyde import HydeRetriever
from ..hyde.request import SearchRequest
from ..hyde.hypotheses import HypothesisGenerator
from ..hyde.cache import NoCache
from ..corpus.ingest import IngestRequest, ingest_documents
from ..retrieval.retriever import Retriever
from ..llm.simulated import simulated_hypothesis, simulated_model
from ..retrieval.store import EdgeStore

COLLECTION = "bench_pipeline"


def run_pipeline_bench(settings: Settings, docs: Sequence[Document], latency_ms: float, queries: Sequence[str],
                       *, progress: bool = True) -> dict[str, float]:
    """Ingest ``docs`` into a throw-away embedded store and time HyDE searches with a simulated LLM
    of ``latency_ms`` (see :func:`hyde_pipeline_bench`)."""
    model = simulated_model(latency_ms)
    hyde_settings = settings.hyde.model_copy(update={"cache": "off", "timeout_s": max(30.0, latency_ms / 100)})
    with tempfile.TemporaryDirectory(prefix="hyde-bench-") as workdir:
        retriever = Retriever.from_settings(settings, store=EdgeStore(Path(workdir) / "edge", settings.index))
        factory = lambda domain: HypothesisGenerator(model, "simulated", domain, cache=NoCache(),  # noqa: E731
                                                     hyde=hyde_settings, llm=settings.llm)
        with HydeRetriever(retriever, factory, hyde_settings) as hr:
            request = IngestRequest(collection=COLLECTION, progress=progress)
            ingest_documents(docs, request, retriever.store, retriever.dense, retriever.sparse)
            return hyde_pipeline_bench(hr, COLLECTION, queries, latency_ms)


def hyde_pipeline_bench(hyde: Any, collection: str, queries: Sequence[str], latency_ms: float, sizes: Sequence[int] = (1, 3, 8)) -> dict[str, float]:
    """End-to-end p50 of the concurrent pipeline vs the ideal and a sequential implementation.

    ideal = one LLM call + embedding one hypothesis + one hybrid search (measured, not assumed).
    sequential = hypotheses generated one after another, each embedded and searched on its own
    (the reference guide's loop), then fused.
    """
    r = hyde.retriever

    def embed_search_one(text: str) -> None:
        enc = r.encode([text])
        r.store.search_batch(collection, [r.request(enc, 0, 10)])

    request = SearchRequest(collection=collection, text="", top_k=5, use_hyde=True)

    async def pipeline(q: str, n: int) -> float:
        t0 = time.perf_counter()
        await hyde.execute(request.replace(text=q, n_hypotheses=n))
        return (time.perf_counter() - t0) * 1000

    async def sequential(q: str, n: int) -> float:
        t0 = time.perf_counter()
        gen = hyde.generator(collection)
        texts = []
        for p in gen.perspectives[:n]:
            run = await gen.call.run(gen.user_prompt(q, p))
            texts.append(run.text)
        rankings = []
        for text in [q, *texts]:
            enc = r.encode([text])
            rankings.append([h.doc_id for h in r.store.search_batch(collection, [r.request(enc, 0, 10)])[0]])
        reciprocal_rank_fusion(rankings, 60)
        return (time.perf_counter() - t0) * 1000

    async def run_all() -> dict[str, float]:
        out: dict[str, float] = {}
        sample = simulated_hypothesis("ideal probe")
        embed_search_one(sample)  # warm-up
        ideal_extra = float(np.median([timed(lambda: embed_search_one(sample)) * 1000 for _ in range(10)]))
        out["ideal_ms"] = latency_ms + ideal_extra
        for n in sizes:
            lat = [await pipeline(f"{q} [{n}:{i}]", n) for i, q in enumerate(queries)]
            out[f"n{n}_p50_ms"] = float(np.median(lat))
            out[f"n{n}_over_ideal"] = out[f"n{n}_p50_ms"] / out["ideal_ms"]
        seq = [await sequential(f"{q} [seq:{i}]", 3) for i, q in enumerate(queries)]
        out["sequential_n3_p50_ms"] = float(np.median(seq))
        out["sequential_n3_over_ideal"] = out["sequential_n3_p50_ms"] / out["ideal_ms"]
        out["llm_latency_ms"] = latency_ms
        return out

    return asyncio.run(run_all())
