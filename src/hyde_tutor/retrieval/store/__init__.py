"""Vector stores: embedded qdrant-edge (default) and qdrant-client (server or local mode)."""

from __future__ import annotations

from ...config import Settings
from .base import CollectionSpec, Hit, PointRecord, StoreQuery, VectorStore, questions_collection
from .client import QdrantClientStore
from .edge import EdgeStore

__all__ = [
    "CollectionSpec",
    "EdgeStore",
    "Hit",
    "PointRecord",
    "QdrantClientStore",
    "StoreQuery",
    "VectorStore",
    "open_store",
    "questions_collection",
]


def open_store(settings: Settings) -> VectorStore:
    """Open the store the settings name: server URL > qdrant-client local mode > embedded qdrant-edge."""
    q = settings.qdrant
    if q.url:
        key = q.api_key.get_secret_value() if q.api_key else None
        return QdrantClientStore.connect(q.url, key, q.timeout_s, settings.index)
    if q.local:
        path = settings.data_dir / "qdrant-local"
        path.mkdir(parents=True, exist_ok=True)
        return QdrantClientStore.local(str(path), settings.index)
    return EdgeStore(settings.data_dir / "edge", settings.index)
