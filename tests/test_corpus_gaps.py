"""scripts/corpus_gaps.py: the constructions capable hypotheses name that no grammar entry teaches, even partly."""

from __future__ import annotations

import json
from pathlib import Path

from .conftest import load_script


def _module():
    return load_script("corpus_gaps")


def test_an_entry_that_teaches_part_of_the_named_construction_covers_it() -> None:
    covers = _module().covers
    assert covers("-(으)ㄴ 적이 있다/없다", "-아/어 본 적이 없다")  # two morphemes in a row: ㄴ 적
    assert covers("-(으)ㄴ/는 대신에", "-는 대신(에)")  # spelling of the optional part aside
    assert covers("-(으)면 -(으)ㄹ수록", "-(으)ㄹ수록")  # the whole name inside the entry
    assert covers("안 / -지 않다", "아직 안 -았/었어요")  # one content word the name contains
    assert covers("-아도/어도", "-아/어도")
    assert not covers("-다가", "-는 길에")  # the nearest entry by meaning is not the construction
    assert not covers("-(으)ㄴ/는데", "-는 길에")  # one shared ending (-는) is not a construction
    assert not covers("-았/었었-", "-곤 하다")


def test_gaps_are_grouped_by_morphemes_and_counted(tmp_path: Path) -> None:
    module = _module()
    rows = [{"kind": "hypothesis", "query": "по дороге домой?", "text": "Конструкция: -는 길에\nНазвание: по дороге"},
            {"kind": "hypothesis", "query": "а по пути?", "text": "**Конструкция:** -는 길에 — по дороге"},
            {"kind": "hypothesis", "query": "бывало?", "text": "Конструкция: -곤 하다\nПример: 가곤 했어요."},
            {"kind": "hypothesis", "query": "хочу", "text": "Конструкция: -고 싶다"},
            {"kind": "hypothesis", "query": "без заголовка", "text": "Просто текст без конструкции."},
            {"kind": "tool_call", "query": "по дороге зашёл", "calls": [
                {"tool": "grammar_search", "args": {"query": "q", "hypothesis": "Конструкция: -는 길에"}}]}]
    path = tmp_path / "rec.jsonl"
    path.write_text("".join(json.dumps(r, ensure_ascii=False) + "\n" for r in rows), encoding="utf-8")
    found = module.gaps(module.hypotheses([path]), ["-고 싶다", "-다가", "-았/었었-"])
    assert found == [("-는 길에", 3, "по дороге домой?"), ("-곤 하다", 1, "бывало?")]
    assert module.gaps(module.hypotheses([path]), ["-고 싶다", "-는 길에", "-곤 하다"]) == []


def test_a_contrast_and_a_bracketed_ending_are_read_as_the_entries_they_name() -> None:
    module = _module()
    assert module.parts("은/는 и 이/가") == ["은/는", "이/가"] and module.parts("-(이)나 ↔ 밖에") == ["-(이)나", "밖에"]
    assert module.variants("-느라(고)")[:2] == ["-느라고", "-느라"]
    assert module.covers("-느라고", "-느라(고)") and module.covers("N에 비해서", "N에 비해(서)")
    found = module.gaps([("чем отличаются?", "Конструкция: 은/는 и 밖에")], ["은/는", "이/가", "-느라고"])
    assert found == [("밖에", 1, "чем отличаются?")]  # the part the corpus has is not a gap, the other one is
