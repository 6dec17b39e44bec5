"""Collections hyde-tutor did not build: schemas, fastembed BM25 queries, the docs page's block."""

from __future__ import annotations

from pathlib import Path

import pytest

from hyde_tutor.retrieval.schemas import CollectionSchema, FastembedBm25

from .examples import example, run


def test_readme_existing_collection_block_runs_verbatim(isolated_env: Path, monkeypatch: pytest.MonkeyPatch, capsys) -> None:
    monkeypatch.delenv("HYDE_DATA_DIR")  # the block writes to .hyde/qdrant-local, the default data dir
    run(example("existing-collection"))
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
    from hyde_tutor.retrieval.store import StoreQuery

    store = EdgeStore(isolated_env / "edge")
    with pytest.raises(StoreUnavailableError, match="HYDE_QDRANT__URL"):
        store.search_batch("x", [StoreQuery(limit=1, dense=[0.1], dense_name="text-embedding-3-small")])


def test_inspect_our_collection_and_a_guide_shaped_one(isolated_env: Path, monkeypatch: pytest.MonkeyPatch, small_corpus: Path) -> None:
    from qdrant_client import QdrantClient, models
    from typer.testing import CliRunner

    from hyde_tutor.cli import app

    runner = CliRunner()
    assert runner.invoke(app, ["ingest", "--collection", "grammar", "--file", str(small_corpus)]).exit_code == 0
    ours = runner.invoke(app, ["inspect", "--collection", "grammar"])
    assert ours.exit_code == 0, ours.output
    assert "6 points" in ours.output and "dense vector 'dense': 512-d" in ours.output and "modifier idf" in ours.output
    assert "built by hyde-tutor with use-multilingual-v3 (512-d)" in ours.output and "searchable as configured" in ours.output
    assert '"pattern"' in ours.output  # a sample payload

    monkeypatch.setenv("HYDE_QDRANT__LOCAL", "true")
    client = QdrantClient(path=str(isolated_env / "data-dir" / "qdrant-local"))
    client.create_collection("korean_grammar_v2",
                             vectors_config={"text-embedding-3-small": models.VectorParams(size=512, distance=models.Distance.COSINE)},
                             sparse_vectors_config={"bm25": models.SparseVectorParams(modifier=models.Modifier.IDF)})
    client.upsert("korean_grammar_v2", [models.PointStruct(id=1, vector={"text-embedding-3-small": [0.1] * 512}, payload={
        "grammar_name_kr": "-고 싶다", "grammar_name_rus": "хотеть", "description": "Желание говорящего, длинное описание."})])
    client.close()
    guide = runner.invoke(app, ["inspect", "--collection", "korean_grammar_v2"])
    assert guide.exit_code == 1 and "NOT searchable as configured" in guide.output
    assert "dense vector 'text-embedding-3-small': 512-d, Cosine" in guide.output and "sparse vector 'bm25': modifier idf" in guide.output
    suggested = guide.output.split("HYDE_SCHEMAS='", 1)[1].split("'\n", 1)[0]
    monkeypatch.setenv("HYDE_SCHEMAS", suggested)  # the exact settings it printed make it searchable
    fixed = runner.invoke(app, ["inspect", "--collection", "korean_grammar_v2"])
    assert fixed.exit_code == 0, fixed.output
    assert "searchable as configured" in fixed.output and "fastembed:Qdrant/bm25" in fixed.output
