"""Qdrant server / cluster through ``qdrant-client`` (also its local in-process mode).

Collections carry the same named vectors as the embedded store (``dense`` +
``sparse`` with IDF) and record their embedders in the collection metadata.
"""

from __future__ import annotations

import math

from collections.abc import Sequence
from typing import Any

from pydantic import ValidationError
from qdrant_client import QdrantClient, models
from qdrant_client.http.exceptions import ResponseHandlingException, UnexpectedResponse

from ...config import IndexSettings
from ...errors import CollectionNotFoundError, StoreLockedError, StoreUnavailableError
from ..validation import validate_collection_name
from .base import (DENSE, HASH_KEY, SPARSE, CollectionInfo, CollectionSpec, Hit, PointRecord, StoreQuery, hit_from,
                   public_payload, ranked)

SPEC_KEY = "hyde_tutor_spec"


class QdrantClientStore:
    """:class:`~hyde_tutor.store.base.VectorStore` over a :class:`qdrant_client.QdrantClient`."""

    def __init__(self, client: QdrantClient, index: IndexSettings | None = None, *, exact: bool = False) -> None:
        self.client = client
        self.index = index or IndexSettings()
        self.exact = exact  # local mode is brute force: HNSW params would be ignored

    @classmethod
    def connect(cls, url: str, api_key: str | None = None, timeout_s: float = 10.0, index: IndexSettings | None = None) -> QdrantClientStore:
        return cls(QdrantClient(url=url, api_key=api_key, timeout=max(1, math.ceil(timeout_s))), index)

    @classmethod
    def local(cls, path: str, index: IndexSettings | None = None) -> QdrantClientStore:
        """qdrant-client's local mode (brute force, in-process, on disk at ``path``)."""
        try:
            return cls(QdrantClient(path=path), index, exact=True)
        except RuntimeError as exc:
            if "already accessed" in str(exc):
                raise StoreLockedError(path) from exc
            raise StoreUnavailableError(f"Cannot open local Qdrant at {path}: {exc}") from exc

    def list_collections(self) -> list[str]:
        return sorted(c.name for c in self._call(self.client.get_collections).collections)

    def collection_spec(self, name: str) -> CollectionSpec:
        validate_collection_name(name)
        if not self._call(self.client.collection_exists, name):
            raise CollectionNotFoundError(name, self.list_collections())
        info = self._call(self.client.get_collection, name)
        metadata = getattr(info.config, "metadata", None) or {}
        if SPEC_KEY not in metadata:
            raise StoreUnavailableError(
                f"Collection {name!r} was not created by hyde-tutor (no {SPEC_KEY} metadata). "
                f"Re-create it: hyde-tutor ingest --collection {name} --file PATH --recreate"
            )
        return CollectionSpec.from_dict(metadata[SPEC_KEY])

    def create_collection(self, name: str, spec: CollectionSpec, *, recreate: bool = False) -> None:
        validate_collection_name(name)
        if self._call(self.client.collection_exists, name):
            if not recreate:
                return
            self._call(self.client.delete_collection, name)
        self._call(
            self.client.create_collection,
            collection_name=name,
            vectors_config={DENSE: models.VectorParams(size=spec.dense_dim, distance=models.Distance.COSINE)},
            sparse_vectors_config={SPARSE: models.SparseVectorParams(modifier=models.Modifier.IDF)},
            hnsw_config=models.HnswConfigDiff(m=self.index.hnsw_m, ef_construct=self.index.hnsw_ef_construct),
            metadata={SPEC_KEY: spec.to_dict()},
        )

    def describe_collection(self, name: str) -> CollectionInfo:
        validate_collection_name(name)
        if not self._call(self.client.collection_exists, name):
            raise CollectionNotFoundError(name, self.list_collections())
        info = self._call(self.client.get_collection, name)
        params = info.config.params
        vectors = params.vectors if isinstance(params.vectors, dict) else {"": params.vectors}
        dense = {n: (int(v.size), str(v.distance.value if hasattr(v.distance, "value") else v.distance))
                 for n, v in (vectors or {}).items() if v is not None}
        sparse = {n: str(getattr(v.modifier, "value", v.modifier) or "none").lower()
                  for n, v in (params.sparse_vectors or {}).items()}
        records, _ = self._call(self.client.scroll, collection_name=name, limit=1, with_payload=True)
        metadata = getattr(info.config, "metadata", None) or {}
        built = CollectionSpec.from_dict(metadata[SPEC_KEY]).describe() if SPEC_KEY in metadata else None
        return CollectionInfo(name=name, dense=dense, sparse=sparse, points=self.count(name),
                              sample=public_payload(records[0].payload if records else None), built_by_hyde_tutor=built)

    def delete_collection(self, name: str) -> None:
        validate_collection_name(name)
        self._call(self.client.delete_collection, name)

    def upsert(self, name: str, points: Sequence[PointRecord]) -> None:
        validate_collection_name(name)
        if not points:
            return
        structs = [
            models.PointStruct(
                id=p.point_id,
                vector={
                    DENSE: [float(x) for x in p.dense],
                    SPARSE: models.SparseVector(indices=list(p.sparse.indices), values=list(p.sparse.values)),
                },
                payload=p.payload,
            )
            for p in points
        ]
        self._call(self.client.upsert, collection_name=name, points=structs, wait=True)

    def delete_points(self, name: str, point_ids: Sequence[str]) -> None:
        validate_collection_name(name)
        if point_ids:
            selector = models.PointIdsList(points=list(point_ids))
            self._call(self.client.delete, collection_name=name, points_selector=selector, wait=True)

    def stored_hashes(self, name: str, point_ids: Sequence[str]) -> dict[str, str]:
        validate_collection_name(name)
        if not point_ids:
            return {}
        records = self._call(self.client.retrieve, collection_name=name, ids=list(point_ids), with_payload=[HASH_KEY])
        return {str(r.id): str((r.payload or {}).get(HASH_KEY, "")) for r in records}

    def count(self, name: str) -> int:
        validate_collection_name(name)
        return int(self._call(self.client.count, collection_name=name, exact=True).count)

    def point_ids(self, name: str) -> list[str]:
        validate_collection_name(name)
        ids: list[str] = []
        offset: Any = None
        while True:
            records, offset = self._call(self.client.scroll, collection_name=name, limit=1000, offset=offset,
                                         with_payload=False, with_vectors=False)
            ids += [str(r.id) for r in records]
            if offset is None:
                return ids

    def finish_ingest(self, name: str) -> None:
        """Servers index in the background; nothing to do."""
        validate_collection_name(name)

    def search_batch(self, name: str, requests: Sequence[StoreQuery]) -> list[list[Hit]]:
        validate_collection_name(name)
        if not requests:
            return []
        responses = self._call(
            self.client.query_batch_points,
            collection_name=name,
            requests=[_client_query(r, with_params=not self.exact) for r in requests],
        )
        return [ranked([hit_from(p.payload, p.score, p.id, r.id_field) for p in resp.points])
                for r, resp in zip(requests, responses, strict=True)]

    def close(self) -> None:
        self.client.close()

    def __enter__(self) -> QdrantClientStore:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def _call(self, fn: Any, *args: Any, **kwargs: Any) -> Any:
        name = kwargs.get("collection_name") or (args[0] if args else None)
        try:
            return fn(*args, **kwargs)
        except (UnexpectedResponse, ValueError) as exc:
            if isinstance(exc, ValidationError):  # our request was malformed: a bug, not an outage
                raise
            text = str(exc).lower()
            if "collection" in text and "not found" in text and name:
                raise CollectionNotFoundError(str(name)) from exc
            raise StoreUnavailableError(f"Qdrant request failed: {exc}") from exc
        except (ResponseHandlingException, OSError, RuntimeError, ConnectionError) as exc:
            raise StoreUnavailableError(f"Qdrant is unreachable or failed: {exc}") from exc
        except Exception as exc:  # transport errors (httpx, grpc) by module, not by catching everything
            if type(exc).__module__.split(".")[0] in ("httpx", "httpcore", "grpc"):
                raise StoreUnavailableError(f"Qdrant is unreachable or failed: {exc}") from exc
            raise


def _client_query(req: StoreQuery, with_params: bool = True) -> models.QueryRequest:
    params = models.SearchParams(hnsw_ef=req.hnsw_ef) if req.hnsw_ef and with_params else None
    channels: dict[str, Any] = {}
    if DENSE in req.channels:
        channels[req.dense_name] = [float(x) for x in req.dense or ()]
    if SPARSE in req.channels and req.sparse is not None:
        channels[req.sparse_name] = models.SparseVector(indices=list(req.sparse.indices), values=list(req.sparse.values))
    if not channels:
        raise ValueError("StoreQuery needs a dense or a non-empty sparse vector")
    if len(channels) == 1:
        (using, query), = channels.items()
        return models.QueryRequest(query=query, using=using, limit=req.limit, params=params, with_payload=True)
    prefetch = [models.Prefetch(query=q, using=u, limit=req.prefetch_limit, params=params) for u, q in channels.items()]
    if req.fusion == "dbsf":
        fusion: Any = models.FusionQuery(fusion=models.Fusion.DBSF)
    else:
        fusion = models.RrfQuery(rrf=models.Rrf(k=req.rrf_k, weights=[req.dense_weight, req.sparse_weight]))
    return models.QueryRequest(prefetch=prefetch, query=fusion, limit=req.limit, with_payload=True)
