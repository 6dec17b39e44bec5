"""Ingest takes one value: ``IngestRequest`` is frozen and keyword-only, validated where it is made, and one
request drives the documents and their write-time questions alike."""

from __future__ import annotations

import dataclasses

import pytest

from hyde_tutor import HydeTutorError, IngestRequest, ingest_documents, ingest_questions

from .test_questions import _generator, _model
from .test_store import DOCS


def test_a_request_is_a_frozen_keyword_only_value_and_replace_makes_a_changed_copy() -> None:
    request = IngestRequest(collection="grammar", questions=3)
    with pytest.raises(TypeError):
        IngestRequest("grammar")  # type: ignore[misc]  # keyword-only: an option never lands in the wrong slot
    with pytest.raises(dataclasses.FrozenInstanceError):
        request.recreate = True  # type: ignore[misc]
    rebuilt = request.replace(recreate=True)
    assert rebuilt.recreate and not request.recreate and rebuilt.questions == 3


@pytest.mark.parametrize(("options", "says"), [({"batch_size": 0}, "batch_size"), ({"questions": -1}, "questions")])
def test_a_bad_option_is_refused_where_the_request_is_made(options: dict, says: str) -> None:
    with pytest.raises(HydeTutorError, match=says):
        IngestRequest(collection="grammar", **options)


def test_one_request_ingests_the_documents_then_their_questions(store, hash_embedder, bm25) -> None:
    request = IngestRequest(collection="grammar", progress=False, batch_size=2, questions=2)
    documents = ingest_documents(DOCS, request, store, hash_embedder, bm25)
    questions = ingest_questions(DOCS, request, store, hash_embedder, bm25, _generator(_model([]), None))
    assert documents.written == len(DOCS) and documents.source == "<memory>"
    assert questions.collection == "grammar__questions" and questions.documents == len(DOCS)
    with pytest.raises(HydeTutorError, match="questions=K"):  # K = 0 is "no questions": calling it is a mistake
        ingest_questions(DOCS, request.replace(questions=0), store, hash_embedder, bm25, _generator(_model([]), None))
