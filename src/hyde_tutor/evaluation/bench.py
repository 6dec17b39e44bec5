"""Benchmarks: embedding and ingest throughput, hybrid query latency at 10k / 100k points.

Latency is measured on synthetic points (random unit 512-d vectors and random
sparse vectors with a Zipf-like vocabulary) in a throw-away embedded shard whose
HNSW index is built during ingestion (``optimize``), as real ingests do.
"""

from __future__ import annotations

import shutil
import tempfile
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path

import numpy as np
from tqdm import tqdm

from ..config import IndexSettings, RetrievalSettings
from ..corpus.documents import Document
from ..retrieval.embedders import DenseEmbedder, embed_in_batches
from ..corpus.ingest import IngestRequest, ingest_documents
from ..retrieval.sparse import Bm25Encoder, SparseVec
from ..retrieval.store import CollectionSpec, EdgeStore, PointRecord, StoreQuery

VOCAB = 30_000


@dataclass(frozen=True, slots=True)
class BenchRow:
    name: str
    value: float
    unit: str


def timed(fn: Callable[[], object]) -> float:
    t0 = time.perf_counter()
    fn()
    return time.perf_counter() - t0


def embedding_throughput(dense: DenseEmbedder, sparse: Bm25Encoder, texts: Sequence[str], batch_size: int) -> list[BenchRow]:
    dense.embed(texts[:2])  # load the model outside the timing
    sparse.encode_documents(texts[:2])
    d = timed(lambda: embed_in_batches(dense, list(texts), batch_size))
    s = timed(lambda: sparse.encode_documents(texts))
    return [
        BenchRow(f"dense embed ({dense.name}, batch {batch_size})", len(texts) / d, "texts/s"),
        BenchRow("sparse BM25 encode (kiwi + snowball)", len(texts) / s, "texts/s"),
    ]


def ingest_throughput(docs: Sequence[Document], dense: DenseEmbedder, sparse: Bm25Encoder, workdir: Path) -> list[BenchRow]:
    with EdgeStore(workdir / "ingest") as store:
        request = IngestRequest(collection="bench_ingest", recreate=True, progress=False)
        report = ingest_documents(docs, request, store, dense, sparse)
    return [BenchRow(f"ingest {len(docs)} docs (embed + index)", report.written / report.seconds, "docs/s")]


def _random_sparse(rng: np.random.Generator, n_terms: int) -> SparseVec:
    idx = np.unique(np.minimum(rng.zipf(1.3, n_terms), VOCAB)).astype(int)
    return SparseVec(tuple(int(i) for i in idx), tuple(1.0 for _ in idx))


def _synthetic_points(rng: np.random.Generator, start: int, n: int, dim: int) -> list[PointRecord]:
    vectors = rng.standard_normal((n, dim)).astype(np.float32)
    vectors /= np.linalg.norm(vectors, axis=1, keepdims=True)
    return [
        PointRecord(f"{start + i:08d}-0000-0000-0000-000000000000", vectors[i], _random_sparse(rng, 40), {"doc_id": f"s{start + i}"})
        for i in range(n)
    ]


def query_latency(
    n_points: int, dim: int, workdir: Path, retrieval: RetrievalSettings, n_queries: int = 300, progress: bool = True
) -> list[BenchRow]:
    rng = np.random.default_rng(n_points)
    with EdgeStore(workdir / f"latency_{n_points}", IndexSettings()) as store:
        store.create_collection("synthetic", CollectionSpec("synthetic", dim, "synthetic"), recreate=True)
        t_ingest = 0.0
        for start in tqdm(range(0, n_points, 2000), desc=f"build {n_points} points", disable=not progress):
            pts = _synthetic_points(rng, start, min(2000, n_points - start), dim)
            t_ingest += timed(lambda: store.upsert("synthetic", pts))
        t_index = timed(lambda: store.finish_ingest("synthetic"))
        requests = [_query(rng, dim, retrieval) for _ in range(n_queries)]
        store.search_batch("synthetic", requests[:20])  # warm caches
        lat = [timed(lambda r=r: store.search_batch("synthetic", [r])) * 1000 for r in requests]
        batch_ms = timed(lambda: store.search_batch("synthetic", requests[:32])) * 1000
    label = f"{n_points // 1000}k"
    return [
        BenchRow(f"upsert {label} points", n_points / t_ingest, "points/s"),
        BenchRow(f"HNSW index build {label}", t_index, "s"),
        BenchRow(f"hybrid query p50 @ {label}", float(np.percentile(lat, 50)), "ms"),
        BenchRow(f"hybrid query p95 @ {label}", float(np.percentile(lat, 95)), "ms"),
        BenchRow(f"hybrid batch of 32 @ {label} (per query)", batch_ms / 32, "ms"),
    ]


def _query(rng: np.random.Generator, dim: int, s: RetrievalSettings) -> StoreQuery:
    v = rng.standard_normal(dim).astype(np.float32)
    return StoreQuery(
        limit=10, dense=(v / np.linalg.norm(v)).tolist(), sparse=_random_sparse(rng, 6),
        prefetch_limit=s.prefetch_limit, rrf_k=s.rrf_k, hnsw_ef=s.hnsw_ef,
    )


def run_all(
    docs: Sequence[Document], dense: DenseEmbedder, sparse: Bm25Encoder, retrieval: RetrievalSettings,
    sizes: Sequence[int] = (10_000, 100_000), batch_size: int = 64, progress: bool = True,
) -> list[BenchRow]:
    workdir = Path(tempfile.mkdtemp(prefix="hyde-bench-"))
    try:
        texts = [d.text for d in docs]
        rows = embedding_throughput(dense, sparse, texts, batch_size)
        rows += ingest_throughput(docs, dense, sparse, workdir)
        for n in sizes:
            rows += query_latency(n, dense.dim, workdir, retrieval, progress=progress)
        return rows
    finally:
        shutil.rmtree(workdir, ignore_errors=True)


def format_rows(rows: Sequence[BenchRow]) -> str:
    width = max(len(r.name) for r in rows) + 2
    return "\n".join([f"{'benchmark':<{width}}{'value':>12}  unit", "-" * (width + 20)] + [
        f"{r.name:<{width}}{r.value:>12.2f}  {r.unit}" for r in rows
    ])
