"""scripts/named_split.py: follow-ups grouped by what their hypothesis names, and whether the label came first."""

from __future__ import annotations

import importlib.util

from .conftest import DATA


def _module():
    spec = importlib.util.spec_from_file_location("named_split", DATA.parent / "scripts" / "named_split.py")
    module = importlib.util.module_from_spec(spec)  # type: ignore[arg-type]
    spec.loader.exec_module(module)  # type: ignore[union-attr]
    return module


def test_the_header_is_read_with_markdown_and_without_one() -> None:
    header = _module().header
    assert header("Конструкция: -고 싶어 하다\nНазвание: …") == "-고 싶어 하다"
    assert header("**Конструкция:** -는 길에 — по дороге") == "-는 길에 — по дороге"
    assert header("Просто текст.") == ""


def test_follow_ups_fall_in_the_group_of_what_their_hypothesis_names() -> None:
    patterns = {"g-b01": "-고 싶다", "g-b02": "-고 싶어하다", "g-b04": "-(으)ㄹ 줄 알다/모르다", "g-b03": "-(으)ㄹ 수 있다/없다"}
    labels = {"q1": ["g-b02"], "q2": ["g-b03"], "q3": ["g-b02"], "q4": ["g-b02"]}
    named = {"q1": "-고 싶어 하다", "q2": "-(으)ㄹ 줄 모르다", "q3": "-길 잘했다", "q4": "-고 싶어 하다"}
    firsts = {"q1": "g-b02", "q2": "g-b04", "q3": "g-b01", "q4": "g-b01"}
    groups = _module().split(patterns, labels, {"q2": ["g-b04"]}, named, firsts)
    assert (groups["label"]["n"], groups["label"]["label_first"]) == (2, 1)
    assert groups["label"]["misses"] == [("q4", "-고 싶어 하다", "g-b01")]
    assert (groups["other"]["n"], groups["other"]["label_first"], groups["other"]["also_right"]) == (1, 0, 1)
    assert (groups["none"]["n"], groups["none"]["label_first"]) == (1, 0)
