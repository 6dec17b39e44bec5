"""Store contract tests, run on BOTH qdrant-edge and qdrant-client local mode (see the fixture)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from hyde_tutor import (
    CollectionNotFoundError,
    Document,
    EdgeStore,
    EmbedderMismatchError,
    QdrantClientStore,
    StoreLockedError,
    StoreUnavailableError,
)
from hyde_tutor.corpus.ingest import IngestRequest, ingest_documents
from hyde_tutor.errors import EmbedderError
from hyde_tutor.retrieval.retriever import Retriever
from hyde_tutor.retrieval.store import StoreQuery

from .conftest import HashEmbedder

DOCS = [
    Document("g1", "-고 싶다 желание хотеть 가고 싶어요", {"pattern": "-고 싶다"}),
    Document("g2", "-(으)ㄹ 수 있다 возможность мочь 할 수 있어요", {"pattern": "-(으)ㄹ 수 있다"}),
    Document("g3", "-지만 противопоставление но 비싸지만 좋아요", {"pattern": "-지만"}),
    Document("d1", "Частицы 은/는 и 이/가 тема и подлежащее", {"topic": "Частицы"}),
]


def _ingest(store, embedder, bm25, docs=DOCS, **kw):
    return ingest_documents(docs, IngestRequest(collection="c", progress=False, **kw), store, embedder, bm25)


def test_ingest_is_idempotent_and_rewrites_changed_docs(store, hash_embedder, bm25) -> None:
    first = _ingest(store, hash_embedder, bm25)
    assert (first.written, first.unchanged, first.points_in_collection) == (4, 0, 4)
    calls = hash_embedder.calls
    second = _ingest(store, hash_embedder, bm25)
    assert (second.written, second.unchanged, second.points_in_collection) == (0, 4, 4)
    assert hash_embedder.calls == calls  # nothing re-embedded
    changed = [Document("g1", DOCS[0].text + " 먹고 싶어요", DOCS[0].payload), *DOCS[1:]]
    third = _ingest(store, hash_embedder, bm25, docs=changed)
    assert (third.written, third.unchanged, third.points_in_collection) == (1, 3, 4)


def test_search_modes_return_original_ids_and_payload(store, hash_embedder, bm25) -> None:
    _ingest(store, hash_embedder, bm25)
    r = Retriever(store, hash_embedder, bm25)
    for mode in ("hybrid", "dense", "sparse"):
        hits = r.search("c", "먹고 싶어요 хотеть", top_k=3, mode=mode)
        assert hits and hits[0].doc_id == "g1", mode
        assert hits[0].payload == {"pattern": "-고 싶다"}  # internal keys stripped
    rrf = r.settings.model_copy(update={"fusion": "rrf", "rrf_k": 10})
    assert r.search_many("c", ["먹고 싶어요"], 3, settings=rrf)[0][0].doc_id == "g1"


def test_batched_search_keeps_query_order(store, hash_embedder, bm25) -> None:
    _ingest(store, hash_embedder, bm25)
    r = Retriever(store, hash_embedder, bm25)
    results = r.search_many("c", ["비싸지만 но", "가고 싶어요", "Частицы тема"], top_k=1)
    assert [hits[0].doc_id for hits in results] == ["g3", "g1", "d1"]


def test_query_with_no_sparse_terms_still_searches_dense(store, hash_embedder, bm25) -> None:
    _ingest(store, hash_embedder, bm25)
    r = Retriever(store, hash_embedder, bm25)
    assert r.search("c", "!!! ???", top_k=2, mode="hybrid")  # dense only
    assert r.search("c", "!!! ???", top_k=2, mode="sparse") == []


def test_missing_collection_is_a_clear_error(store, hash_embedder, bm25) -> None:
    r = Retriever(store, hash_embedder, bm25)
    with pytest.raises(CollectionNotFoundError, match="hyde-tutor ingest --collection nope"):
        r.search("nope", "вопрос")


def test_embedder_mismatch_names_the_fix(store, hash_embedder, bm25) -> None:
    _ingest(store, hash_embedder, bm25)
    other = HashEmbedder(dim=32, name="other-model")
    with pytest.raises(EmbedderMismatchError, match="--recreate") as info:
        Retriever(store, other, bm25).search("c", "вопрос")
    assert "hash-test (64-d)" in str(info.value) and "other-model (32-d)" in str(info.value)
    with pytest.raises(EmbedderMismatchError):
        _ingest(store, other, bm25)
    rebuilt = _ingest(store, other, bm25, recreate=True)
    assert rebuilt.written == 4 and store.collection_spec("c").dense_dim == 32


def test_search_request_needs_a_vector(store, hash_embedder, bm25) -> None:
    _ingest(store, hash_embedder, bm25)
    with pytest.raises(ValueError):
        store.search_batch("c", [StoreQuery(limit=3)])


_HOLD = """
import sys, time
from hyde_tutor.retrieval.store import {cls}
store = {cls}{opener}
store.count("c")
print("holding", flush=True)
time.sleep(60)
"""


@pytest.mark.parametrize("backend", ["edge", "qdrant-client-local"])
def test_store_locked_by_another_process(tmp_path: Path, hash_embedder, bm25, backend: str) -> None:
    if backend == "edge":
        root = tmp_path / "edge"
        with EdgeStore(root) as s:
            _ingest(s, hash_embedder, bm25)
        code = _HOLD.format(cls="EdgeStore", opener=f"({str(root)!r})")
    else:
        root = tmp_path / "local"
        s = QdrantClientStore.local(str(root))
        _ingest(s, hash_embedder, bm25)
        s.close()
        code = _HOLD.format(cls="QdrantClientStore", opener=f".local({str(root)!r})")
    holder = subprocess.Popen([sys.executable, "-c", code], stdout=subprocess.PIPE, text=True)
    try:
        assert holder.stdout is not None and holder.stdout.readline().strip() == "holding"
        with pytest.raises(StoreLockedError, match="locked by another process"):
            if backend == "edge":
                EdgeStore(root).count("c")
            else:
                QdrantClientStore.local(str(root))
    finally:
        holder.kill()
        holder.wait()


def test_edge_store_shards_are_shared_within_a_process(tmp_path: Path, hash_embedder, bm25) -> None:
    a, b = EdgeStore(tmp_path / "e"), EdgeStore(tmp_path / "e")
    _ingest(a, hash_embedder, bm25)
    assert b.count("c") == 4  # second store in the same process reuses the open shard
    a.close()
    assert b.count("c") == 4
    b.close()


def test_edge_store_with_deleted_shard_folder(tmp_path: Path, hash_embedder, bm25) -> None:
    import shutil

    with EdgeStore(tmp_path / "e") as s:
        _ingest(s, hash_embedder, bm25)
    shutil.rmtree(tmp_path / "e" / "c" / "shard")
    with pytest.raises(StoreUnavailableError, match="--recreate"):
        EdgeStore(tmp_path / "e").count("c")


def test_ties_are_broken_by_doc_id(store, hash_embedder, bm25) -> None:
    twins = [Document(f"t{i}", "одинаковый текст 같은 문장", {}) for i in (3, 1, 2)]
    ingest_documents(twins, IngestRequest(collection="c", progress=False), store, hash_embedder, bm25)
    for _ in range(3):
        hits = Retriever(store, hash_embedder, bm25).search("c", "одинаковый текст", top_k=3, mode="dense")
        assert [h.doc_id for h in hits] == ["t1", "t2", "t3"]


def test_a_search_sees_payloads_written_after_an_earlier_search(store, hash_embedder, bm25) -> None:
    """The embedded store serves payloads from a cache (see ``store/payloads.py``): a write must clear it, so
    the next search shows the new payload, and a deleted point is gone (on both backends)."""
    _ingest(store, hash_embedder, bm25)
    r = Retriever(store, hash_embedder, bm25)
    assert r.search("c", "먹고 싶어요 хотеть", top_k=1)[0].payload == {"pattern": "-고 싶다"}
    changed = [Document("g1", DOCS[0].text, {"pattern": "-고 싶다", "level": "A1"}), *DOCS[1:]]
    _ingest(store, hash_embedder, bm25, docs=changed)
    assert r.search("c", "먹고 싶어요 хотеть", top_k=1)[0].payload == {"pattern": "-고 싶다", "level": "A1"}
    _ingest(store, hash_embedder, bm25, docs=DOCS[1:], sync=True)  # g1 deleted
    assert "g1" not in [h.doc_id for h in r.search("c", "먹고 싶어요 хотеть", top_k=4)]


def test_editing_a_result_payload_does_not_change_the_next_search(store, hash_embedder, bm25) -> None:
    _ingest(store, hash_embedder, bm25)
    r = Retriever(store, hash_embedder, bm25)
    first = r.search("c", "먹고 싶어요 хотеть", top_k=1)[0]
    first.payload["pattern"] = "edited by the caller"
    assert r.search("c", "먹고 싶어요 хотеть", top_k=1)[0].payload == {"pattern": "-고 싶다"}


def test_payload_cache_keeps_no_fetch_that_a_write_overtook() -> None:
    from hyde_tutor.retrieval.store.payloads import PayloadCache

    cache = PayloadCache()
    generation = cache.generation
    cache.invalidate()  # a write lands while a search is fetching old payloads
    hits = cache.store([("p1", {"doc_id": "g1", "pattern": "old"})], generation)
    assert hits["p1"].doc_id == "g1" and hits["p1"].payload == {"pattern": "old"}  # this search still gets them
    assert cache.lookup(["p1"]) == ({}, ["p1"])  # but the next one fetches again
    cache.store([("p1", {"doc_id": "g1", "pattern": "new"})], cache.generation)
    known, missing = cache.lookup(["p1", "p2"])
    assert known["p1"].payload == {"pattern": "new"} and missing == ["p2"]


def test_payload_cache_starts_over_past_its_limit() -> None:
    from hyde_tutor.retrieval.store.payloads import PayloadCache

    cache = PayloadCache(limit=3)
    cache.store([(i, {"doc_id": f"d{i}"}) for i in range(3)], cache.generation)
    cache.store([(9, {"doc_id": "d9"})], cache.generation)
    assert len(cache) == 1 and cache.lookup([9])[1] == []


def test_recreate_builds_beside_the_live_collection_and_a_failed_rebuild_leaves_it(tmp_path: Path, hash_embedder,
                                                                                     bm25) -> None:
    """Embedded store: ``--recreate`` used to delete the live collection first, so a rebuild that failed
    halfway left a half-built collection (and searches meanwhile found nothing)."""
    store = EdgeStore(tmp_path)
    _ingest(store, hash_embedder, bm25)
    r = Retriever(store, hash_embedder, bm25)
    assert r.search("c", "먹고 싶어요 хотеть", top_k=1)[0].doc_id == "g1"

    class Failing(HashEmbedder):
        def embed(self, texts):
            raise EmbedderError("the embedding server went away")

    new = [Document(f"n{i}", f"новый документ {i} 새로운", {"pattern": f"n{i}"}) for i in range(5)]
    with pytest.raises(Exception, match="went away"):
        ingest_documents(new, IngestRequest(collection="c", recreate=True, progress=False), store,
                         Failing(dim=hash_embedder.dim, name=hash_embedder.name), bm25)
    assert store.count("c") == 4 and r.search("c", "먹고 싶어요 хотеть", top_k=1)[0].doc_id == "g1"
    report = ingest_documents(new, IngestRequest(collection="c", recreate=True, progress=False), store, hash_embedder,
                              bm25)
    assert report.points_in_collection == 5 and report.collection == "c"
    assert {h.doc_id for h in r.search("c", "новый документ", top_k=10)} == {f"n{i}" for i in range(5)}
    assert store.list_collections() == ["c"]  # no staging or retired folder left
    store.close()
    reopened = EdgeStore(tmp_path)  # and it is on disk, not only in this process
    assert reopened.count("c") == 5
    reopened.close()
