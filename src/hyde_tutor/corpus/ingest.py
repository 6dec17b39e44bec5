"""JSONL -> collection: stable ids, skip unchanged documents, batched, with a progress bar."""

from __future__ import annotations

import dataclasses
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from tqdm import tqdm

from .documents import Document, iter_jsonl_documents
from ..retrieval.embedders import DenseEmbedder
from ..errors import CorpusFormatError, HydeTutorError
from ..retrieval.sparse import Bm25Encoder
from ..retrieval.store import CollectionSpec, PointRecord, VectorStore
from ..retrieval.store.base import DOC_ID_KEY, HASH_KEY

@dataclass(slots=True)
class IngestReport:
    """What one ingest run did."""

    collection: str
    source: str
    documents: int = 0
    written: int = 0
    unchanged: int = 0
    bad_lines: list[CorpusFormatError] = field(default_factory=list)
    seconds: float = 0.0
    points_in_collection: int = 0
    deleted: int | None = None
    """With ``sync``: points of documents no longer in the input, deleted (None: not synced)."""

    @property
    def ok(self) -> bool:
        return not self.bad_lines

    def summary(self) -> str:
        rate = self.documents / self.seconds if self.seconds > 0 else 0.0  # every document read, as the progress bar
        lines = [
            f"{self.collection}: {self.documents} documents read from {self.source}; "
            f"{self.written} written, {self.unchanged} unchanged (skipped), "
            f"{len(self.bad_lines)} bad lines; "
            + ("" if self.deleted is None else f"{self.deleted} deleted (no longer in the file); ")
            + f"{self.points_in_collection} points in collection; "
            + (f"{self.seconds:.1f} s ({rate:.0f} docs/s read)" if self.written else f"{self.seconds:.1f} s, nothing to write")
        ]
        lines += [f"  skipped {err}" for err in self.bad_lines]
        return "\n".join(lines)


def read_documents(path: Path) -> tuple[list[Document], list[CorpusFormatError]]:
    """Parse a JSONL corpus; bad lines and duplicate ids are collected, not raised."""
    if not Path(path).is_file():
        raise HydeTutorError(f"Corpus file {path} does not exist.")
    docs: dict[str, Document] = {}
    first_line: dict[str, int] = {}
    errors: list[CorpusFormatError] = []
    for parsed in iter_jsonl_documents(path):
        if parsed.error is not None:
            errors.append(parsed.error)
            continue
        doc = parsed.document
        assert doc is not None
        if doc.id in docs:
            errors.append(CorpusFormatError(parsed.line_no, f"duplicate id {doc.id!r} (first on line {first_line[doc.id]})"))
            continue
        docs[doc.id] = doc
        first_line[doc.id] = parsed.line_no
    return list(docs.values()), errors


@dataclass(frozen=True, slots=True, kw_only=True)
class IngestRequest:
    """One ingest, as one value: where the documents go and how (made once where an ingest enters: the CLI,
    a benchmark, a test) and passed whole to :func:`ingest_documents`, :func:`ingest_file` and
    :func:`~hyde_tutor.hyde.question_index.ingest_questions`. A changed copy comes from :meth:`replace`.
    """

    collection: str
    """The collection to write into (write-time questions go to ``<collection>__questions``)."""
    recreate: bool = False
    """Build the collection anew (on a store that can swap collections, beside the live one; see
    :func:`ingest_documents`). With questions: drop the questions collection first."""
    batch_size: int = 64
    """Documents (or questions) embedded and upserted per store call."""
    progress: bool = True
    """Show a progress bar on stderr."""
    source: str = "<memory>"
    """Where the documents came from, for the report and errors (:func:`ingest_file` sets the path)."""
    sync: bool = False
    """Also delete the points of documents no longer in the input (refused when the input had bad lines)."""
    on_sync: Callable[[VectorStore, str, set[str]], None] | None = None
    """Runs after a sync deleted what left, as ``on_sync(store, collection, kept_doc_ids)``: an index derived
    from the documents (write-time questions: :func:`hyde_tutor.hyde.question_index.sync_questions`) drops its
    share."""
    questions: int = 0
    """Write-time questions per document for :func:`~hyde_tutor.hyde.question_index.ingest_questions`
    (0: none)."""
    regenerate: bool = False
    """With questions: ignore the question cache and ask the LLM again."""

    def __post_init__(self) -> None:
        if self.batch_size < 1:
            raise HydeTutorError(f"IngestRequest.batch_size must be at least 1, got {self.batch_size}.")
        if self.questions < 0:
            raise HydeTutorError(f"IngestRequest.questions must be 0 (none) or more, got {self.questions}.")

    def replace(self, **changes: Any) -> IngestRequest:
        return dataclasses.replace(self, **changes)


def ingest_documents(
    documents: Sequence[Document], request: IngestRequest, store: VectorStore, dense: DenseEmbedder, sparse: Bm25Encoder
) -> IngestReport:
    """Write ``documents`` into ``request.collection``; re-running with the same input writes nothing.

    ``request.sync`` also deletes the points of documents that are no longer in ``documents`` (refused when
    the input had bad lines: a document on a bad line is not gone, it is unreadable). ``request.recreate``
    builds the collection anew; on a store that can swap collections (the embedded one) it is built beside the
    live one (:func:`rebuild_name`) and swapped in when complete, so searches meanwhile, and a rebuild that fails,
    see the old collection. A Qdrant server's collection is still dropped first.

    Args:
        documents: The parsed documents (:func:`read_documents`).
        request: The collection and the ingest options.
        store: Where the points go.
        dense: The dense embedder the collection is (or will be) built with.
        sparse: The BM25 encoder; the collection's average length is set from the first ingest.
    """
    collection, recreate, sync, on_sync = request.collection, request.recreate, request.sync, request.on_sync
    batch_size, progress, source = request.batch_size, request.progress, request.source
    started = time.perf_counter()
    report = IngestReport(collection=collection, source=source, documents=len(documents))
    live = collection
    swap = recreate and callable(getattr(store, "replace_collection", None)) and collection in store.list_collections()
    if swap:  # build beside the live collection and swap at the end: a failed rebuild leaves it as it was
        collection = rebuild_name(live)
        if collection in store.list_collections():  # left by a rebuild that failed
            store.delete_collection(collection)
    spec = _ensure_collection(collection, store, dense, sparse, documents, recreate and not swap)
    encoder = Bm25Encoder(sparse.analyzer, sparse.k1, sparse.b, spec.bm25_avg_len)
    report.written, report.unchanged = _write_changed(documents, collection, store, dense, encoder, batch_size, progress)
    if sync:
        report.deleted = _delete_departed(documents, collection, store, source)
        if on_sync is not None:
            on_sync(store, live, {d.id for d in documents})
    if report.written or report.deleted or swap:
        store.finish_ingest(collection)
    if swap:
        store.replace_collection(live, collection)  # type: ignore[attr-defined]
    report.points_in_collection = store.count(live)
    report.seconds = time.perf_counter() - started
    return report


def _write_changed(documents: Sequence[Document], collection: str, store: VectorStore, dense: DenseEmbedder,
                   encoder: Bm25Encoder, batch_size: int, progress: bool) -> tuple[int, int]:
    """Upsert the documents whose content hash the store does not hold yet: (written, unchanged)."""
    written = unchanged = 0
    with tqdm(total=len(documents), desc=f"ingest {collection}", unit="doc", disable=not progress) as bar:
        for start in range(0, len(documents), batch_size):
            batch = list(documents[start : start + batch_size])
            stored = store.stored_hashes(collection, [d.point_id for d in batch])
            todo = [d for d in batch if stored.get(d.point_id) != d.content_hash]
            unchanged += len(batch) - len(todo)
            if todo:
                store.upsert(collection, _points(todo, dense, encoder))
                written += len(todo)
            bar.update(len(batch))
    return written, unchanged


def _delete_departed(documents: Sequence[Document], collection: str, store: VectorStore, source: str) -> int:
    """Delete the points of documents that are not in ``documents`` (an empty input is refused); how many."""
    if not documents:
        raise HydeTutorError(f"--sync refused: {source} has no documents; it would empty {collection!r}. "
                             f"To drop the collection, ingest with --recreate from the right file.")
    keep = {d.point_id for d in documents}
    stale = [pid for pid in store.point_ids(collection) if pid not in keep]
    if stale:
        store.delete_points(collection, stale)
    return len(stale)


def rebuild_name(collection: str) -> str:
    """Where ``ingest --recreate`` builds the new ``collection`` before swapping it in (a store that can swap):
    ``<name>.rebuild-<8 hex of the name's hash>``, the name cut to fit 128 characters. A user's own collection
    (``<name>.rebuild`` included) is never taken for a failed rebuild's leftover and deleted."""
    import hashlib

    digest = hashlib.sha256(collection.encode("utf-8")).hexdigest()[:8]
    return f"{collection[:110].rstrip('.')}.rebuild-{digest}"


def ingest_file(
    path: Path, request: IngestRequest, store: VectorStore, dense: DenseEmbedder, sparse: Bm25Encoder
) -> IngestReport:
    """Read a JSONL file (project formats or BEIR corpus) and ingest it (``request.source`` becomes the path)."""
    documents, errors = read_documents(Path(path))
    if request.sync and errors:
        raise HydeTutorError(
            f"--sync refused: {path} has {len(errors)} bad line(s) (first: {errors[0]}); a document on a bad line "
            "would be deleted from the collection. Fix the lines, or ingest without --sync."
        )
    report = ingest_documents(documents, request.replace(source=str(path)), store, dense, sparse)
    report.bad_lines = errors
    return report


def _ensure_collection(
    collection: str, store: VectorStore, dense: DenseEmbedder, sparse: Bm25Encoder, documents: Sequence[Document], recreate: bool
) -> CollectionSpec:
    if recreate or collection not in store.list_collections():
        sample = [d.text for d in documents[:2000]]
        spec = CollectionSpec(dense.name, dense.dim, sparse.name, round(sparse.average_length(sample), 2))
        store.create_collection(collection, spec, recreate=recreate)
    spec = store.collection_spec(collection)
    spec.check_compatible(collection, dense.name, dense.dim, sparse.name)
    return spec


def _points(docs: Sequence[Document], dense: DenseEmbedder, sparse: Bm25Encoder) -> list[PointRecord]:
    texts = [d.text for d in docs]
    vectors = dense.embed(texts)
    sparse_vectors = sparse.encode_documents(texts)
    return [
        PointRecord(
            point_id=d.point_id,
            dense=vectors[i],
            sparse=sparse_vectors[i],
            payload={DOC_ID_KEY: d.id, HASH_KEY: d.content_hash, **d.payload},
        )
        for i, d in enumerate(docs)
    ]
