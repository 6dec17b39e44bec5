"""Several worker processes on one embedded store: :class:`EdgeReplica`, each worker's own read-only copy."""

from __future__ import annotations

import os
import shutil
import socket
import tempfile
import time
from pathlib import Path

from ...config import IndexSettings
from ...errors import StoreLockedError, StoreUnavailableError
from .edge import TRASH_PREFIX, EdgeStore

__all__ = ("REPLICAS_DIR", "EdgeReplica")

REPLICAS_DIR = "replicas"
"""Folder beside the store's root that holds the workers' replicas (``<pid>@<host>@<random>`` each)."""
LOCK_WAIT_S = 120.0
"""How long a new replica waits for the store while another process holds it (another worker copying it, an
ingest) before it gives up with :class:`~hyde_tutor.errors.StoreLockedError`."""


class EdgeReplica(EdgeStore):
    """A worker process's own read-only copy of an embedded store, so that several uvicorn workers serve from
    one machine without a Qdrant server (the engine opens a shard in one process only).

    The copy of ``source`` is made when the replica is built (a few MB for the bundled corpus; the time and disk
    of one copy per worker for a large one) under ``<source>/../replicas/``, and removed by :meth:`close`; copies
    whose process is gone (a killed worker on this host) are removed by the next replica built there. The copy is
    made while holding the store's own lock, so it is never taken in the middle of an ingest: a replica waits up to
    ``lock_wait_s`` for another process to let go of the store (another worker copying it, an ingest), then raises
    :class:`~hyde_tutor.errors.StoreLockedError`. A replica sees the collections as they were when its worker
    started: ingest into the store itself and restart the server. Writes are refused
    (:class:`~hyde_tutor.errors.StoreUnavailableError`): they would reach one worker's copy and be lost with it.
    """

    def __init__(self, source: Path, index: IndexSettings | None = None, *, lock_wait_s: float = LOCK_WAIT_S) -> None:
        source = Path(source)
        if not EdgeStore(source).list_collections():
            raise StoreUnavailableError(f"The embedded store at {source} has no collections to serve: ingest the "
                                        "corpus first (`hyde-tutor corpus ingest`, or `make demo`).")
        parent = source.parent / REPLICAS_DIR
        parent.mkdir(parents=True, exist_ok=True)
        _remove_dead_replicas(parent)
        root = Path(tempfile.mkdtemp(prefix=f"{os.getpid()}@{socket.gethostname()}@", dir=parent))
        try:
            _copy_locked(source, root, lock_wait_s)
        except BaseException:
            shutil.rmtree(root, ignore_errors=True)
            raise
        super().__init__(root, index)
        self.source = source

    def close(self) -> None:
        super().close()
        shutil.rmtree(self.root, ignore_errors=True)

    def _read_only(self, *_args: object, **_kwargs: object) -> None:
        raise StoreUnavailableError(f"This worker serves a read-only copy of {self.source}: ingest into the store "
                                    "itself (hyde-tutor corpus ingest) and restart the server.")

    create_collection = delete_collection = replace_collection = upsert = delete_points = finish_ingest = _read_only  # type: ignore[assignment]


def _copy_locked(source: Path, root: Path, lock_wait_s: float) -> None:
    """Copy ``source`` into ``root`` while holding every collection's shard open (the engine's lock)."""
    deadline = time.monotonic() + lock_wait_s
    while True:
        held = EdgeStore(source)
        try:
            for name in held.list_collections():
                held.count(name)  # opens the shard: the engine's lock, or StoreLockedError
            shutil.copytree(source, root, dirs_exist_ok=True,
                            ignore=lambda _dir, names: [n for n in names if n.startswith(TRASH_PREFIX)])
            return
        except StoreLockedError:
            if time.monotonic() >= deadline:
                raise
        except OSError as exc:
            raise StoreUnavailableError(f"Could not copy the embedded store at {source} for a worker: {exc}") from exc
        finally:
            held.close()
        time.sleep(0.2)


def _remove_dead_replicas(parent: Path) -> None:
    """Remove the replicas of this host's processes that are gone (another host's are left to it)."""
    for folder in parent.iterdir():
        pid, _, rest = folder.name.partition("@")
        host = rest.rpartition("@")[0]
        if pid.isdigit() and host == socket.gethostname() and not _alive(int(pid)):
            shutil.rmtree(folder, ignore_errors=True)


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:  # another user's process
        return True
    return True
