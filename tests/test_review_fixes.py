"""Regressions found in review: each would have failed before its fix."""

from __future__ import annotations

import json
from pathlib import Path

from pydantic_ai.messages import ModelResponse, TextPart
from pydantic_ai.models.function import FunctionModel
from typer.testing import CliRunner

from hyde_tutor import Monitor, TutorDeps
from hyde_tutor.tutor.chat import answer_turn, build_tutor_agent
from hyde_tutor.cli import app
from hyde_tutor.config import HydeSettings
from hyde_tutor.errors import EmbedderError
from hyde_tutor.hyde.hypotheses import HypothesisGenerator, HypothesisPrompts, MemoryCache
from hyde_tutor.plugin.monitor import RetrievalRecord
from hyde_tutor.llm.prompts import Perspective

from .test_toolset import hyde_retriever  # noqa: F401 - fixture


def test_a_failed_turn_searches_without_recording_and_the_next_turn_works(hyde_retriever) -> None:  # noqa: F811
    state = {"fail": True}

    def flaky(messages, info):
        if state["fail"]:
            raise ConnectionError("down")
        return ModelResponse(parts=[TextPart("Ответ.")])

    monitor = Monitor()
    deps = TutorDeps(hyde_retriever, monitor=monitor)
    agent = build_tutor_agent(FunctionModel(flaky))
    first = answer_turn(agent, deps, "хочу поехать")
    assert first.model_error and "Вот что нашлось" in first.text
    assert monitor.total == 0  # the fallback search is not an A/B retrieval
    state["fail"] = False
    second = answer_turn(agent, deps, "хочу поехать")
    assert second.model_error is None and second.text == "Ответ."


def test_the_metrics_writer_survives_any_subject_and_flush_returns(tmp_path: Path) -> None:
    path = tmp_path / "m.jsonl"
    monitor = Monitor(path)
    for subject in ("\udcff", "ok"):  # a lone surrogate cannot be encoded as UTF-8
        monitor.record(RetrievalRecord(None, "raw", False, "default", "grammar_search", "grammar", subject=subject))
    assert monitor.flush(timeout_s=5)
    rows = [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines()]
    assert [r["subject"] for r in rows] == ["\udcff", "ok"]


async def test_a_failed_hypothesis_embedding_falls_back_to_raw(hyde_retriever) -> None:  # noqa: F811
    original = hyde_retriever.retriever.encode
    calls = {"n": 0}

    def encode(texts, collection=None):
        calls["n"] += 1
        if calls["n"] > 1:  # the raw query embeds; the hypotheses' batch hits a rate limit
            raise EmbedderError("HTTP 429 rate limited")
        return original(texts, collection)

    hyde_retriever.retriever.encode = encode
    res = await hyde_retriever.search("grammar", "хотеть", top_k=3, use_hyde=True)
    assert res.fallback_reason == "embed_error" and res.results and "429" in res.errors[0]


async def test_an_edited_perspective_is_not_served_the_old_cached_hypothesis() -> None:
    calls: list[str] = []

    async def fn(messages, info):
        calls.append(str(messages[-1].parts[-1].content))
        return ModelResponse(parts=[TextPart(f"Конструкция: -고 싶다. 가고 싶어요. {len(calls)}")])

    cache = MemoryCache()
    hs = HydeSettings(n_hypotheses=1, min_hangul_chars=0)
    old = HypothesisGenerator(FunctionModel(fn), "m", "grammar", cache=cache, hyde=hs,
                              prompts=HypothesisPrompts(perspectives=[Perspective("rule", "Опиши правило.")]))
    new = HypothesisGenerator(FunctionModel(fn), "m", "grammar", cache=cache, hyde=hs,
                              prompts=HypothesisPrompts(perspectives=[Perspective("rule", "Опиши правило подробно.")]))
    await old.generate("вопрос")
    await old.generate("вопрос")
    assert len(calls) == 1  # same request: cached
    await new.generate("вопрос")
    assert len(calls) == 2  # same perspective name, other wording: a new request


def test_sync_refuses_an_empty_file(isolated_env: Path, small_corpus: Path) -> None:
    runner = CliRunner()
    assert runner.invoke(app, ["ingest", "--collection", "grammar", "--file", str(small_corpus)]).exit_code == 0
    empty = isolated_env / "empty.jsonl"
    empty.write_text("", encoding="utf-8")
    result = runner.invoke(app, ["ingest", "--collection", "grammar", "--file", str(empty), "--sync"])
    assert result.exit_code == 2 and "has no documents; it would empty 'grammar'" in result.output
