"""The CLI contract other tools depend on (flags, exit codes, JSON shapes)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from typer.testing import CliRunner

from hyde_tutor.cli import app

from .conftest import DATA

runner = CliRunner()


def _invoke(*args: str):
    return runner.invoke(app, list(args), catch_exceptions=False)


def test_ingest_then_search_json_contract(small_corpus: Path) -> None:
    first = _invoke("ingest", "--collection", "grammar", "--file", str(small_corpus))
    assert first.exit_code == 0, first.output
    assert "6 written" in first.output
    again = _invoke("ingest", "--collection", "grammar", "--file", str(small_corpus))
    assert "0 written, 6 unchanged" in again.output

    out = _invoke("search", "Как сказать, что я хочу поехать в Пусан?", "--collection", "grammar", "--top-k", "3",
                  "--json", "--no-hyde")
    assert out.exit_code == 0, out.output
    rows = [json.loads(line) for line in out.output.splitlines() if line.startswith("{")]
    assert len(rows) == 1
    row = rows[0]
    assert set(row) == {"query_id", "query", "used_hyde", "fallback_reason", "why", "skipped", "errors", "results"}
    assert row["why"] == "HyDE off" and row["errors"] == []  # HyDE was simply off: said so, not an error
    assert row["used_hyde"] is False and row["fallback_reason"] == "disabled" and len(row["results"]) == 3
    assert set(row["results"][0]) == {"id", "score", "payload"}
    assert row["results"][0]["id"] == "g-b01"  # original id, not the point UUID
    assert row["results"][0]["payload"]["pattern"] == "-고 싶다"


def test_search_queries_file_beir_and_plain(small_corpus: Path, isolated_env: Path) -> None:
    _invoke("ingest", "--collection", "grammar", "--file", str(small_corpus))
    beir = isolated_env / "q.jsonl"
    beir.write_text('{"_id": "qa", "text": "хочу поехать"}\n{"_id": "qb", "text": "не могу, но"}\n', encoding="utf-8")
    plain = isolated_env / "q.txt"
    plain.write_text("хочу поехать\n\nне могу\n", encoding="utf-8")
    for path, ids in ((beir, ["qa", "qb"]), (plain, ["1", "3"])):
        out = _invoke("search", "--queries-file", str(path), "--collection", "grammar", "--json", "--no-hyde")
        assert out.exit_code == 0, out.output
        rows = [json.loads(line) for line in out.output.splitlines() if line.startswith("{")]
        assert [r["query_id"] for r in rows] == ids


def test_search_errors_are_clear(isolated_env: Path) -> None:
    missing = runner.invoke(app, ["search", "вопрос", "--collection", "nope"])
    assert missing.exit_code == 2 and "does not exist" in missing.output
    empty = runner.invoke(app, ["search", "   ", "--collection", "nope"])
    assert empty.exit_code == 2 and "empty" in empty.output
    neither = runner.invoke(app, ["search"])
    assert neither.exit_code == 2


def test_ingest_reports_malformed_lines_and_exits_nonzero(isolated_env: Path) -> None:
    good = (DATA / "grammar.jsonl").read_text(encoding="utf-8").splitlines()[0]
    path = isolated_env / "mixed.jsonl"
    path.write_text(f"{good}\n{{broken\n\n{{\"id\": 1}}\n", encoding="utf-8")
    out = runner.invoke(app, ["ingest", "--collection", "g", "--file", str(path)])
    assert out.exit_code == 1
    assert "line 2" in out.output and "line 4" in out.output and "1 written" in out.output
    missing = runner.invoke(app, ["ingest", "--collection", "g", "--file", str(isolated_env / "none.jsonl")])
    assert missing.exit_code == 2 and "does not exist" in missing.output


def test_eval_json_contract_auto_ingests(tiny_beir: Path) -> None:
    ds = tiny_beir
    out = runner.invoke(app, ["eval", "--collection", "fresh", "--dataset", str(ds), "--arms", "raw,dense,sparse", "--json"])
    assert out.exit_code == 0, out.output
    report = json.loads(out.output.strip().splitlines()[-1])
    assert report["n_queries"] == 2
    assert set(report["arms"]) == {"raw", "dense", "sparse"}
    for metrics in report["arms"].values():
        assert {"ndcg@10", "recall@5", "mrr@10", "recall@1", "recall@10", "precision@5"} <= set(metrics)
        assert all(0.0 <= v <= 1.0 for v in metrics.values())
    assert report["arms"]["sparse"]["recall@10"] == 1.0
    assert set(report["groups"]["raw"]) == {"named", "unnamed"}
    bad = runner.invoke(app, ["eval", "--collection", "fresh", "--dataset", str(ds), "--arms", "bogus"])
    assert bad.exit_code == 2 and "Unknown arm" in bad.output


def test_eval_counts_each_query_fallback_once(tiny_beir: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The warm-up query runs twice; its fallback must still be counted once."""
    monkeypatch.setenv("HYDE_LLM__BASE_URL", "http://127.0.0.1:9/v1")  # nothing listens: every call fails
    monkeypatch.setenv("HYDE_HYDE__TIMEOUT_S", "5")
    out = runner.invoke(app, ["eval", "--collection", "fresh", "--dataset", str(tiny_beir), "--arms", "raw,hyde", "--json"])
    assert out.exit_code == 0, out.output
    report = json.loads(out.output.strip().splitlines()[-1])
    assert report["fallbacks"] == {"hyde": {"llm_error": 2}}
    assert report["arms"]["hyde"] == report["arms"]["raw"]  # every query fell back to the raw results
    bad = runner.invoke(app, ["eval", "--collection", "fresh", "--dataset", str(tiny_beir), "--arms", "hyde",
                              "--fusion", "bogus"])
    assert bad.exit_code == 2 and "--fusion must be one of rrf, max, mean, score" in bad.output


def test_bench_runs_small(isolated_env: Path, small_corpus: Path) -> None:
    out = runner.invoke(app, ["bench", "--sizes", "2000", "--corpus", str(small_corpus), "--json"])
    assert out.exit_code == 0, out.output
    rows = json.loads(out.output.strip().splitlines()[-1])
    assert rows["hybrid query p50 @ 2k"]["unit"] == "ms" and rows["hybrid query p50 @ 2k"]["value"] > 0
    assert any(k.startswith("dense embed") for k in rows)


def test_search_with_hyde_on_the_embedded_model(small_corpus: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("HYDE_LLM__LOCAL_MODEL", "smollm2-135m")
    monkeypatch.setenv("HYDE_LLM__MAX_TOKENS", "32")
    monkeypatch.setenv("HYDE_HYDE__TIMEOUT_S", "300")  # a busy 2-core machine must not turn this into a fallback
    monkeypatch.setenv("HYDE_HYDE__MIN_HANGUL_CHARS", "0")  # SmolLM2 writes no Korean; this tests the engine path
    _invoke("ingest", "--collection", "grammar", "--file", str(small_corpus))
    out = _invoke("search", "Как сказать, что я хочу поехать в Пусан?", "--collection", "grammar", "--hyde",
                  "--hypotheses", "1", "--fusion", "rrf", "--json", "--show-hypotheses")
    assert out.exit_code == 0, out.output
    row = json.loads([line for line in out.output.splitlines() if line.startswith("{")][-1])
    assert row["used_hyde"] is True and row["fallback_reason"] is None
    assert len(row["hypotheses"]) == 1 and row["hypotheses"][0]["perspective"] == "rule"
    assert any("hyde:rule" in chans for chans in row["channels"].values())
    assert row["timings_ms"]["generate_ms"] > 0
    assert 0 < row["usage"]["output_tokens"] <= 32  # counted from the local stream, capped by MAX_TOKENS
    bad = runner.invoke(app, ["search", "x", "--fusion", "bogus"])
    assert bad.exit_code == 2 and "--fusion" in bad.output


def test_search_compare_prints_raw_and_hyde_side_by_side(small_corpus: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("HYDE_LLM__LOCAL_MODEL", "smollm2-135m")
    monkeypatch.setenv("HYDE_LLM__MAX_TOKENS", "24")
    monkeypatch.setenv("HYDE_HYDE__TIMEOUT_S", "300")
    monkeypatch.setenv("HYDE_HYDE__MIN_HANGUL_CHARS", "0")
    _invoke("ingest", "--collection", "grammar", "--file", str(small_corpus))
    out = _invoke("search", "Как сказать, что я хочу поехать?", "--collection", "grammar", "--compare", "--hypotheses", "1", "--top-k", "3")
    assert out.exit_code == 0, out.output
    assert "hypothesis [rule]:" in out.output
    rows = [line for line in out.output.splitlines() if line[:2].strip().isdigit() and " | " in line]
    assert len(rows) == 3 and all(line.split(" | ")[0].split()[1].startswith("g-") for line in rows)


def test_eval_scores_one_half_of_the_queries(tiny_beir: Path) -> None:
    from hyde_tutor.evaluation.splits import half_of

    assert half_of("q1") == half_of("q2") == "heldout"  # the fixture's two ids
    out = runner.invoke(app, ["eval", "--collection", "fresh", "--dataset", str(tiny_beir), "--arms", "sparse",
                              "--half", "heldout", "--json"])
    assert out.exit_code == 0 and json.loads(out.output.strip().splitlines()[-1])["n_queries"] == 2, out.output
    empty = runner.invoke(app, ["eval", "--collection", "fresh", "--dataset", str(tiny_beir), "--half", "tune"])
    assert empty.exit_code == 2 and "No query" in empty.output and "tune half" in empty.output
    bad = runner.invoke(app, ["eval", "--collection", "fresh", "--dataset", str(tiny_beir), "--half", "odd"])
    assert bad.exit_code == 2 and "Unknown half" in bad.output


def test_the_halves_split_the_conversation_sets_evenly_and_by_id_alone() -> None:
    from hyde_tutor.evaluation.beir import load_beir
    from hyde_tutor.evaluation.splits import half_of, in_half

    ids = [q.id for name in ("conversations", "followups") for q in load_beir(DATA / "eval" / name).queries]
    tune = [i for i in ids if half_of(i) == "tune"]
    assert len(tune) == 87 and len(ids) - len(tune) == 88  # 53 + 34 against 53 + 35
    assert half_of("cv-f01") == half_of("cv-f01") and all(in_half(i, None) and in_half(i, "all") for i in ids)
    with pytest.raises(ValueError, match="unknown half"):
        in_half("cv-f01", "odd")
