"""Smaller reliability points: a settings error shows no credentials, the embedded store survives a crash
between its steps, ``ingest --recreate`` leaves a user's ``<name>.rebuild`` alone and handles long names, and
the tool results cap retrieved text like retrieve-first does."""

from __future__ import annotations

from pathlib import Path

import pytest
from pydantic import ValidationError

from hyde_tutor import EdgeStore
from hyde_tutor.config import Settings
from hyde_tutor.corpus.ingest import IngestRequest, ingest_documents
from hyde_tutor.retrieval.store import CollectionSpec
from hyde_tutor.retrieval.store.edge import META_FILE

from .test_store import DOCS


def test_a_settings_error_never_prints_the_credentials_of_a_url(isolated_env: Path,
                                                                   monkeypatch: pytest.MonkeyPatch) -> None:
    from hyde_tutor.cli.app import settings_error_message

    monkeypatch.setenv("HYDE_LLM__BASE_URL", "http://bob:hunter2@llm.internal/v1?api_key=sk-live")
    monkeypatch.setenv("HYDE_LLM__API_KEY", "sk-refused")  # refused: the error shows the whole llm section
    with pytest.raises(ValidationError) as caught:
        Settings()
    message = settings_error_message(caught.value)
    assert "HYDE_LLM" in message and "llm.internal" in message  # still says what and where
    assert "hunter2" not in message and "sk-live" not in message and "sk-refused" not in message


def _spec(hash_embedder, bm25) -> CollectionSpec:  # type: ignore[no-untyped-def]
    return CollectionSpec(hash_embedder.name, hash_embedder.dim, bm25.name, 5.0)


def test_a_shard_left_without_its_metadata_by_a_crash_does_not_block_creation(
        tmp_path: Path, hash_embedder, bm25) -> None:  # type: ignore[no-untyped-def]
    store = EdgeStore(tmp_path)
    store.create_collection("grammar", _spec(hash_embedder, bm25))
    store.close()
    (tmp_path / "grammar" / META_FILE).unlink()  # the crash: the shard was made, collection.json never written
    store = EdgeStore(tmp_path)
    try:
        assert store.list_collections() == []
        store.create_collection("grammar", _spec(hash_embedder, bm25))  # was: "path already contains segment data"
        assert store.list_collections() == ["grammar"] and store.count("grammar") == 0
    finally:
        store.close()


def test_an_orphaned_shard_is_cleaned_by_recreate(tmp_path: Path, hash_embedder, bm25) -> None:  # type: ignore[no-untyped-def]
    store = EdgeStore(tmp_path)
    ingest_documents(DOCS, IngestRequest(collection="grammar", progress=False), store, hash_embedder, bm25)
    store.close()
    (tmp_path / "grammar" / META_FILE).unlink()
    store = EdgeStore(tmp_path)
    try:
        report = ingest_documents(DOCS, IngestRequest(collection="grammar", recreate=True, progress=False), store, hash_embedder, bm25)
        assert report.points_in_collection == len(DOCS)
    finally:
        store.close()


def test_a_delete_is_one_rename_and_a_crash_leftover_is_never_listed(tmp_path: Path, hash_embedder, bm25) -> None:  # type: ignore[no-untyped-def]
    store = EdgeStore(tmp_path)
    try:
        store.create_collection("docs", _spec(hash_embedder, bm25))
        store.create_collection("grammar", _spec(hash_embedder, bm25))
        store.close()
        store = EdgeStore(tmp_path)
        crashed = tmp_path / ".trash-docs-1-0"  # a delete that crashed after its rename, before the removal
        (tmp_path / "docs").rename(crashed)
        assert store.list_collections() == ["grammar"]
        store.delete_collection("grammar")
        assert store.list_collections() == [] and not crashed.exists()  # the next delete empties the trash
        assert [p.name for p in tmp_path.iterdir()] == []
    finally:
        store.close()


def test_recreate_leaves_a_users_rebuild_named_collection_alone(tmp_path: Path, hash_embedder, bm25) -> None:  # type: ignore[no-untyped-def]
    store = EdgeStore(tmp_path)
    try:
        ingest_documents(DOCS, IngestRequest(collection="grammar", progress=False), store, hash_embedder, bm25)
        ingest_documents(DOCS[:2], IngestRequest(collection="grammar.rebuild", progress=False), store, hash_embedder, bm25)  # the user's own
        ingest_documents(DOCS[:3], IngestRequest(collection="grammar", recreate=True, progress=False), store, hash_embedder, bm25)
        assert store.list_collections() == ["grammar", "grammar.rebuild"]
        assert store.count("grammar") == 3 and store.count("grammar.rebuild") == 2
    finally:
        store.close()


@pytest.mark.parametrize("length", [121, 128])
def test_a_long_collection_name_can_be_recreated(tmp_path: Path, hash_embedder, bm25, length: int) -> None:  # type: ignore[no-untyped-def]
    name = "g" * length
    store = EdgeStore(tmp_path)
    try:
        ingest_documents(DOCS, IngestRequest(collection=name, progress=False), store, hash_embedder, bm25)
        report = ingest_documents(DOCS[:1], IngestRequest(collection=name, recreate=True, progress=False), store, hash_embedder, bm25)
        assert report.points_in_collection == 1 and store.list_collections() == [name]
    finally:
        store.close()


def test_tool_results_cap_every_retrieved_text_field() -> None:
    from hyde_tutor.corpus.rendering import ENTRY_LINE_CHARS, compact_payload
    from hyde_tutor.retrieval.schemas import CollectionSchema

    long = "가" * 5000
    grammar = compact_payload("g1", {"kind": "grammar", "pattern": long, "name_ru": long, "level": long,
                                     "explanation_ru": long, "examples": [{"ko": long, "ru": long}] * 3})
    document = compact_payload("d1", {"kind": "doc", "topic": long, "subtopic": long, "content": long})
    passage = compact_payload("p1", {"kind": "beir", "title": long, "text": long})
    schema = CollectionSchema(name="faq", title_fields=("q",), text_fields=("a",)).compact("x", {"q": long, "a": long})

    def longest(value) -> int:  # type: ignore[no-untyped-def]
        if isinstance(value, dict):
            return max((longest(v) for v in value.values()), default=0)
        if isinstance(value, list):
            return max((longest(v) for v in value), default=0)
        return len(value) if isinstance(value, str) else 0

    for shown in (grammar, document, passage, schema):
        assert longest(shown) <= 901, shown.keys()  # the long text fields keep their 900; the rest 600
    assert len(grammar["pattern"]) == len(grammar["name"]) == ENTRY_LINE_CHARS + 1  # with its "…"
    assert len(grammar["examples"]) == 2 and len(grammar["examples"][0]["ko"]) == ENTRY_LINE_CHARS + 1
    assert len(document["topic"]) == len(passage["title"]) == len(schema["title"]) == ENTRY_LINE_CHARS + 1
