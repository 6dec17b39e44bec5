"""Vector stores: embedded qdrant-edge (default) and qdrant-client (server or local mode)."""

from __future__ import annotations

from ...config import Settings
from ...errors import StoreUnavailableError
from .base import CollectionSpec, Hit, PointRecord, StoreQuery, VectorStore, questions_collection
from .client import QdrantClientStore
from .edge import EdgeStore
from .replica import EdgeReplica

__all__ = [
    "CollectionSpec",
    "EdgeReplica",
    "EdgeStore",
    "Hit",
    "PointRecord",
    "QdrantClientStore",
    "StoreQuery",
    "VectorStore",
    "open_store",
    "questions_collection",
]


def open_store(settings: Settings, *, replica: bool = False) -> VectorStore:
    """Open the store the settings name: server URL > qdrant-client local mode > embedded qdrant-edge.

    ``replica``: for one of several worker processes. The embedded store is then opened as this process's own
    read-only copy (:class:`~hyde_tutor.retrieval.store.replica.EdgeReplica`); a Qdrant server is shared as it is;
    qdrant-client's local mode, which one process opens at a time, is refused."""
    q = settings.qdrant
    if q.url:
        key = q.api_key.get_secret_value() if q.api_key else None
        return QdrantClientStore.connect(q.url, key, q.timeout_s, settings.index)
    if q.local:
        if replica:
            raise StoreUnavailableError("qdrant-client's local mode (HYDE_QDRANT__LOCAL) opens in one process only: "
                                        "serve it with one worker, or use the embedded store or a Qdrant server.")
        path = settings.data_dir / "qdrant-local"
        path.mkdir(parents=True, exist_ok=True)
        return QdrantClientStore.local(str(path), settings.index)
    if replica:
        return EdgeReplica(settings.data_dir / "edge", settings.index)
    return EdgeStore(settings.data_dir / "edge", settings.index)
