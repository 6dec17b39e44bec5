"""The pipeline's stages: pure functions over frozen values, and a result that is built once."""

from __future__ import annotations

import dataclasses

import pytest

from hyde_tutor import TutorDeps
from hyde_tutor.config import HydeSettings
from hyde_tutor.hyde import HydeResult, HydeRetriever, stages
from hyde_tutor.hyde.hypotheses import HypothesisGenerator, MemoryCache
from hyde_tutor.plugin import toolset
from hyde_tutor.retrieval import validation
from hyde_tutor.retrieval.store import Hit

from .test_hyde import WANT_TO, _text_model


def _hits(*ids: str) -> list[Hit]:
    return [Hit(d, 1.0 - i / 10, {}) for i, d in enumerate(ids)]


def test_gate_keeps_channels_that_agree_and_notes_the_rest() -> None:
    raw = _hits("a", "b", "c")
    gated = stages.gate({"hyde:rule": _hits("b", "a", "x"), "hyde:example": _hits("x", "y")}, raw, min_agreement=2)
    assert list(gated.channels) == ["hyde:rule"]
    assert len(gated.notes) == 1 and gated.notes[0].startswith("hyde:example dropped as off-topic: 0/10")
    assert stages.gate({"hyde:rule": _hits("x")}, raw, min_agreement=0).channels == {"hyde:rule": _hits("x")}
    with pytest.raises(dataclasses.FrozenInstanceError):
        gated.notes = ()  # type: ignore[misc]


def test_plain_fuses_the_questions_channel_and_threshold_cuts_to_top_k() -> None:
    weights = stages.Weights(rrf_k=1)
    only_raw = stages.plain({"raw": _hits("a", "b")}, weights)
    assert [(d.id, d.channels) for d in only_raw] == [("a", ("raw",)), ("b", ("raw",))]
    with_questions = stages.plain({"raw": _hits("a", "b"), "questions": _hits("b")}, weights)
    assert with_questions[0].id == "b" and with_questions[0].channels == ("raw", "questions")
    kept = stages.threshold(with_questions, 1, HydeSettings())
    assert [d.id for d in kept.docs] == ["b"] and kept.threshold is None


async def test_the_result_is_frozen_once_built(retriever) -> None:
    hs = HydeSettings(n_hypotheses=2, timeout_s=2.0)
    hr = HydeRetriever(retriever, lambda d: HypothesisGenerator(_text_model(lambda p: WANT_TO + p[-8:]), "fake", d,
                                                                  cache=MemoryCache(), hyde=hs), hs)
    res = await hr.search("grammar", "хочу поехать", top_k=2, use_hyde=True)
    assert isinstance(res, HydeResult) and res.used_hyde and res.timings.total_ms > 0
    with pytest.raises(dataclasses.FrozenInstanceError):
        res.results = []  # type: ignore[misc]
    with pytest.raises(dataclasses.FrozenInstanceError):
        res.timings.total_ms = 0.0  # type: ignore[misc]


async def test_a_tool_call_validates_its_query_once(retriever, monkeypatch: pytest.MonkeyPatch) -> None:
    checks: list[object] = []
    original = validation.validate_query

    def counting(query, max_chars):  # type: ignore[no-untyped-def]
        if not isinstance(query, validation.ValidQuery):
            checks.append(query)  # a full check: type, strip, empty, length
        return original(query, max_chars)

    monkeypatch.setattr(toolset, "validate_query", counting)
    monkeypatch.setattr("hyde_tutor.hyde.pipeline.validate_query", counting)
    hs = HydeSettings(n_hypotheses=1, timeout_s=2.0)
    hr = HydeRetriever(retriever, lambda d: HypothesisGenerator(_text_model(), "fake", d, cache=MemoryCache(), hyde=hs), hs)
    out = await toolset.search_with_deps(TutorDeps(retriever=hr), "grammar_search", "grammar", "  хочу поехать  ", 2,
                                         False)
    assert out["results"] and checks == ["  хочу поехать  "]
