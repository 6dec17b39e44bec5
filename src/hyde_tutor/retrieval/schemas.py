"""Collection schemas: search collections hyde-tutor did not build.

A collection built by ``hyde-tutor ingest`` carries its own spec (vector names ``dense``/``sparse``,
which embedders made them). A collection a user built elsewhere (the reference guide's
``korean_grammar_v2``: named vectors ``text-embedding-3-small`` and ``Qdrant/bm25``, fastembed BM25
sparse vectors with the IDF modifier, its own payload fields) is described by a schema in settings::

    HYDE_SCHEMAS='{"korean_grammar_v2": {"dense_vector": "text-embedding-3-small",
                   "sparse_vector": "Qdrant/bm25", "sparse_encoder": "fastembed",
                   "title_fields": ["grammar_name_kr", "grammar_name_rus"], "text_fields": ["description"]}}'

The schema says which named vectors to query, how the query's sparse vector is made (so it matches
the stored ones), and how a payload renders as text (for the model, the reranker and the CLI).
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

import numpy as np

from ..config import SchemaSettings
from ..errors import HydeTutorError
from .sparse import SparseVec

__all__ = ["CollectionSchema", "FastembedBm25", "SchemaSettings"]


TITLE_CHARS = 600
"""A result's title as a tool shows it, at most (as retrieve-first caps each entry's line)."""


@dataclass(frozen=True, slots=True, kw_only=True)
class CollectionSchema:
    """How to search and render one collection that hyde-tutor did not build."""

    name: str
    dense_vector: str = "dense"
    sparse_vector: str | None = "sparse"
    sparse_encoder: Literal["kiwi", "fastembed"] = "kiwi"
    fastembed_language: str = "english"
    id_field: str | None = None
    title_fields: tuple[str, ...] = ()
    text_fields: tuple[str, ...] = ()

    @classmethod
    def from_settings(cls, name: str, s: SchemaSettings) -> CollectionSchema:
        return cls(name=name, dense_vector=s.dense_vector, sparse_vector=s.sparse_vector,
                   sparse_encoder=s.sparse_encoder, fastembed_language=s.fastembed_language, id_field=s.id_field,
                   title_fields=tuple(s.title_fields), text_fields=tuple(s.text_fields))

    def title(self, payload: dict[str, Any]) -> str:
        return " — ".join(str(payload[f]) for f in self.title_fields if payload.get(f))

    def text(self, payload: dict[str, Any]) -> str:
        """The payload as text: title fields, then text fields (all string fields when none are named)."""
        fields = self.text_fields or tuple(k for k, v in payload.items() if isinstance(v, str))
        body = "\n".join(str(payload[f]) for f in fields if payload.get(f) and f not in self.title_fields)
        return "\n".join(x for x in (self.title(payload), body) if x)

    def compact(self, doc_id: str, payload: dict[str, Any], max_chars: int = 900) -> dict[str, Any]:
        """What the model sees of one result."""
        text, title = self.text(payload), self.title(payload)
        title = title[:TITLE_CHARS] + ("…" if len(title) > TITLE_CHARS else "")  # a stored title may be any length
        return {"id": doc_id, "title": title or None,
                "text": text[:max_chars] + ("…" if len(text) > max_chars else "")}


class FastembedBm25:
    """Query sparse vectors exactly as fastembed's ``SparseTextEmbedding("Qdrant/bm25")`` makes them
    (murmur3 token ids, Snowball stems, every query term weighted 1; Qdrant applies the IDF).

    Offline: BM25 has no weights, so fastembed only needs a model folder (``specific_model_path``);
    hyde-tutor creates one with an empty ``config.json`` under ``HYDE_DATA_DIR/fastembed`` instead of
    a hub download. Stopwords: the hub folder's NLTK lists are not on PyPI, so queries keep every word.
    Against a collection whose documents had their stopwords removed at ingest that scores the same:
    a stopword in the query has no posting to match.
    """

    def __init__(self, language: str = "english", model_dir: Path | None = None) -> None:
        try:
            from fastembed import SparseTextEmbedding
        except ImportError as exc:  # pragma: no cover - a declared dependency
            raise HydeTutorError("The fastembed sparse encoder needs: pip install 'fastembed>=0.9,<0.10'") from exc
        folder = Path(model_dir or Path(".hyde") / "fastembed") / "Qdrant-bm25"
        folder.mkdir(parents=True, exist_ok=True)
        if not (folder / "config.json").exists():
            (folder / "config.json").write_text(json.dumps({}), encoding="utf-8")
        try:
            self._model = SparseTextEmbedding("Qdrant/bm25", specific_model_path=str(folder), language=language,
                                              stopwords=set())
        except ValueError as exc:
            raise HydeTutorError(f"fastembed BM25: {exc} (HYDE_SCHEMAS ... fastembed_language).") from exc
        self.language = language
        self.name = f"fastembed:Qdrant/bm25:{language}"

    def encode_queries(self, texts: list[str]) -> list[SparseVec]:
        return [_vec(e.indices, e.values) for e in self._model.query_embed(list(texts))]

    def encode_documents(self, texts: list[str]) -> list[SparseVec]:
        return [_vec(e.indices, e.values) for e in self._model.embed(list(texts))]


def _vec(indices: Any, values: Any) -> SparseVec:
    idx, val = np.asarray(indices), np.asarray(values)
    order = np.argsort(idx)
    return SparseVec(tuple(int(i) for i in idx[order]), tuple(float(v) for v in val[order]))
