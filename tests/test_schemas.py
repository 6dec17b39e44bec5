"""Collections hyde-tutor did not build: schemas, fastembed BM25 queries, the README block."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from hyde_tutor.schemas import CollectionSchema, FastembedBm25

from .conftest import ROOT


def _readme_block() -> str:
    section = (ROOT / "README.md").read_text(encoding="utf-8").split("## Use your existing Qdrant collections", 1)[1]
    return re.search(r"```python\n(.*?)```", section, re.S).group(1)  # type: ignore[union-attr]


def test_readme_existing_collection_block_runs_verbatim(isolated_env: Path, monkeypatch: pytest.MonkeyPatch, capsys) -> None:
    monkeypatch.delenv("HYDE_DATA_DIR")  # the block writes to .hyde/qdrant-local, the default data dir
    exec(compile(_readme_block(), "README.md", "exec"), {})
    out = capsys.readouterr().out.strip().splitlines()
    assert out[0] == "0: -(으)ㄹ 뻔하다 — чуть не"  # the point id (no id field) and the schema's title fields
    assert len(out) == 2


def test_fastembed_queries_match_fastembed_documents_offline(tmp_path: Path) -> None:
    enc = FastembedBm25("russian", tmp_path)
    (doc,) = enc.encode_documents(["Частица тоже: 저도 학생이에요."])
    (query,) = enc.encode_queries(["что значит частица тоже"])
    shared = set(doc.indices) & set(query.indices)
    assert shared and all(v == 1.0 for v in query.values)  # Qdrant applies the IDF; query terms weigh 1
    assert enc.name == "fastembed:Qdrant/bm25:russian" and (tmp_path / "Qdrant-bm25" / "config.json").is_file()


def test_schema_renders_payloads() -> None:
    schema = CollectionSchema(name="c", title_fields=("kr", "ru"), text_fields=("description",))
    payload = {"kr": "-고 싶다", "ru": "хотеть", "description": "Желание говорящего.", "level": 1}
    assert schema.title(payload) == "-고 싶다 — хотеть"
    assert schema.text(payload) == "-고 싶다 — хотеть\nЖелание говорящего."
    assert schema.compact("7", payload) == {"id": "7", "title": "-고 싶다 — хотеть", "text": "-고 싶다 — хотеть\nЖелание говорящего."}


def test_a_schema_collection_on_the_embedded_store_is_a_clear_error(isolated_env: Path) -> None:
    from hyde_tutor import EdgeStore
    from hyde_tutor.errors import StoreUnavailableError
    from hyde_tutor.store import SearchRequest

    store = EdgeStore(isolated_env / "edge")
    with pytest.raises(StoreUnavailableError, match="HYDE_QDRANT__URL"):
        store.search_batch("x", [SearchRequest(limit=1, dense=[0.1], dense_name="text-embedding-3-small")])
