"""BM25 sparse vectors over the Korean-aware analyser.

Documents get saturated, length-normalised term frequencies; queries get 1.0
per distinct term. Qdrant multiplies by IDF at query time (the collection's
sparse vector uses ``Modifier.IDF``), so the dot product is BM25.
"""

from __future__ import annotations

import hashlib
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass

from .analysis import KoreanAwareAnalyzer

DEFAULT_AVG_LEN = 120.0


@dataclass(frozen=True, slots=True)
class SparseVec:
    """Sparse vector: sorted unique indices and their weights."""

    indices: tuple[int, ...]
    values: tuple[float, ...]

    def __len__(self) -> int:
        return len(self.indices)


def term_index(term: str) -> int:
    """Stable 31-bit index of a term (the same in every process and run)."""
    digest = hashlib.blake2b(term.encode("utf-8"), digest_size=4).digest()
    return int.from_bytes(digest, "big") & 0x7FFFFFFF


def _to_sparse(weights: dict[int, float]) -> SparseVec:
    items = sorted(weights.items())
    return SparseVec(tuple(i for i, _ in items), tuple(float(v) for _, v in items))


def bm25_document_weights(
    terms: Sequence[str], k1: float, b: float, avg_len: float
) -> SparseVec:
    """BM25 term-frequency part for one document (IDF comes from the store)."""
    counts: dict[int, float] = Counter()
    for term in terms:
        counts[term_index(term)] += 1.0
    norm = k1 * (1.0 - b + b * len(terms) / max(avg_len, 1e-9))
    return _to_sparse({i: tf * (k1 + 1.0) / (tf + norm) for i, tf in counts.items()})


def query_weights(terms: Sequence[str]) -> SparseVec:
    """Each distinct query term counts once."""
    return _to_sparse({term_index(t): 1.0 for t in terms})


class Bm25Encoder:
    """Encodes documents and queries into BM25 sparse vectors."""

    def __init__(
        self,
        analyzer: KoreanAwareAnalyzer | None = None,
        k1: float = 1.2,
        b: float = 0.75,
        avg_len: float = DEFAULT_AVG_LEN,
    ) -> None:
        self.analyzer = analyzer or KoreanAwareAnalyzer()
        self.k1 = k1
        self.b = b
        self.avg_len = avg_len

    @property
    def name(self) -> str:
        return f"bm25-{self.analyzer.name}"

    def average_length(self, texts: Sequence[str]) -> float:
        """Mean number of terms per text (used to fix ``avg_len`` for a collection)."""
        if not texts:
            return DEFAULT_AVG_LEN
        return sum(len(self.analyzer.tokenize(t)) for t in texts) / len(texts)

    def encode_documents(self, texts: Sequence[str]) -> list[SparseVec]:
        return [
            bm25_document_weights(self.analyzer.tokenize(t), self.k1, self.b, self.avg_len)
            for t in texts
        ]

    def encode_queries(self, texts: Sequence[str]) -> list[SparseVec]:
        return [query_weights(self.analyzer.tokenize(t)) for t in texts]
