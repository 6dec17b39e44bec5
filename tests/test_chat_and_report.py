"""The example tutor's chat loop and the A/B report."""

from __future__ import annotations

import json
from pathlib import Path

from pydantic_ai.messages import ModelRequest, ModelResponse, TextPart, ToolCallPart, ToolReturnPart
from pydantic_ai.models.function import AgentInfo, FunctionModel
from typer.testing import CliRunner

from hyde_tutor import Experiment, Monitor, TutorDeps
from hyde_tutor.abreport import arm_rows, bootstrap_diff, differences
from hyde_tutor.chat import build_tutor_agent, chat_loop
from hyde_tutor.cli import app
from hyde_tutor.monitor import RetrievalRecord

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
    lines = iter(["привет", None])
    assert chat_loop(build_tutor_agent(FunctionModel(broken)), TutorDeps(hyde_retriever), lambda: next(lines), out.append) == 0
    assert "server down" in out[0]

    def loops(messages, info):  # always calls the tool again
        return ModelResponse(parts=[ToolCallPart("grammar_search", {"query": "хотеть"})])

    out.clear()
    lines = iter(["привет", None])
    chat_loop(build_tutor_agent(FunctionModel(loops)), TutorDeps(hyde_retriever, monitor=Monitor()),
              lambda: next(lines), out.append, max_requests=3)
    assert "request_limit" in out[-1] or "limit" in out[-1]


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
    records = [json.loads(line) for line in path.read_text().splitlines()]
    rows = {r.arm: r for r in arm_rows(records)}
    assert rows["hyde"].count == 200 and rows["raw"].count == 300
    assert rows["hyde"].fallback_rate == 0.1 and rows["raw"].fallback_rate == 0.0
    assert rows["raw"].p50_ms == 23.0
    diffs = {d.metric: d for d in differences(records)}
    lat = diffs["total_ms"]
    assert lat.ci_low <= lat.hyde_minus_raw <= lat.ci_high and 470 < lat.ci_low
    assert diffs["top_score"].hyde_minus_raw == 0.1 or abs(diffs["top_score"].hyde_minus_raw - 0.1) < 1e-9
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
