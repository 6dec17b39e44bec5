"""Plain (no-HyDE) hybrid retrieval: embed queries, search in one batched store call.

``mode`` picks the channels: ``hybrid`` (dense + sparse fused by Qdrant with
explicit RRF k and weights), ``dense`` or ``sparse``.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Literal

import numpy as np

from .config import RetrievalSettings, Settings
from .embedders import DenseEmbedder, embed_in_batches, make_dense_embedder
from .sparse import Bm25Encoder, SparseVec
from .store import CollectionSpec, Hit, SearchRequest, VectorStore, open_store
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
    ) -> None:
        self.store = store
        self.dense = dense
        self.sparse = sparse
        self.settings = settings or RetrievalSettings()
        self.batch_size = batch_size
        self._checked: dict[str, CollectionSpec] = {}

    @classmethod
    def from_settings(cls, settings: Settings) -> Retriever:
        sparse = Bm25Encoder(k1=settings.sparse.k1, b=settings.sparse.b)
        return cls(open_store(settings), make_dense_embedder(settings), sparse, settings.retrieval, settings.dense.batch_size)

    def close(self) -> None:
        self.store.close()

    def check_collection(self, collection: str) -> CollectionSpec:
        """The collection's spec; raises if it is missing or was built by other embedders."""
        if collection not in self._checked:
            spec = self.store.collection_spec(collection)
            spec.check_compatible(collection, self.dense.name, self.dense.dim, self.sparse.name)
            self._checked[collection] = spec
        return self._checked[collection]

    def encode(self, texts: Sequence[str]) -> EncodedQueries:
        return EncodedQueries(
            dense=embed_in_batches(self.dense, list(texts), self.batch_size),
            sparse=self.sparse.encode_queries(texts),
        )

    def request(
        self, encoded: EncodedQueries, row: int, limit: int, mode: SearchMode = "hybrid",
        settings: RetrievalSettings | None = None,
    ) -> SearchRequest:
        s = settings or self.settings
        return SearchRequest(
            limit=limit,
            dense=encoded.dense[row].tolist() if mode in ("hybrid", "dense") else None,
            sparse=encoded.sparse[row] if mode in ("hybrid", "sparse") else None,
            prefetch_limit=max(s.prefetch_limit, limit),
            fusion=s.fusion,
            rrf_k=s.rrf_k,
            dense_weight=s.dense_weight,
            sparse_weight=s.sparse_weight,
            hnsw_ef=s.hnsw_ef,
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
        encoded = self.encode(texts)
        requests = [self.request(encoded, i, top_k, mode, settings) for i in range(len(texts))]
        searchable = [i for i, r in enumerate(requests) if r.channels]
        found = self.store.search_batch(collection, [requests[i] for i in searchable])
        results: list[list[Hit]] = [[] for _ in texts]
        for i, hits in zip(searchable, found, strict=True):
            results[i] = hits
        return results

    def search(self, collection: str, query: str, top_k: int | None = None, mode: SearchMode = "hybrid") -> list[Hit]:
        return self.search_many(collection, [query], top_k, mode)[0]
