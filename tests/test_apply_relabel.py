"""scripts/apply_relabel.py: a label check's decisions change qrels and also-right lists, once, or name problems."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from .conftest import load_script


def _apply():
    return load_script("apply_relabel").apply


def _sets(root: Path) -> None:
    (root / "fu" / "qrels").mkdir(parents=True)
    queries = [{"_id": "q1", "text": "по дороге домой зайду", "metadata": {"kind": "followup"}},
               {"_id": "q2", "text": "шёл на работу и зашёл", "metadata": {"kind": "followup", "also_right": ["g-c"]}},
               {"_id": "q3", "text": "вечно шумел", "metadata": {}}, {"_id": "q4", "text": "без метки"}]
    (root / "fu" / "queries.jsonl").write_text("".join(json.dumps(q, ensure_ascii=False) + "\n" for q in queries),
                                               encoding="utf-8")
    (root / "fu" / "qrels" / "test.tsv").write_text(
        "query-id\tcorpus-id\tscore\nq1\tg-a\t2\nq1\tg-b\t1\nq2\tg-a\t1\nq3\tg-d\t1\n", encoding="utf-8")
    (root / "long_chat").mkdir()
    (root / "long_chat" / "questions.jsonl").write_text(
        json.dumps({"text": "по дороге", "relevant": ["g-a"]}, ensure_ascii=False) + "\n", encoding="utf-8")


DECISIONS = [{"key": "fu:q1", "action": "replace", "entry": "g-new"},
             {"key": "fu:q2", "action": "add", "entry": "g-new"},
             {"key": "fu:q3", "action": "also", "entry": "g-new"},
             {"key": "long_chat:0", "action": "add", "entry": "g-new"}]  # q4 has no label: left alone
CORPUS = {"g-a", "g-b", "g-c", "g-d", "g-new"}


def test_decisions_change_labels_and_also_right_once(tmp_path: Path) -> None:
    _sets(tmp_path)
    changes = _apply()(DECISIONS, CORPUS, tmp_path)
    assert len(changes) == 4
    qrels = (tmp_path / "fu" / "qrels" / "test.tsv").read_text(encoding="utf-8").splitlines()
    # replace keeps the first row's score and place; add takes the query's highest score, after its rows
    assert qrels == ["query-id\tcorpus-id\tscore", "q1\tg-new\t2", "q2\tg-a\t1", "q2\tg-new\t1", "q3\tg-d\t1"]
    meta = {q["_id"]: q.get("metadata") for q in map(json.loads, (tmp_path / "fu" / "queries.jsonl").read_text(
        encoding="utf-8").splitlines())}
    assert meta["q4"] is None  # untouched
    assert meta["q1"]["also_right"] == ["g-a", "g-b"]  # the replaced labels stay right answers
    assert meta["q2"]["also_right"] == ["g-c"]
    assert meta["q3"]["also_right"] == ["g-new"]
    assert json.loads((tmp_path / "long_chat" / "questions.jsonl").read_text(encoding="utf-8"))["relevant"] == [
        "g-a", "g-new"]
    before = {p: p.read_bytes() for p in tmp_path.rglob("*") if p.is_file()}
    assert _apply()(DECISIONS, CORPUS, tmp_path) == []  # idempotent
    assert {p: p.read_bytes() for p in tmp_path.rglob("*") if p.is_file()} == before


def test_every_problem_is_named_and_nothing_is_written(tmp_path: Path) -> None:
    _sets(tmp_path)
    before = {p: p.read_bytes() for p in tmp_path.rglob("*") if p.is_file()}
    bad = [{"key": "fu:q9", "action": "add", "entry": "g-new"}, {"key": "nope:q1", "action": "add", "entry": "g-new"},
           {"key": "fu:q1", "action": "swap", "entry": "g-new"}, {"key": "fu:q1", "action": "add", "entry": "g-zz"},
           {"key": "long_chat:5", "action": "add", "entry": "g-new"}, {"key": ":q1", "action": "add", "entry": "g-new"},
           {"key": "long_chat:0", "action": "also", "entry": "g-new"}, {"key": "fu:q4", "action": "add", "entry": "g-new"},
           *DECISIONS]
    with pytest.raises(ValueError) as err:
        _apply()(bad, CORPUS, tmp_path)
    for part in ("fu:q9: no such query", "no eval set 'nope'", "unknown action 'swap'", "'g-zz' is not an entry",
                 "long_chat:5: no such question", ":q1: no eval set ''", "long_chat:0: long_chat has no also-right",
                 "fu:q4: the query has no label to change"):
        assert part in str(err.value)
    assert {p: p.read_bytes() for p in tmp_path.rglob("*") if p.is_file()} == before
