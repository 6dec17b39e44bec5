"""Store errors: only what is recognised is translated; bugs stay bugs. Settings errors are one clear line."""

from __future__ import annotations

from pathlib import Path

import pytest
from typer.testing import CliRunner

from hyde_tutor import EdgeStore, QdrantClientStore, StoreLockedError, StoreUnavailableError
from hyde_tutor.cli import app
from hyde_tutor.retrieval.store.edge import _translate

from .test_store import DOCS


def test_only_a_lock_message_means_locked() -> None:
    path = Path("/data/edge/grammar")
    assert isinstance(_translate(Exception("Resource temporarily unavailable (os error 11): WouldBlock"), path),
                      StoreLockedError)
    assert isinstance(_translate(Exception("the lock file is held by another process"), path), StoreLockedError)
    blocked = _translate(Exception("segment write blocked: disk full"), path)
    assert type(blocked) is StoreUnavailableError and "disk full" in str(blocked)  # "blocked" is not a lock


def test_a_bug_inside_a_store_call_is_not_reported_as_an_outage(tmp_path: Path, hash_embedder, bm25) -> None:
    from hyde_tutor.corpus.ingest import IngestRequest, ingest_documents

    store = EdgeStore(tmp_path / "edge")
    ingest_documents(DOCS, IngestRequest(collection="grammar", progress=False), store, hash_embedder, bm25)

    def buggy(shard):
        return shard.no_such_method()

    with pytest.raises(AttributeError):
        store._call("grammar", buggy)
    with pytest.raises(StoreUnavailableError, match="failed: engine says no"):
        store._call("grammar", lambda shard: (_ for _ in ()).throw(Exception("engine says no")))
    store.close()


def test_client_store_rounds_a_sub_second_timeout_up() -> None:
    store = QdrantClientStore.connect("http://127.0.0.1:1", timeout_s=0.5)
    assert store.client._client._timeout == 1  # int(0.5) was 0: no timeout at all
    with pytest.raises(StoreUnavailableError, match="unreachable"):
        store.list_collections()
    store.close()


def test_a_bad_setting_is_one_line_naming_the_variable(isolated_env: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("HYDE_HYDE__N_HYPOTHESES", "20")
    result = CliRunner().invoke(app, ["search", "x"])
    assert result.exit_code == 2
    assert result.output.strip().splitlines() == [
        "error: bad setting HYDE_HYDE__N_HYPOTHESES='20': Input should be less than or equal to 8 "
        "(environment or .env; .env.example lists every key and its range)"]
    (isolated_env / ".env").write_text("HYDE_RETRIEVAL__TOP_K=zero\n")
    monkeypatch.delenv("HYDE_HYDE__N_HYPOTHESES")
    result = CliRunner().invoke(app, ["ab-report"])
    assert result.exit_code == 2 and "HYDE_RETRIEVAL__TOP_K='zero'" in result.output


def test_eval_reports_a_bad_qrels_score_and_a_bad_query_line_with_file_and_line(tiny_beir: Path) -> None:
    from hyde_tutor.errors import HydeTutorError
    from hyde_tutor.evaluation.beir import load_beir

    qrels = tiny_beir / "qrels" / "test.tsv"
    good = qrels.read_text(encoding="utf-8")
    qrels.write_text(good + "q9\tg-b01\thigh\n", encoding="utf-8")
    n = len(good.splitlines()) + 1
    with pytest.raises(HydeTutorError, match=rf"test\.tsv:{n}: the score 'high' is not an integer"):
        load_beir(tiny_beir)
    result = CliRunner().invoke(app, ["eval", "--collection", "grammar", "--dataset", str(tiny_beir)])
    assert result.exit_code == 2 and f"test.tsv:{n}: the score 'high'" in result.output and "Traceback" not in result.output
    qrels.write_text(good, encoding="utf-8")
    queries = tiny_beir / "queries.jsonl"
    queries.write_text(queries.read_text(encoding="utf-8") + '{"id": "q3", "text": "нет _id"}\n', encoding="utf-8")
    with pytest.raises(HydeTutorError, match=r'queries\.jsonl:3: expected a JSON object with "_id" and "text" \(KeyError'):
        load_beir(tiny_beir)


@pytest.mark.parametrize("backend", ["edge", "qdrant-client-local"])
def test_ingest_sync_deletes_documents_that_left_the_file(isolated_env: Path, small_corpus: Path, monkeypatch, backend) -> None:
    if backend != "edge":
        monkeypatch.setenv("HYDE_QDRANT__LOCAL", "true")
    runner = CliRunner()
    assert runner.invoke(app, ["ingest", "--collection", "grammar", "--file", str(small_corpus)]).exit_code == 0
    lines = small_corpus.read_text(encoding="utf-8").splitlines()
    fewer = isolated_env / "fewer.jsonl"
    fewer.write_text("\n".join(lines[:-2]) + "\n", encoding="utf-8")
    plain = runner.invoke(app, ["ingest", "--collection", "grammar", "--file", str(fewer)])
    assert f"{len(lines)} points in collection" in plain.output  # without --sync nothing is deleted
    synced = runner.invoke(app, ["ingest", "--collection", "grammar", "--file", str(fewer), "--sync"])
    assert synced.exit_code == 0, synced.output
    assert "2 deleted (no longer in the file)" in synced.output and f"{len(lines) - 2} points in collection" in synced.output
    again = runner.invoke(app, ["ingest", "--collection", "grammar", "--file", str(fewer), "--sync"])
    assert "0 deleted" in again.output
    broken = isolated_env / "broken.jsonl"
    broken.write_text("\n".join(lines[:2]) + "\n{not json\n", encoding="utf-8")
    refused = runner.invoke(app, ["ingest", "--collection", "grammar", "--file", str(broken), "--sync"])
    assert refused.exit_code == 2 and "--sync refused" in refused.output
    out = runner.invoke(app, ["search", "хочу", "--collection", "grammar", "--no-hyde", "--json"])
    assert f'"results"' in out.output  # the collection still serves


def test_cli_ingest_sync_also_drops_the_departed_documents_questions(isolated_env: Path, small_corpus: Path) -> None:
    import json

    from hyde_tutor.config import Settings
    from hyde_tutor.hyde.question_index import question_point_id
    from hyde_tutor.retrieval.sparse import SparseVec
    from hyde_tutor.retrieval.store import PointRecord, open_store, questions_collection

    runner = CliRunner()
    assert runner.invoke(app, ["ingest", "--collection", "grammar", "--file", str(small_corpus)]).exit_code == 0
    lines = small_corpus.read_text(encoding="utf-8").splitlines()
    ids = [json.loads(line)["id"] for line in lines]
    target = questions_collection("grammar")
    store = open_store(Settings())
    try:  # two questions per document, as `ingest --questions 2` would have written them
        spec = store.collection_spec("grammar")
        store.create_collection(target, spec)
        store.upsert(target, [PointRecord(question_point_id(doc_id, i), [0.1] * spec.dense_dim, SparseVec((1,), (1.0,)),
                                          {"doc_id": doc_id, "question": f"вопрос {i}"})
                              for doc_id in ids for i in range(2)])
        store.finish_ingest(target)
    finally:
        store.close()
    fewer = isolated_env / "fewer.jsonl"
    fewer.write_text("\n".join(lines[:-2]) + "\n", encoding="utf-8")
    synced = runner.invoke(app, ["ingest", "--collection", "grammar", "--file", str(fewer), "--sync"])
    assert synced.exit_code == 0, synced.output
    store = open_store(Settings())
    try:
        assert store.count(target) == 2 * (len(ids) - 2)
        assert store.stored_hashes(target, [question_point_id(ids[-1], 0), question_point_id(ids[-1], 1)]) == {}
    finally:
        store.close()
