"""The store seam: what a vector store must do for hyde-tutor, engine-agnostic."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import asdict, dataclass, field
from typing import Any, Literal, Protocol

from ...errors import EmbedderMismatchError
from ..sparse import SparseVec

DENSE = "dense"
SPARSE = "sparse"
# Payload keys the store adds; they are not returned to callers.
DOC_ID_KEY = "doc_id"
HASH_KEY = "content_hash"
INTERNAL_KEYS = frozenset({DOC_ID_KEY, HASH_KEY})

FusionName = Literal["rrf", "dbsf"]


@dataclass(frozen=True, slots=True)
class CollectionSpec:
    """Which embedders built a collection; queries must use the same ones."""

    dense_embedder: str
    dense_dim: int
    sparse_encoder: str
    bm25_avg_len: float = 120.0

    def describe(self) -> str:
        return f"{self.dense_embedder} ({self.dense_dim}-d) + {self.sparse_encoder}"

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> CollectionSpec:
        return cls(**{k: data[k] for k in ("dense_embedder", "dense_dim", "sparse_encoder", "bm25_avg_len") if k in data})

    def check_compatible(self, collection: str, dense_embedder: str, dense_dim: int, sparse_encoder: str) -> None:
        """Raise :class:`EmbedderMismatchError` unless the given embedders built this collection."""
        if (self.dense_embedder, self.dense_dim, self.sparse_encoder) != (dense_embedder, dense_dim, sparse_encoder):
            configured = f"{dense_embedder} ({dense_dim}-d) + {sparse_encoder}"
            raise EmbedderMismatchError(collection, self.describe(), configured)


@dataclass(frozen=True, slots=True)
class PointRecord:
    """A point to write: stable id, both vectors, payload (with ``doc_id`` and ``content_hash``)."""

    point_id: str
    dense: Sequence[float]
    sparse: SparseVec
    payload: dict[str, Any]


@dataclass(frozen=True, slots=True)
class StoreQuery:
    """One search. Give ``dense``, ``sparse`` or both (both = hybrid with fusion)."""

    limit: int
    dense: Sequence[float] | None = None
    sparse: SparseVec | None = None
    prefetch_limit: int = 50
    fusion: FusionName = "rrf"
    rrf_k: int = 60
    dense_weight: float = 1.0
    sparse_weight: float = 1.0
    hnsw_ef: int | None = None
    dense_name: str = DENSE
    """The collection's name for the dense vector (``dense`` in collections hyde-tutor builds)."""
    sparse_name: str = SPARSE
    id_field: str | None = None
    """Payload field holding the document id in a collection hyde-tutor did not build (else the point id)."""

    @property
    def custom_names(self) -> bool:
        return (self.dense_name, self.sparse_name) != (DENSE, SPARSE)

    @property
    def channels(self) -> tuple[str, ...]:
        chans = []
        if self.dense is not None:
            chans.append(DENSE)
        if self.sparse is not None and len(self.sparse) > 0:
            chans.append(SPARSE)
        return tuple(chans)


@dataclass(frozen=True, slots=True)
class Hit:
    """A search result: the ORIGINAL document id, the score and the document's payload."""

    doc_id: str
    score: float
    payload: dict[str, Any] = field(default_factory=dict)


QUESTIONS_SUFFIX = "__questions"


def questions_collection(name: str) -> str:
    """The companion collection holding the learner questions of ``name`` (one point per question)."""
    return f"{name}{QUESTIONS_SUFFIX}"


def public_payload(payload: dict[str, Any] | None) -> dict[str, Any]:
    return {k: v for k, v in (payload or {}).items() if k not in INTERNAL_KEYS}


def ranked(hits: list[Hit]) -> list[Hit]:
    """Score order with a deterministic tie-break (doc id): Qdrant's fusion orders ties arbitrarily,
    which would otherwise make fused HyDE rankings differ from run to run."""
    return sorted(hits, key=lambda h: (-h.score, h.doc_id))


def hit_from(payload: dict[str, Any] | None, score: float, point_id: Any = None, id_field: str | None = None) -> Hit:
    """A hit with the ORIGINAL document id: ``doc_id`` (ours), else the schema's ``id_field``, else the point id."""
    payload = payload or {}
    candidates = (payload.get(DOC_ID_KEY), payload.get(id_field) if id_field else None, point_id)
    doc_id = next((c for c in candidates if c is not None and c != ""), "")  # point id 0 is an id
    return Hit(doc_id=str(doc_id), score=float(score), payload=public_payload(payload))


@dataclass(frozen=True, slots=True, kw_only=True)
class CollectionInfo:
    """What the engine says about one collection (``hyde-tutor inspect``)."""

    name: str
    dense: dict[str, tuple[int, str]] = field(default_factory=dict)
    """Dense vector name -> (size, distance)."""
    sparse: dict[str, str] = field(default_factory=dict)
    """Sparse vector name -> modifier (``idf`` or ``none``)."""
    points: int = 0
    sample: dict[str, Any] = field(default_factory=dict)
    """One point's payload, without hyde-tutor's internal keys."""
    built_by_hyde_tutor: str | None = None
    """The embedders recorded at ingest, for collections hyde-tutor built."""


class VectorStore(Protocol):
    """Minimal vector-store interface; implemented by qdrant-edge and qdrant-client backends."""

    def list_collections(self) -> list[str]: ...

    def collection_spec(self, name: str) -> CollectionSpec: ...

    def create_collection(self, name: str, spec: CollectionSpec, *, recreate: bool = False) -> None: ...

    def delete_collection(self, name: str) -> None: ...

    def upsert(self, name: str, points: Sequence[PointRecord]) -> None: ...

    def delete_points(self, name: str, point_ids: Sequence[str]) -> None: ...

    def stored_hashes(self, name: str, point_ids: Sequence[str]) -> dict[str, str]: ...

    def count(self, name: str) -> int: ...

    def point_ids(self, name: str) -> list[str]:
        """Every point id in the collection (for ``ingest --sync``)."""
        ...

    def search_batch(self, name: str, requests: Sequence[StoreQuery]) -> list[list[Hit]]: ...

    def describe_collection(self, name: str) -> CollectionInfo:
        """Its vectors, point count and a sample payload, as the engine reports them."""
        ...

    def finish_ingest(self, name: str) -> None: ...

    def close(self) -> None: ...
