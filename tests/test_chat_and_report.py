"""The example tutor's chat loop and the A/B report."""

from __future__ import annotations

import json
from pathlib import Path

from pydantic_ai.messages import ModelRequest, ModelResponse, TextPart, ToolCallPart, ToolReturnPart
from pydantic_ai.models.function import AgentInfo, FunctionModel
from typer.testing import CliRunner

from hyde_tutor import Experiment, Monitor, TutorDeps
from hyde_tutor.experiment.abreport import arm_rows, bootstrap_diff, differences
from hyde_tutor.tutor.chat import answer_turn, build_tutor_agent, chat_loop
from hyde_tutor.cli import app
from hyde_tutor.plugin.monitor import RetrievalRecord

from .test_toolset import hyde_retriever  # noqa: F401 - fixture


def test_chat_loop_shows_tool_calls_and_hyde_use(hyde_retriever) -> None:  # noqa: F811
    instructions: list[str] = []

    def fn(messages, info: AgentInfo) -> ModelResponse:
        instructions.append(info.instructions or "")
        last = messages[-1]
        if isinstance(last, ModelRequest) and any(isinstance(p, ToolReturnPart) for p in last.parts):
            return ModelResponse(parts=[TextPart("Скажите: 부산에 가고 싶어요.")])
        return ModelResponse(parts=[ToolCallPart("grammar_search", {"query": "хотеть поехать"})])

    agent = build_tutor_agent(FunctionModel(fn))
    monitor = Monitor()
    deps = TutorDeps(hyde_retriever, Experiment(hyde_share=1.0), monitor, subject_id="u1")
    lines = iter(["Как сказать «хочу поехать в Пусан»?", "", "/exit", "never read"])
    out: list[str] = []
    turns = chat_loop(agent, deps, lambda: next(lines), out.append)
    assert turns == 1
    assert out[0].startswith("  → grammar_search(") and "хотеть поехать" in out[0]
    assert "HyDE" in out[1] and "arm=hyde" in out[1]
    assert out[-1] == "Скажите: 부산에 가고 싶어요."
    assert "репетитор корейского" in instructions[0]  # instructions come from prompts/tutor.v1.md


def test_chat_loop_survives_a_failing_model_and_a_looping_one(hyde_retriever) -> None:  # noqa: F811
    def broken(messages, info):
        raise ConnectionError("server down")

    out: list[str] = []
    lines = iter(["хочу поехать", None])
    assert chat_loop(build_tutor_agent(FunctionModel(broken)), TutorDeps(hyde_retriever), lambda: next(lines), out.append) == 1
    # the model failed before any search: the turn searched on its behalf and shows what it found
    assert out[-1].startswith("[модель не смогла ответить (ConnectionError)]")  # the type, not the raw message
    assert "Вот что нашлось в справочнике:\n1. " in out[-1] and "-고 싶다" in out[-1] and "None" not in out[-1]

    def loops(messages, info):  # always calls the tool again
        return ModelResponse(parts=[ToolCallPart("grammar_search", {"query": "хотеть"})])

    out.clear()
    lines = iter(["привет", None])
    chat_loop(build_tutor_agent(FunctionModel(loops)), TutorDeps(hyde_retriever, monitor=Monitor()),
              lambda: next(lines), out.append, max_requests=3)
    assert "(UsageLimitExceeded)" in out[-1]  # the error's type; its text goes to the log, not the learner
    assert "\n1. " in out[-1] and "-고 싶다" in out[-1]  # the entries the looping tool calls found are shown, not only the error


def test_retrieve_first_gives_the_model_the_entries_and_no_tools(hyde_retriever) -> None:  # noqa: F811
    seen: list[AgentInfo] = []

    def answer(messages, info: AgentInfo) -> ModelResponse:
        seen.append(info)
        return ModelResponse(parts=[TextPart("Скажите: 부산에 가고 싶어요.")])

    monitor = Monitor()
    deps = TutorDeps(hyde_retriever, Experiment(hyde_share=0.0), monitor, subject_id="u1")
    turn = answer_turn(build_tutor_agent(FunctionModel(answer), mode="retrieve-first"), deps, "хочу поехать в Пусан")
    assert turn.model_error is None and turn.text == "Скажите: 부산에 가고 싶어요." and turn.tool_calls == ()
    (info,) = seen  # one model request: the answer
    assert info.function_tools == [] and "Найденные статьи" in (info.instructions or "")
    assert "\n1. " in (info.instructions or "") and "-고 싶다" in (info.instructions or "")
    assert "репетитор" in (info.instructions or "")  # prompts/tutor_answer.v1.md
    assert [r.tool for r in turn.records] == ["grammar_search", "docs_search"]
    assert {r.arm for r in turn.records} == {"raw"} and not any(r.used_hyde for r in turn.records)  # the arm decides
    assert len(deps.found) >= 3 and any(e.get("pattern") == "-고 싶다" for e in deps.found)


def test_retrieve_first_with_a_failing_model_shows_what_it_found(hyde_retriever) -> None:  # noqa: F811
    def empty(messages, info):
        return ModelResponse(parts=[TextPart("")])

    turn = answer_turn(build_tutor_agent(FunctionModel(empty), mode="retrieve-first"),
                       TutorDeps(hyde_retriever, monitor=Monitor()), "хочу поехать")
    assert turn.model_error is not None and turn.text.startswith("[модель не смогла ответить")
    assert "\n1. " in turn.text and "-고 싶다" in turn.text and len(turn.records) == 2  # searched once, not again for the fallback


def test_chat_mode_follows_the_backend() -> None:
    from hyde_tutor.tutor.chat import default_chat_mode
    from hyde_tutor.llm.backends import LLMBackend

    assert default_chat_mode(LLMBackend(None, "local:qwen", "local")) == "retrieve-first"
    for kind in ("openai", "openai-compatible", "replay"):
        assert default_chat_mode(LLMBackend(None, kind, kind)) == "tools"
    import pytest

    with pytest.raises(ValueError, match="mode must be one of tools, retrieve-first"):
        build_tutor_agent(FunctionModel(lambda m, i: None), mode="guess")  # type: ignore[arg-type]


def test_cli_chat_reads_stdin_answers_each_line_and_exits_0(isolated_env: Path, monkeypatch, small_corpus) -> None:
    from .chat_stub import chat_stub

    runner = CliRunner()
    assert runner.invoke(app, ["ingest", "--collection", "grammar", "--file", str(small_corpus)]).exit_code == 0
    with chat_stub() as (url, log):
        monkeypatch.setenv("HYDE_LLM__BASE_URL", url)
        result = runner.invoke(app, ["chat"], input="Как сказать «хочу поехать»?\n\nА «но»?\n")
    assert result.exit_code == 0, result.output
    out = result.output
    assert out.count("вы> ") == 2 and out.count("Используйте конструкцию из статьи") == 2
    assert "mode tools" in out and "LLM for HyDE: openai-compatible" in out
    assert out.count(" с)") == 2  # time per turn


def _records(n: int, arm: str, ms: float, fallback_every: int = 0) -> list[RetrievalRecord]:
    return [
        RetrievalRecord("e", arm, arm == "hyde", "experiment", "grammar_search", "grammar", used_hyde=arm == "hyde",
                        fallback_reason="timeout" if fallback_every and i % fallback_every == 0 else None,
                        stages_ms={"total_ms": ms + i % 7}, results=5, top_score=0.5 + (0.1 if arm == "hyde" else 0))
        for i in range(n)
    ]


def test_ab_report_figures_and_ci(tmp_path: Path) -> None:
    path = tmp_path / "metrics.jsonl"
    monitor = Monitor(path)
    for rec in _records(200, "hyde", 500, fallback_every=10) + _records(300, "raw", 20):
        monitor.record(rec)
    monitor.flush()  # the JSONL is written by the monitor's writer thread
    records = [json.loads(line) for line in path.read_text().splitlines()]
    rows = {r.arm: r for r in arm_rows(records)}
    assert rows["hyde"].count == 200 and rows["raw"].count == 300
    assert rows["hyde"].fallback_rate == 0.1 and rows["raw"].fallback_rate == 0.0
    assert rows["raw"].p50_ms == 23.0
    diffs = {d.metric: d for d in differences(records)}
    lat = diffs["total_ms"]
    assert lat.ci_low <= lat.hyde_minus_raw <= lat.ci_high and 470 < lat.ci_low
    assert "top_score" not in diffs  # fused HyDE scores and raw hybrid scores are on different scales
    assert diffs["llm_calls"].hyde_minus_raw == 0.0
    mean, low, high = bootstrap_diff([1.0, 2.0, 3.0], [1.0, 2.0, 3.0])
    assert mean == 0.0 and low <= 0.0 <= high

    out = CliRunner().invoke(app, ["ab-report", "--file", str(path), "--plot", str(tmp_path / "ab.png")])
    assert out.exit_code == 0, out.output
    assert "hyde - raw" in out.output and "bootstrap" in out.output
    assert (tmp_path / "ab.png").read_bytes()[:4] == b"\x89PNG"
    js = CliRunner().invoke(app, ["ab-report", "--file", str(path), "--json"])
    assert json.loads(js.output)["n_records"] == 500
    missing = CliRunner().invoke(app, ["ab-report", "--file", str(tmp_path / "none.jsonl")])
    assert missing.exit_code == 2 and "No metrics file" in missing.output
