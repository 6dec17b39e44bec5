"""Several worker processes on one embedded store: :class:`EdgeReplica`, each worker's own read-only copy."""

from __future__ import annotations

import os
import shutil
import tempfile
from pathlib import Path

from ...config import IndexSettings
from ...errors import StoreUnavailableError
from .edge import TRASH_PREFIX, EdgeStore

__all__ = ("REPLICAS_DIR", "EdgeReplica")

REPLICAS_DIR = "replicas"
"""Folder beside the store's root that holds the workers' replicas (``<pid>-<random>`` each)."""


class EdgeReplica(EdgeStore):
    """A worker process's own read-only copy of an embedded store, so that several uvicorn workers serve from
    one machine without a Qdrant server (the engine opens a shard in one process only).

    The copy of ``source`` is made when the replica is built (a few MB for the bundled corpus; the time and disk
    of one copy per worker for a large one) under ``<source>/../replicas/``, and removed by :meth:`close`; copies
    whose process is gone (a killed worker) are removed by the next replica built there. A replica sees the
    collections as they were when its worker started: ingest into the store itself and restart the server.
    Writes are refused (:class:`~hyde_tutor.errors.StoreUnavailableError`): they would reach one worker's copy
    and be lost with it.
    """

    def __init__(self, source: Path, index: IndexSettings | None = None) -> None:
        source = Path(source)
        if not EdgeStore(source).list_collections():
            raise StoreUnavailableError(f"The embedded store at {source} has no collections to serve: ingest the "
                                        "corpus first (`hyde-tutor corpus ingest`, or `make demo`).")
        parent = source.parent / REPLICAS_DIR
        parent.mkdir(parents=True, exist_ok=True)
        _remove_dead_replicas(parent)
        root = Path(tempfile.mkdtemp(prefix=f"{os.getpid()}-", dir=parent))
        try:
            shutil.copytree(source, root, dirs_exist_ok=True,
                            ignore=lambda _dir, names: [n for n in names if n.startswith(TRASH_PREFIX)])
        except OSError as exc:
            shutil.rmtree(root, ignore_errors=True)
            raise StoreUnavailableError(f"Could not copy the embedded store at {source} for a worker: {exc}") from exc
        super().__init__(root, index)
        self.source = source

    def close(self) -> None:
        super().close()
        shutil.rmtree(self.root, ignore_errors=True)

    def _read_only(self, *_args: object, **_kwargs: object) -> None:
        raise StoreUnavailableError(f"This worker serves a read-only copy of {self.source}: ingest into the store "
                                    "itself (hyde-tutor corpus ingest) and restart the server.")

    create_collection = delete_collection = replace_collection = upsert = delete_points = finish_ingest = _read_only  # type: ignore[assignment]


def _remove_dead_replicas(parent: Path) -> None:
    for folder in parent.iterdir():
        pid = folder.name.partition("-")[0]
        if pid.isdigit() and not _alive(int(pid)):
            shutil.rmtree(folder, ignore_errors=True)


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:  # another user's process
        return True
    return True
