"""Embedded Qdrant (``qdrant-edge-py``): one on-disk shard per collection.

Layout under ``root``: ``<collection>/shard/`` (the Qdrant shard) and
``<collection>/collection.json`` (which embedders built it). The engine locks
a shard for one process; a second process gets :class:`StoreLockedError` (several workers each open their own
copy: :class:`~hyde_tutor.retrieval.store.replica.EdgeReplica`).
Within one process, stores share open shards through a reference-counted registry.
"""

from __future__ import annotations

import re

import itertools
import json
import os
import shutil
import threading
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import qdrant_edge as qe

from ...config import IndexSettings
from ...errors import CollectionNotFoundError, StoreLockedError, StoreUnavailableError
from ..validation import validate_collection_name
from .base import (DENSE, HASH_KEY, SPARSE, CollectionInfo, CollectionSpec, Hit, PointRecord, StoreQuery,
                   public_payload, ranked)
from .payloads import PayloadCache, scored

META_FILE = "collection.json"
SHARD_DIR = "shard"
TRASH_PREFIX = ".trash-"
"""Folders being deleted: renamed to this (never a collection name: names cannot start with '.'), then removed."""
_trash_numbers = itertools.count()

_registry_lock = threading.Lock()
_open_shards: dict[Path, tuple[qe.EdgeShard, int]] = {}
_payload_caches: dict[Path, PayloadCache] = {}


def _payloads(path: Path) -> PayloadCache:
    """The shard's payload cache (shared, like the shard, by every store in the process)."""
    with _registry_lock:
        return _payload_caches.setdefault(path, PayloadCache())


def _acquire(path: Path, config: qe.EdgeConfig | None = None) -> qe.EdgeShard:
    with _registry_lock:
        if path in _open_shards and not path.exists():
            del _open_shards[path]  # its folder was deleted while open: never hand out that stale shard
        if path in _open_shards:
            shard, refs = _open_shards[path]
            _open_shards[path] = (shard, refs + 1)
            return shard
        try:
            shard = qe.EdgeShard.create(str(path), config) if config else qe.EdgeShard.load(str(path))
        except Exception as exc:  # the engine raises plain Exception
            raise _translate(exc, path) from exc
        _open_shards[path] = (shard, 1)
        return shard


def _release(path: Path) -> None:
    with _registry_lock:
        if path not in _open_shards:
            return
        shard, refs = _open_shards[path]
        if refs > 1:
            _open_shards[path] = (shard, refs - 1)
            return
        del _open_shards[path]
        _payload_caches.pop(path, None)
    try:
        shard.flush()
    finally:
        shard.close()


_LOCKED = re.compile(r"WouldBlock|\block(ed|file)?\b", re.IGNORECASE)


def _is_engine_error(exc: BaseException) -> bool:
    """qdrant-edge raises plain ``Exception`` for its own failures; OS errors are the disk's. Anything else
    (``TypeError``, ``KeyError``, ...) is a bug in the caller and must not be disguised as a store outage."""
    return type(exc) is Exception or isinstance(exc, (OSError, RuntimeError))


def _translate(exc: Exception, path: Path) -> Exception:
    text = str(exc)
    if _LOCKED.search(text):  # the word lock (not "block"), the OS's EWOULDBLOCK
        return StoreLockedError(str(path))
    return StoreUnavailableError(f"Embedded Qdrant store at {path} failed: {text}")


class EdgeStore:
    """:class:`~hyde_tutor.store.base.VectorStore` on the embedded qdrant-edge engine."""

    def __init__(self, root: Path, index: IndexSettings | None = None) -> None:
        self.root = Path(root)
        self.index = index or IndexSettings()
        self._held: dict[str, Path] = {}
        self._lock = threading.Lock()

    # -- paths and metadata ---------------------------------------------------
    def _dir(self, name: str) -> Path:
        """The collection's folder; every path under ``root`` is made here, from a validated name."""
        return self.root / validate_collection_name(name)

    def list_collections(self) -> list[str]:
        if not self.root.exists():
            return []
        return sorted(p.name for p in self.root.iterdir() if not p.name.startswith(".") and (p / META_FILE).exists())

    def collection_spec(self, name: str) -> CollectionSpec:
        meta = self._dir(name) / META_FILE
        if not meta.exists():
            raise CollectionNotFoundError(name, self.list_collections())
        try:
            return CollectionSpec.from_dict(json.loads(meta.read_text(encoding="utf-8")))
        except (OSError, ValueError, TypeError) as exc:
            raise StoreUnavailableError(f"Collection metadata {meta} is unreadable: {exc}. Re-ingest with --recreate.") from exc

    def _shard(self, name: str) -> qe.EdgeShard:
        with self._lock:
            if name not in self._held:
                self.collection_spec(name)  # raises CollectionNotFoundError
                path = self._dir(name) / SHARD_DIR
                if not path.exists():
                    raise StoreUnavailableError(
                        f"Shard folder {path} is missing (deleted?). Re-ingest with --recreate."
                    )
                _acquire(path)
                self._held[name] = path
            path = self._held[name]
            if not path.exists():  # deleted while open: the engine would go on serving, and writing to, unlinked files
                del self._held[name]
                with _registry_lock:
                    _open_shards.pop(path, None)
                raise StoreUnavailableError(
                    f"Shard folder {path} was deleted while the store was open. Re-ingest the collection: "
                    f"hyde-tutor ingest --collection {name} --file PATH --recreate"
                )
        entry = _open_shards.get(path)
        if entry is None:
            raise StoreUnavailableError(f"Shard {path} was closed.")
        return entry[0]

    # -- lifecycle ------------------------------------------------------------
    def create_collection(self, name: str, spec: CollectionSpec, *, recreate: bool = False) -> None:
        folder = self._dir(name)
        if (folder / META_FILE).exists() and not recreate:
            return
        if folder.exists():  # recreate, or a shard left without its collection.json by a crash: never in the way
            self.delete_collection(name)
        folder.mkdir(parents=True, exist_ok=True)
        config = qe.EdgeConfig(
            vectors={DENSE: qe.EdgeVectorParams(size=spec.dense_dim, distance=qe.Distance.Cosine)},
            sparse_vectors={SPARSE: qe.EdgeSparseVectorParams(modifier=qe.Modifier.Idf)},
            hnsw_config=qe.HnswIndexConfig(
                m=self.index.hnsw_m, ef_construct=self.index.hnsw_ef_construct, full_scan_threshold=10_000
            ),
            optimizers=qe.EdgeOptimizersConfig(indexing_threshold=self.index.indexing_threshold_kb),
        )
        path = folder / SHARD_DIR
        _acquire(path, config)
        with self._lock:
            self._held[name] = path
        _write_atomically(folder / META_FILE, json.dumps(spec.to_dict(), indent=2))

    def delete_collection(self, name: str) -> None:
        with self._lock:
            path = self._held.pop(name, None)
        if path is not None:
            _payloads(path).invalidate()
            _release(path)
        else:
            shard_path = self._dir(name) / SHARD_DIR
            if shard_path in _open_shards:
                raise StoreLockedError(str(shard_path))
        self._to_trash(self._dir(name))
        self._empty_trash()

    def _to_trash(self, folder: Path) -> None:
        """Take ``folder`` out of the store in one rename (a crash leaves the whole collection or none of it)."""
        if folder.exists():
            os.rename(folder, self.root / f"{TRASH_PREFIX}{folder.name}-{os.getpid()}-{next(_trash_numbers)}")

    def _empty_trash(self) -> None:  # a crash's leftovers too
        for left in self.root.glob(f"{TRASH_PREFIX}*"):
            shutil.rmtree(left, ignore_errors=True)

    def replace_collection(self, name: str, staging: str) -> None:
        """Put the fully built collection ``staging`` in ``name``'s place and remove the old one (``ingest
        --recreate`` builds beside the live collection, so a failed rebuild leaves it as it was). The folders
        are renamed, so ``name`` is missing only between two renames; this store reopens it on its next use."""
        old_dir, new_dir = self._dir(name), self._dir(staging)
        if not (new_dir / META_FILE).exists():
            raise CollectionNotFoundError(staging, self.list_collections())
        with self._lock:
            held = [self._held.pop(n, None) for n in (staging, name)]
        for path in held:
            if path is not None:
                _payloads(path).invalidate()
                _release(path)
        if old_dir / SHARD_DIR in _open_shards:  # another store of this process still searches it
            raise StoreLockedError(str(old_dir / SHARD_DIR))
        self._to_trash(old_dir)
        os.rename(new_dir, old_dir)
        self._empty_trash()

    def describe_collection(self, name: str) -> CollectionInfo:
        spec = self.collection_spec(name)
        first = self.point_ids(name)[:1]
        records = self._call(name, lambda shard: shard.retrieve(first, True, False)) if first else []
        return CollectionInfo(name=name, dense={DENSE: (spec.dense_dim, "Cosine")}, sparse={SPARSE: "idf"},
                              points=self.count(name), sample=public_payload(records[0].payload if records else None),
                              built_by_hyde_tutor=spec.describe())

    def close(self) -> None:
        with self._lock:
            held, self._held = self._held, {}
        for path in held.values():
            _release(path)

    def __enter__(self) -> EdgeStore:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # -- data -----------------------------------------------------------------
    def upsert(self, name: str, points: Sequence[PointRecord]) -> None:
        if not points:
            return
        edge_points = [qe.Point(id=p.point_id, payload=p.payload, vector={
            DENSE: [float(x) for x in p.dense], SPARSE: qe.SparseVector(list(p.sparse.indices), list(p.sparse.values))})
            for p in points]
        try:
            self._call(name, lambda shard: shard.update(qe.UpdateOperation.upsert_points(edge_points)))
        finally:
            self._written(name)

    def delete_points(self, name: str, point_ids: Sequence[str]) -> None:
        if point_ids:
            ids = list(point_ids)
            try:
                self._call(name, lambda shard: shard.update(qe.UpdateOperation.delete_points(ids)))
            finally:
                self._written(name)

    def _written(self, name: str) -> None:
        """Forget the payloads cached for ``name``'s shard (it was just written to)."""
        path = self._held.get(name)
        if path is not None:
            _payloads(path).invalidate()

    def stored_hashes(self, name: str, point_ids: Sequence[str]) -> dict[str, str]:
        if not point_ids:
            return {}
        records = self._call(name, lambda shard: shard.retrieve(list(point_ids), with_payload=True, with_vector=False))
        return {str(r.id): str((r.payload or {}).get(HASH_KEY, "")) for r in records}

    def count(self, name: str) -> int:
        return int(self._call(name, lambda shard: shard.count(qe.CountRequest(exact=True))))

    def point_ids(self, name: str) -> list[str]:
        ids: list[str] = []
        offset: Any = None
        while True:
            request = qe.ScrollRequest(limit=1000, with_payload=False, **({"offset": offset} if offset else {}))
            records, offset = self._call(name, lambda shard: shard.scroll(request))
            ids += [str(r.id) for r in records]
            if offset is None:
                return ids

    def finish_ingest(self, name: str) -> None:
        """Build the HNSW index now (not at first query) and flush to disk."""
        self._call(name, lambda shard: (shard.optimize(), shard.flush()))

    def search_batch(self, name: str, requests: Sequence[StoreQuery]) -> list[list[Hit]]:
        if not requests:
            return []
        if any(r.custom_names for r in requests):
            raise StoreUnavailableError(
                f"The embedded store holds only collections hyde-tutor built; {name!r} has a schema with other vector "
                "names. Search it where it lives: HYDE_QDRANT__URL (a server) or HYDE_QDRANT__LOCAL=true."
            )
        batch = qe.QueryBatchRequest([_edge_query(r) for r in requests])  # ids and scores only: see payloads.py
        results = self._call(name, lambda shard: shard.query_batch(batch))
        path = self._held.get(name)  # None only if the collection was deleted meanwhile: cache nothing then
        cache = _payloads(path) if path is not None else PayloadCache()
        generation = cache.generation
        known, missing = cache.lookup({p.id for points in results for p in points})
        if missing:
            records = self._call(name, lambda shard: shard.retrieve(missing, True, False))
            known.update(cache.store(((r.id, r.payload) for r in records), generation))
        # a point deleted between the query and the fetch is left out
        return [ranked([scored(known[p.id], p.score) for p in points if p.id in known]) for points in results]

    def _call(self, name: str, fn: Any) -> Any:
        shard = self._shard(name)
        try:
            return fn(shard)
        except (KeyboardInterrupt, SystemExit, GeneratorExit):
            raise
        except BaseException as exc:  # a Rust panic arrives as pyo3's PanicException, a BaseException
            if type(exc).__name__ == "PanicException":
                raise StoreUnavailableError(f"The embedded Qdrant engine crashed on {name!r}: {exc}") from exc
            if not isinstance(exc, Exception) or not _is_engine_error(exc):
                raise
            raise _translate(exc, self._dir(name)) from exc


def _write_atomically(path: Path, text: str) -> None:
    """Write ``text`` to ``path`` so a reader sees the old file or the whole new one, never half of it (a
    crash leaves at most a ``.tmp`` file, and no ``collection.json`` means no collection)."""
    tmp = path.with_name(f"{path.name}.{os.getpid()}.tmp")
    with tmp.open("w", encoding="utf-8") as fh:
        fh.write(text)
        fh.flush()
        os.fsync(fh.fileno())
    os.replace(tmp, path)


def _edge_query(req: StoreQuery) -> qe.QueryRequest:
    params = qe.SearchParams(hnsw_ef=req.hnsw_ef) if req.hnsw_ef else None
    nearest = _channel_queries(req)
    if len(nearest) == 1:
        (_, query), = nearest.items()
        return qe.QueryRequest(limit=req.limit, query=query, params=params, with_payload=False)
    if not nearest:
        raise ValueError("StoreQuery needs a dense or a non-empty sparse vector")
    prefetches = [qe.Prefetch(limit=req.prefetch_limit, query=q, params=params) for q in nearest.values()]
    if req.fusion == "dbsf":
        fusion: Any = qe.Fusion.Dbsf()
    else:
        fusion = qe.Fusion.Rrf(k=req.rrf_k, weights=[req.dense_weight, req.sparse_weight])
    return qe.QueryRequest(limit=req.limit, prefetches=prefetches, query=fusion, with_payload=False)


def _channel_queries(req: StoreQuery) -> dict[str, Any]:
    queries: dict[str, Any] = {}
    if DENSE in req.channels:
        queries[DENSE] = qe.Query.Nearest([float(x) for x in req.dense or ()], using=DENSE)
    if SPARSE in req.channels and req.sparse is not None:
        queries[SPARSE] = qe.Query.Nearest(qe.SparseVector(list(req.sparse.indices), list(req.sparse.values)), using=SPARSE)
    return queries
