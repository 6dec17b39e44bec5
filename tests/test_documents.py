import json
from pathlib import Path

from hyde_tutor.corpus.documents import iter_jsonl_documents, point_id_for, record_to_document, to_beir_record
from hyde_tutor.corpus.ingest import read_documents

GRAMMAR = {
    "id": "g-x", "pattern": "-고 싶다", "name_ru": "желание", "level": "TOPIK 1",
    "explanation_ru": "Хочу.", "examples": [{"ko": "가고 싶어요.", "ru": "Хочу пойти."}],
}


def test_three_formats_are_detected() -> None:
    assert record_to_document(GRAMMAR).payload["kind"] == "grammar"
    doc = record_to_document({"id": "d1", "topic": "Частицы", "subtopic": "은/는", "content": "Текст"})
    assert doc.payload["kind"] == "doc" and "Частицы" in doc.text
    beir = record_to_document({"_id": "b1", "title": "T", "text": "body"})
    assert (beir.id, beir.text) == ("b1", "T\nbody")


def test_point_ids_are_stable_uuids_from_doc_ids() -> None:
    assert point_id_for("g-x") == point_id_for("g-x")
    assert point_id_for("g-x") != point_id_for("g-y")
    assert record_to_document(GRAMMAR).point_id == point_id_for("g-x")


def test_beir_export_round_trips_the_embedded_text() -> None:
    doc = record_to_document(GRAMMAR)
    again = record_to_document(to_beir_record(doc))
    assert again.text == doc.text and again.id == doc.id


def test_bad_lines_are_reported_with_line_numbers(tmp_path: Path) -> None:
    path = tmp_path / "bad.jsonl"
    lines = [
        json.dumps(GRAMMAR, ensure_ascii=False).encode(),
        b"{not json",
        json.dumps({"id": "x", "pattern": "-고"}).encode(),  # missing fields
        b"\xff\xfe broken utf8",
        b"",
        json.dumps([1, 2]).encode(),
        json.dumps({"id": "d9", "topic": "t", "content": "c" * 2_000_000}).encode(),  # oversized
        json.dumps(GRAMMAR, ensure_ascii=False).encode(),  # duplicate id
    ]
    path.write_bytes(b"\n".join(lines) + b"\n")
    docs, errors = read_documents(path)
    assert [d.id for d in docs] == ["g-x"]
    by_line = {e.line_no: e.reason for e in errors}
    assert set(by_line) == {2, 3, 4, 6, 7, 8}
    assert "invalid JSON" in by_line[2]
    assert "name_ru" in by_line[3]
    assert "UTF-8" in by_line[4]
    assert "JSON object" in by_line[6]
    assert "limit" in by_line[7]
    assert "duplicate" in by_line[8] and "line 1" in by_line[8]


def test_iter_never_raises_on_garbage(tmp_path: Path) -> None:
    path = tmp_path / "g.jsonl"
    path.write_bytes(b"\x00\x01\n{}\n[]\n")
    parsed = list(iter_jsonl_documents(path))
    assert len(parsed) == 3 and all(p.error is not None for p in parsed)
