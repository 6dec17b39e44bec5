"""Plain (no-HyDE) hybrid retrieval: embed queries, search in one batched store call.

``mode`` picks the channels: ``hybrid`` (dense + sparse fused by Qdrant with
explicit RRF k and weights), ``dense`` or ``sparse``.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Mapping, Sequence
from pathlib import Path
from dataclasses import dataclass
from typing import Any, Literal

import numpy as np

from ..config import RetrievalSettings, Settings
from .embedders.batching import BatchingEmbedder
from .embedders import DenseEmbedder, embed_in_batches, make_dense_embedder
from .sparse import Bm25Encoder, SparseVec
from ..errors import CollectionNotFoundError
from .schemas import CollectionSchema, FastembedBm25
from .store import CollectionSpec, Hit, StoreQuery, VectorStore, open_store
from .store.base import SPARSE
from .validation import validate_query, validate_top_k

SearchMode = Literal["hybrid", "dense", "sparse"]


@dataclass(frozen=True, slots=True)
class EncodedQueries:
    """Dense and sparse encodings of a batch of texts, row-aligned."""

    dense: np.ndarray
    sparse: list[SparseVec]


class Retriever:
    """Hybrid retrieval over one store with one pair of embedders."""

    def __init__(
        self,
        store: VectorStore,
        dense: DenseEmbedder,
        sparse: Bm25Encoder,
        settings: RetrievalSettings | None = None,
        batch_size: int = 64,
        *,
        schemas: Mapping[str, CollectionSchema] | None = None,
        fastembed_dir: Path | None = None,
    ) -> None:
        self.store = store
        self.dense = dense
        self.sparse = sparse
        self.settings = settings or RetrievalSettings()
        self.batch_size = batch_size
        self.schemas: dict[str, CollectionSchema] = dict(schemas or {})
        self._fastembed_dir = fastembed_dir
        self._fastembed: dict[str, FastembedBm25] = {}
        self._checked: dict[str, CollectionSpec] = {}

    @classmethod
    def from_settings(cls, settings: Settings, store: VectorStore | None = None) -> Retriever:
        """The retriever the settings describe; ``store`` replaces the configured one (a benchmark's
        temporary store, for instance)."""
        sparse = Bm25Encoder(k1=settings.sparse.k1, b=settings.sparse.b)
        schemas = {name: CollectionSchema.from_settings(name, s) for name, s in settings.schemas.items()}
        # concurrent searches share embed calls; none waits for its vectors past the bound
        dense = BatchingEmbedder(make_dense_embedder(settings), timeout_s=settings.dense.embed_timeout_s)
        return cls(store or open_store(settings), dense, sparse, settings.retrieval, settings.dense.batch_size,
                   schemas=schemas, fastembed_dir=settings.data_dir / "fastembed")

    def sparse_for(self, collection: str | None) -> Any:
        """The query sparse encoder whose vectors match the collection's stored ones."""
        schema = self.schemas.get(collection or "")
        if schema is None or schema.sparse_encoder == "kiwi":
            return self.sparse
        if schema.fastembed_language not in self._fastembed:
            self._fastembed[schema.fastembed_language] = FastembedBm25(schema.fastembed_language, self._fastembed_dir)
        return self._fastembed[schema.fastembed_language]

    def close(self) -> None:
        """Close the store and the encoders that hold resources (an embedder's loop thread and HTTP client)."""
        try:
            self.store.close()
        finally:
            for encoder in (self.dense, self.sparse):
                close = getattr(encoder, "close", None)
                if callable(close):
                    close()

    def is_checked(self, collection: str) -> bool:
        """Whether :meth:`check_collection` already passed for ``collection`` (then it costs nothing)."""
        return collection in self._checked

    def forget(self, collection: str) -> None:
        """Check ``collection`` again on its next use (it failed: deleted, or rebuilt with other embedders)."""
        self._checked.pop(collection, None)

    def check_collection(self, collection: str) -> CollectionSpec:
        """The collection's spec; raises if it is missing or was built by other embedders. A collection with
        a schema (built elsewhere) only has to exist: its schema says how to search it."""
        if collection not in self._checked and collection in self.schemas:
            if collection not in self.store.list_collections():
                raise CollectionNotFoundError(collection, self.store.list_collections())
            schema = self.schemas[collection]
            self._checked[collection] = CollectionSpec(f"schema:{schema.dense_vector}", self.dense.dim,
                                                       self.sparse_for(collection).name)
        if collection not in self._checked:
            spec = self.store.collection_spec(collection)
            spec.check_compatible(collection, self.dense.name, self.dense.dim, self.sparse.name)
            self._checked[collection] = spec
        return self._checked[collection]

    def encode(self, texts: Sequence[str], collection: str | None = None) -> EncodedQueries:
        """Dense and sparse query vectors; ``collection`` picks the sparse encoder its schema names."""
        return EncodedQueries(
            dense=embed_in_batches(self.dense, list(texts), self.batch_size),
            sparse=self.sparse_for(collection).encode_queries(list(texts)),
        )

    async def aencode(self, texts: Sequence[str], collection: str | None = None) -> EncodedQueries:
        """:meth:`encode` for async code. With a batching embedder the coroutine awaits the batch without
        holding a worker thread, so every search in flight can join the same batch; the sparse vectors
        are encoded in a worker thread meanwhile."""
        texts = list(texts)
        submit, wait = getattr(self.dense, "submit", None), getattr(self.dense, "wait", None)
        if not callable(submit) or not callable(wait) or len(texts) > self.batch_size:
            return await asyncio.to_thread(self.encode, texts, collection)
        started = time.monotonic()
        future = submit(texts)
        try:
            sparse = await asyncio.to_thread(self.sparse_for(collection).encode_queries, texts)
        except BaseException:
            future.cancel()
            raise
        return EncodedQueries(dense=await wait(future, len(texts), started), sparse=sparse)  # bounded wait

    def request(
        self, encoded: EncodedQueries, row: int, limit: int, mode: SearchMode = "hybrid",
        settings: RetrievalSettings | None = None, collection: str | None = None,
    ) -> StoreQuery:
        s = settings or self.settings
        schema = self.schemas.get(collection or "")
        if schema is not None:
            if schema.sparse_vector is None:
                mode = "dense"
            names = {"dense_name": schema.dense_vector, "sparse_name": schema.sparse_vector or SPARSE,
                     "id_field": schema.id_field}
        else:
            names = {}
        return StoreQuery(
            limit=limit,
            dense=encoded.dense[row].tolist() if mode in ("hybrid", "dense") else None,
            sparse=encoded.sparse[row] if mode in ("hybrid", "sparse") else None,
            prefetch_limit=max(s.prefetch_limit, limit),
            fusion=s.fusion,
            rrf_k=s.rrf_k,
            dense_weight=s.dense_weight,
            sparse_weight=s.sparse_weight,
            hnsw_ef=s.hnsw_ef,
            **names,  # type: ignore[arg-type]
        )

    def search_many(
        self, collection: str, queries: Sequence[str], top_k: int | None = None, mode: SearchMode = "hybrid",
        *, settings: RetrievalSettings | None = None,
    ) -> list[list[Hit]]:
        """Validate, encode in batches and search all ``queries`` in one batched store call.

        ``settings`` overrides the retriever's retrieval settings for this call (e.g. another fusion).
        """
        top_k = validate_top_k(top_k if top_k is not None else self.settings.top_k)
        texts = [validate_query(q, self.settings.max_query_chars) for q in queries]
        self.check_collection(collection)
        if not texts:
            return []
        encoded = self.encode(texts, collection)
        requests = [self.request(encoded, i, top_k, mode, settings, collection) for i in range(len(texts))]
        searchable = [i for i, r in enumerate(requests) if r.channels]
        found = self.store.search_batch(collection, [requests[i] for i in searchable])
        results: list[list[Hit]] = [[] for _ in texts]
        for i, hits in zip(searchable, found, strict=True):
            results[i] = hits
        return results

    def search(self, collection: str, query: str, top_k: int | None = None, mode: SearchMode = "hybrid") -> list[Hit]:
        return self.search_many(collection, [query], top_k, mode)[0]
