"""Payload rendering dispatches on the payload's ``kind`` (ingest writes it), one renderer per kind, with a
safe generic path for payloads of unknown shape."""

from __future__ import annotations

from hyde_tutor.corpus.documents import Document
from hyde_tutor.corpus.ingest import read_documents
from hyde_tutor.corpus.rendering import compact_payload, format_entries, payload_kind, payload_label, payload_text

from .conftest import DATA


def test_the_kind_field_decides_not_the_keys_a_payload_happens_to_have() -> None:
    """A BEIR passage whose metadata has a ``content`` field used to render as an educational document."""
    passage = {"kind": "beir", "title": "Пусан", "text": "Город на юге.", "content": "metadata"}
    assert payload_kind(passage) == "passage"
    assert payload_text(passage) == "Пусан Город на юге."
    assert compact_payload("p1", passage) == {"id": "p1", "title": "Пусан", "text": "Город на юге."}
    grammar = {"kind": "grammar", "pattern": "-고 싶다", "name_ru": "желание", "content": "x"}
    assert payload_kind(grammar) == "grammar" and payload_label(grammar, long=True) == "-고 싶다 — желание"


def test_every_bundled_document_renders_by_its_kind() -> None:
    for name, kind in (("grammar.jsonl", "grammar"), ("docs.jsonl", "document")):
        documents, errors = read_documents(DATA / name)
        assert not errors and documents
        for doc in documents:
            assert payload_kind(doc.payload) == kind, doc.id
            assert payload_text(doc.payload) and payload_label(doc.payload)


def test_a_payload_of_unknown_shape_still_reads_as_something() -> None:
    faq = {"question": "Как сказать «хочу»?", "answer": "Используйте -고 싶다.", "views": 3}
    assert payload_kind(faq) == "generic"
    assert payload_text(faq) == "Как сказать «хочу»? Используйте -고 싶다."  # was: an empty string
    assert payload_label(faq) == "Как сказать «хочу»?"
    compact = compact_payload("f1", faq)
    assert compact["id"] == "f1" and "Используйте" in compact["text"]
    assert format_entries([compact]).startswith("1. ")
    legacy = {"pattern": "-지만", "name_ru": "но"}  # written before payloads carried a kind: guessed by its fields
    assert payload_kind(legacy) == "grammar" and payload_text(Document("g", "t", legacy).payload).startswith("-지만")
