"""Several worker processes serve one embedded store: each opens its own read-only copy (``EdgeReplica``), since
the engine opens a shard in one process only."""

from __future__ import annotations

import os
import socket
import subprocess
import sys
from pathlib import Path

import pytest

from hyde_tutor import Document, EdgeStore, StoreLockedError, StoreUnavailableError
from hyde_tutor.config import Settings
from hyde_tutor.retrieval.store import EdgeReplica, StoreQuery, open_store

from .test_store import _HOLD, _ingest


@pytest.fixture()
def source(tmp_path: Path, hash_embedder, bm25) -> Path:
    root = tmp_path / "edge"
    with EdgeStore(root) as store:
        _ingest(store, hash_embedder, bm25)
    return root


def _top(store, hash_embedder) -> str:
    vector = [float(x) for x in hash_embedder.embed(["-고 싶다 желание хотеть 가고 싶어요"])[0]]
    return store.search_batch("c", [StoreQuery(dense=vector, limit=1)])[0][0].doc_id


def test_two_processes_serve_one_store_through_replicas(source: Path, hash_embedder) -> None:
    """A second process opening the store itself gets StoreLockedError (tests/test_store.py); beside another
    process's replica, this one's serves, and the store itself stays free."""
    code = _HOLD.format(cls="EdgeReplica", opener=f"(__import__('pathlib').Path({str(source)!r}))")
    holder = subprocess.Popen([sys.executable, "-c", code], stdout=subprocess.PIPE, text=True)
    try:
        assert holder.stdout is not None and holder.stdout.readline().strip() == "holding"
        with EdgeReplica(source) as mine:  # ... and a replica beside the other process's replica serves
            assert mine.count("c") == 4 and _top(mine, hash_embedder) == "g1"
            assert mine.root.parent == source.parent / "replicas" and len(list(mine.root.parent.iterdir())) == 2
    finally:
        holder.kill()
        holder.wait()


def test_a_replica_refuses_writes_and_removes_its_copy(source: Path, hash_embedder, bm25) -> None:
    replica = EdgeReplica(source)
    with pytest.raises(StoreUnavailableError, match="read-only copy.*restart the server"):
        _ingest(replica, hash_embedder, bm25, docs=[Document("g9", "-아/어 보다 попробовать 먹어 봐요")])
    with pytest.raises(StoreUnavailableError, match="read-only"):
        replica.delete_collection("c")
    root = replica.root
    replica.close()
    assert not root.exists()
    with EdgeStore(source) as store:
        assert store.count("c") == 4  # the source is untouched


def test_a_dead_workers_copy_is_removed_by_the_next_replica(source: Path) -> None:
    dead = subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"], capture_output=True, text=True,
                          check=True)
    host = socket.gethostname()
    left = source.parent / "replicas" / f"{dead.stdout.strip()}@{host}@killed"
    (left / "c").mkdir(parents=True)
    alive = source.parent / "replicas" / f"{os.getppid()}@{host}@running"
    alive.mkdir()
    elsewhere = source.parent / "replicas" / f"{dead.stdout.strip()}@another-host@x"  # a data dir shared by hosts
    elsewhere.mkdir()
    with EdgeReplica(source):
        assert not left.exists() and alive.exists() and elsewhere.exists()


def test_a_replica_is_not_copied_while_another_process_holds_the_store(source: Path, hash_embedder) -> None:
    """An ingest (here: a process holding the store open) is never copied half-written: the replica waits for the
    store's lock, and past its wait says so and leaves nothing behind; once the store is free it is copied."""
    holder = subprocess.Popen([sys.executable, "-c", _HOLD.format(cls="EdgeStore", opener=f"({str(source)!r})")],
                              stdout=subprocess.PIPE, text=True)
    try:
        assert holder.stdout is not None and holder.stdout.readline().strip() == "holding"
        with pytest.raises(StoreLockedError, match="locked by another process"):
            EdgeReplica(source, lock_wait_s=0.5)
        assert not any((source.parent / "replicas").iterdir())
    finally:
        holder.kill()
        holder.wait()
    with EdgeReplica(source) as replica:
        assert _top(replica, hash_embedder) == "g1"


def test_a_replica_of_an_empty_store_says_to_ingest(tmp_path: Path) -> None:
    with pytest.raises(StoreUnavailableError, match="ingest the corpus first"):
        EdgeReplica(tmp_path / "edge")


def test_open_store_for_a_worker(isolated_env: Path, source: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("HYDE_DATA_DIR", str(source.parent))
    store = open_store(Settings(), replica=True)
    try:
        assert isinstance(store, EdgeReplica) and store.count("c") == 4
    finally:
        store.close()
    monkeypatch.setenv("HYDE_QDRANT__LOCAL", "true")
    with pytest.raises(StoreUnavailableError, match="one process only"):
        open_store(Settings(), replica=True)
