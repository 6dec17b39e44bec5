"""Write-time HyDE at ingest: K learner questions per document, one point each in ``<collection>__questions``."""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import Any

from ..corpus.documents import Document, point_id_for
from ..corpus.ingest import IngestRequest
from ..errors import CollectionNotFoundError, HydeTutorError
from ..retrieval.embedders import DenseEmbedder
from ..retrieval.retriever import Retriever
from .questions import MAX_QUESTIONS, QuestionGenerator
from ..retrieval.sparse import Bm25Encoder
from ..retrieval.store import CollectionSpec, PointRecord, VectorStore, questions_collection
from ..retrieval.store.base import DOC_ID_KEY, HASH_KEY

_log = logging.getLogger("hyde_tutor")
QUESTIONS_RECHECK_S = 30.0
"""How long a missing questions collection is believed missing before the store is asked again."""


def question_point_id(doc_id: str, index: int) -> str:
    """Point id of a document's ``index``-th write-time question (in ``<collection>__questions``)."""
    return point_id_for(f"{doc_id}#question-{index}")


def sync_questions(store: VectorStore, collection: str, keep_ids: set[str]) -> None:
    """Drop the write-time question points whose parent document left ``collection`` (``ingest --sync``
    passes this as :class:`~hyde_tutor.corpus.ingest.IngestRequest`'s ``on_sync``)."""
    target = questions_collection(collection)
    if target not in store.list_collections():
        return
    kept = {question_point_id(doc_id, i) for doc_id in keep_ids for i in range(MAX_QUESTIONS)}
    stale = [pid for pid in store.point_ids(target) if pid not in kept]
    if stale:
        store.delete_points(target, stale)
        store.finish_ingest(target)


class QuestionsProbe:
    """Whether ``ingest --questions`` built a collection's companion, asked of the store without blocking the
    event loop. Found once, it is remembered by the retriever's ``check_collection`` until a search over it
    fails (:meth:`lost`); a missing or unreadable one is remembered for ``QUESTIONS_RECHECK_S`` (the hot path
    does not list collections on every search). It never raises."""

    def __init__(self, retriever: Retriever) -> None:
        self.retriever = retriever
        self._missing_since: dict[str, float] = {}

    async def has_questions(self, collection: str) -> bool:
        name = questions_collection(collection)
        if self.retriever.is_checked(name):
            return True
        missing_since = self._missing_since.get(name)
        if missing_since is not None and time.monotonic() - missing_since < QUESTIONS_RECHECK_S:
            return False
        try:
            await asyncio.to_thread(self.retriever.check_collection, name)
        except HydeTutorError as exc:  # missing, unreadable, built with another embedder: no questions channel
            if not isinstance(exc, CollectionNotFoundError):
                _log.warning("hyde-tutor: questions collection %s unusable: %s", name, exc)
            self._missing_since[name] = time.monotonic()
            return False
        self._missing_since.pop(name, None)
        return True

    def lost(self, collection: str) -> None:
        """The questions collection failed during a search (deleted after first use, being rebuilt): forget
        that it was found, and believe it missing for ``QUESTIONS_RECHECK_S``."""
        name = questions_collection(collection)
        self.retriever.forget(name)
        self._missing_since[name] = time.monotonic()


@dataclass(slots=True)
class QuestionIngestReport:
    """What ``ingest --questions K`` did on top of the document ingest."""

    collection: str
    documents: int = 0
    unchanged: int = 0
    generated: int = 0
    from_cache: int = 0
    failed: dict[str, str] = field(default_factory=dict)  # doc id -> reason
    points_written: int = 0
    points_in_collection: int = 0
    generate_seconds: float = 0.0
    seconds: float = 0.0

    def summary(self) -> str:
        lines = [
            f"{self.collection}: questions for {self.documents} documents: {self.unchanged} unchanged, "
            f"{self.generated} generated, {self.from_cache} from cache, {len(self.failed)} failed; "
            f"{self.points_written} question points written, {self.points_in_collection} in collection; "
            f"{self.seconds:.1f} s (generation {self.generate_seconds:.1f} s)"
        ]
        lines += [f"  no questions for {doc_id}: {reason} (document itself was ingested)" for doc_id, reason in self.failed.items()]
        return "\n".join(lines)


def ingest_questions(
    documents: Sequence[Document], request: IngestRequest, store: VectorStore, dense: DenseEmbedder,
    sparse: Bm25Encoder, generator: QuestionGenerator,
) -> QuestionIngestReport:
    """Write ``request.questions`` learner questions per document into ``<collection>__questions`` (one point
    per question).

    Each question point carries its parent's ``doc_id`` and payload, so a search over questions
    returns the parent document; the questions channel keeps the best question per document.
    A document is regenerated only if its content, the model, the prompt or K changed (or
    ``request.regenerate``); ``request.recreate`` drops the questions collection first.

    Args:
        documents: The parsed documents (the same ones :func:`~hyde_tutor.corpus.ingest.ingest_documents` wrote).
        request: The collection and options; ``request.questions`` is K (at least 1).
        store: Where the question points go.
        dense: The dense embedder of the parent collection.
        sparse: The BM25 encoder of the parent collection.
        generator: Writes the questions (an LLM, cached by model, prompt versions, document hash and K).
    """
    if request.questions < 1:
        raise HydeTutorError("ingest_questions needs IngestRequest(questions=K) with K of at least 1 "
                             f"(got {request.questions}); K = 0 means no questions: do not call it.")
    collection, k, regenerate, recreate = request.collection, request.questions, request.regenerate, request.recreate
    progress, batch_size = request.progress, request.batch_size
    started = time.perf_counter()
    target = questions_collection(collection)
    report = QuestionIngestReport(target, documents=len(documents))
    stamps = {d.id: generator.key(d, k)[:16] for d in documents}
    exists = target in store.list_collections()
    if recreate and exists:
        store.delete_collection(target)
        exists = False
    stored = store.stored_hashes(target, [question_point_id(d.id, 0) for d in documents]) if exists else {}
    todo = [d for d in documents if regenerate or stored.get(question_point_id(d.id, 0)) != stamps[d.id]]
    report.unchanged = len(documents) - len(todo)
    run = _run_sync(generator.generate(todo, k, regenerate=regenerate, progress=progress))
    report.generate_seconds = run.seconds
    report.generated, report.from_cache = run.generated, run.cached
    report.failed = {r.doc_id: r.failure or "" for r in run.failed}
    ready = [(d, run.results[d.id].questions) for d in todo if run.results[d.id].questions]
    if todo:  # `ready` is the part of `todo` that got questions
        report.points_written = _write_questions(target, store, dense, sparse, todo, ready, stamps, batch_size)
    report.points_in_collection = store.count(target) if exists or todo else 0
    report.seconds = time.perf_counter() - started
    return report


def _write_questions(target: str, store: VectorStore, dense: DenseEmbedder, sparse: Bm25Encoder,
                     todo: Sequence[Document], ready: Sequence[tuple[Document, list[str]]], stamps: dict[str, str],
                     batch_size: int) -> int:
    """Replace the question points of the ``todo`` documents with the ``ready`` ones' new questions; returns
    how many points were written."""
    spec = _ensure_questions_collection(target, store, dense, sparse, [q for _, qs in ready for q in qs])
    encoder = Bm25Encoder(sparse.analyzer, sparse.k1, sparse.b, spec.bm25_avg_len)
    # Old questions of changed or failed documents go first: a stale question must never match.
    store.delete_points(target, [question_point_id(d.id, i) for d in todo for i in range(MAX_QUESTIONS)])
    points = [
        (question_point_id(d.id, i), q, {DOC_ID_KEY: d.id, HASH_KEY: stamps[d.id] if i == 0 else "",
                                          **d.payload, "question": q})
        for d, qs in ready for i, q in enumerate(qs)
    ]
    # The stamp (on each document's first question) says "this document's questions are current": write
    # the stamped points LAST, so a crash part-way leaves unstamped documents, regenerated next run,
    # never a stamped document with questions missing.
    points.sort(key=lambda p: bool(p[2][HASH_KEY]))
    for start in range(0, len(points), batch_size):
        batch = points[start : start + batch_size]
        texts = [q for _, q, _ in batch]
        vectors, sparse_vectors = dense.embed(texts), encoder.encode_documents(texts)
        store.upsert(target, [PointRecord(pid, vectors[i], sparse_vectors[i], payload)
                              for i, (pid, _, payload) in enumerate(batch)])
    if points:
        store.finish_ingest(target)
    return len(points)


def _run_sync(coro: Any) -> Any:
    """``asyncio.run`` that also works under a running loop (a notebook): then it runs in a worker thread."""
    try:
        asyncio.get_running_loop()
    except RuntimeError:
        return asyncio.run(coro)
    with ThreadPoolExecutor(1) as pool:
        return pool.submit(asyncio.run, coro).result()


def _ensure_questions_collection(
    target: str, store: VectorStore, dense: DenseEmbedder, sparse: Bm25Encoder, sample: Sequence[str]
) -> CollectionSpec:
    if target not in store.list_collections():
        avg = round(sparse.average_length(list(sample)[:2000]), 2) if sample else 12.0
        store.create_collection(target, CollectionSpec(dense.name, dense.dim, sparse.name, avg))
    spec = store.collection_spec(target)
    spec.check_compatible(target, dense.name, dense.dim, sparse.name)
    return spec
