"""Corpus records -> documents with stable ids.

Three JSONL shapes are accepted, detected per line:

* grammar entries: ``id, pattern, name_ru, level, explanation_ru, examples[{ko, ru}]``
* educational documents: ``id, topic, subtopic, content``
* BEIR ``corpus.jsonl``: ``_id, title, text``
"""

from __future__ import annotations

import hashlib
import json
import uuid
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ..errors import CorpusFormatError

# Fixed namespace: point ids stay the same across machines and runs.
POINT_ID_NAMESPACE = uuid.UUID("6f1c2b7e-3c1d-4f5e-9a2b-7d1e0c4b8a90")
MAX_LINE_BYTES = 1_000_000


@dataclass(frozen=True, slots=True)
class Document:
    """One retrievable unit: its original id, the text to embed, and the payload to return."""

    id: str
    text: str
    payload: dict[str, Any] = field(default_factory=dict)

    @property
    def point_id(self) -> str:
        return point_id_for(self.id)

    @property
    def content_hash(self) -> str:
        """Hash of text + payload: unchanged documents are skipped on re-ingest."""
        blob = json.dumps([self.text, self.payload], ensure_ascii=False, sort_keys=True)
        return hashlib.sha256(blob.encode("utf-8")).hexdigest()[:16]


def point_id_for(doc_id: str) -> str:
    """Stable Qdrant point id (UUID5) derived from the original document id."""
    return str(uuid.uuid5(POINT_ID_NAMESPACE, doc_id))


def _require(record: dict[str, Any], keys: tuple[str, ...], kind: str) -> None:
    missing = [k for k in keys if record.get(k) in (None, "")]
    if missing:
        raise ValueError(f"{kind} record lacks {', '.join(missing)}")


def grammar_text(record: dict[str, Any]) -> str:
    examples = "\n".join(f"{ex.get('ko', '')} — {ex.get('ru', '')}" for ex in record.get("examples", []))
    return f"{record['pattern']} — {record['name_ru']}\n{record['explanation_ru']}\n{examples}".strip()


def record_to_document(record: Any) -> Document:
    """Convert one parsed JSON record to a :class:`Document` (raises ``ValueError``)."""
    if not isinstance(record, dict):
        raise ValueError(f"expected a JSON object, got {type(record).__name__}")
    if "pattern" in record:
        _require(record, ("id", "pattern", "name_ru", "explanation_ru"), "grammar")
        examples = record.get("examples", [])
        if not isinstance(examples, list) or not all(isinstance(e, dict) for e in examples):
            raise ValueError("grammar 'examples' must be a list of {ko, ru} objects")
        payload = {k: record[k] for k in ("pattern", "name_ru", "level", "explanation_ru", "examples", "tags") if k in record}
        return Document(str(record["id"]), grammar_text(record), {"kind": "grammar", **payload})
    if "content" in record:
        _require(record, ("id", "topic", "content"), "document")
        text = f"{record['topic']}: {record.get('subtopic', '')}\n{record['content']}"
        payload = {k: record[k] for k in ("topic", "subtopic", "content") if k in record}
        return Document(str(record["id"]), text, {"kind": "doc", **payload})
    if "_id" in record:
        _require(record, ("_id",), "BEIR")
        title, body = str(record.get("title") or ""), str(record.get("text") or "")
        if not (title or body):
            raise ValueError("BEIR record has neither title nor text")
        return Document(str(record["_id"]), f"{title}\n{body}".strip(), {"kind": "beir", "title": title, "text": body})
    raise ValueError("unknown record shape: need 'pattern' (grammar), 'content' (doc) or '_id' (BEIR)")


@dataclass(frozen=True, slots=True)
class ParsedLine:
    """A document, or the error that stopped its line from becoming one."""

    line_no: int
    document: Document | None = None
    error: CorpusFormatError | None = None


def iter_jsonl_documents(path: Path) -> Iterator[ParsedLine]:
    """Yield one :class:`ParsedLine` per non-blank line; bad lines carry an error, never raise."""
    with Path(path).open("rb") as fh:
        for line_no, raw in enumerate(fh, start=1):
            if not raw.strip():
                continue
            yield _parse_line(line_no, raw)


def _parse_line(line_no: int, raw: bytes) -> ParsedLine:
    if len(raw) > MAX_LINE_BYTES:
        return ParsedLine(line_no, error=CorpusFormatError(line_no, f"line is {len(raw)} bytes (limit {MAX_LINE_BYTES})"))
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError as exc:
        return ParsedLine(line_no, error=CorpusFormatError(line_no, f"not UTF-8 ({exc.reason} at byte {exc.start})"))
    try:
        record = json.loads(text)
    except json.JSONDecodeError as exc:
        return ParsedLine(line_no, error=CorpusFormatError(line_no, f"invalid JSON ({exc.msg})"))
    try:
        return ParsedLine(line_no, document=record_to_document(record))
    except (ValueError, KeyError, TypeError) as exc:
        return ParsedLine(line_no, error=CorpusFormatError(line_no, str(exc)))


def to_beir_record(doc: Document) -> dict[str, str]:
    """BEIR corpus record whose ``title + "\\n" + text`` is exactly ``doc.text``."""
    title, _, body = doc.text.partition("\n")
    return {"_id": doc.id, "title": title, "text": body}


