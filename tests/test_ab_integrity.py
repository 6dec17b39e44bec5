"""A/B integrity: an enrolled subject's arm decides, a model's use_hyde is only recorded, and ab-report
reads both the assigned arm and the treatment received."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from pydantic_ai import Agent
from pydantic_ai.messages import ModelRequest, ModelResponse, TextPart, ToolCallPart, ToolReturnPart
from pydantic_ai.models.function import AgentInfo, FunctionModel
from typer.testing import CliRunner

from hyde_tutor import Experiment, HydeSearchToolset, Monitor, TutorDeps, decide
from hyde_tutor.cli import app

from .test_toolset import hyde_retriever  # noqa: F401 - fixture


def _always_asks_for_hyde() -> FunctionModel:
    def fn(messages, info: AgentInfo) -> ModelResponse:
        last = messages[-1]
        if isinstance(last, ModelRequest) and any(isinstance(p, ToolReturnPart) for p in last.parts):
            return ModelResponse(parts=[TextPart("ok")])
        return ModelResponse(parts=[ToolCallPart("grammar_search", {"query": "хотеть поехать", "use_hyde": True})])

    return FunctionModel(fn)


def _subject_in(experiment: Experiment, arm: str) -> str:
    return next(f"user-{i}" for i in range(1000) if experiment.arm(f"user-{i}") == arm)


@pytest.mark.parametrize("explicit_wins", [False, True])
def test_a_model_that_always_asks_for_hyde_cannot_move_the_raw_arm(hyde_retriever, explicit_wins) -> None:  # noqa: F811
    experiment = Experiment(hyde_share=0.5, explicit_wins=explicit_wins)
    monitor = Monitor()
    agent = Agent(_always_asks_for_hyde(), deps_type=TutorDeps, toolsets=[HydeSearchToolset()])
    for arm in ("raw", "hyde"):
        agent.run_sync("Как сказать?", deps=TutorDeps(hyde_retriever, experiment, monitor, _subject_in(experiment, arm)))
    raw, hyde = monitor.records("raw")[0], monitor.records("hyde")[0]
    assert raw.requested_hyde is True and hyde.requested_hyde is True  # the request is always recorded
    if explicit_wins:  # the debugging option: the model's request wins, and it is marked as an override
        assert (raw.use_hyde, raw.used_hyde, raw.reason, raw.overridden) == (True, True, "explicit", True)
    else:  # the default: the arm decides
        assert (raw.use_hyde, raw.used_hyde, raw.reason, raw.overridden) == (False, False, "experiment", False)
    assert (hyde.use_hyde, hyde.reason, hyde.overridden) == (True, "experiment" if not explicit_wins else "explicit", False)


def test_outside_an_experiment_an_explicit_request_beats_the_default() -> None:
    assert decide(True, None, "u1", default=False).use_hyde is True
    assert decide(None, None, "u1", default=False).use_hyde is False
    off = Experiment(enabled=False)
    assert decide(True, off, "u1", default=False).reason == "explicit"
    assert decide(None, off, "u1", default=True).reason == "experiment_off"


def _write_run(path: Path, explicit_wins: bool) -> None:
    """A simulated run: 40 subjects, the model asks for HyDE on every call."""
    experiment = Experiment(hyde_share=0.5, explicit_wins=explicit_wins)
    lines = []
    for i in range(40):
        d = decide(True, experiment, f"s{i}", default=False)
        ms = 900.0 + i if d.use_hyde else 20.0 + i
        lines.append(json.dumps({"experiment": "hyde-vs-raw", "arm": d.arm, "use_hyde": d.use_hyde, "reason": d.reason,
                                 "tool": "grammar_search", "collection": "grammar", "used_hyde": d.use_hyde,
                                 "stages_ms": {"total_ms": ms}, "results": 5, "top_score": 0.5,
                                 "requested_hyde": d.requested, "overridden": d.overridden}))
    path.write_text("\n".join(lines) + "\n", encoding="utf-8")


def test_ab_report_by_assigned_arm_and_by_treatment_received(tmp_path: Path) -> None:
    mixed, clean = tmp_path / "explicit_wins.jsonl", tmp_path / "arm_decides.jsonl"
    _write_run(mixed, explicit_wins=True)
    _write_run(clean, explicit_wins=False)
    runner = CliRunner()
    mixed_out = json.loads(runner.invoke(app, ["ab-report", "--file", str(mixed), "--json"]).output)
    clean_out = json.loads(runner.invoke(app, ["ab-report", "--file", str(clean), "--json"]).output)
    raw_mixed = next(r for r in mixed_out["arms"] if r["arm"] == "raw")
    raw_clean = next(r for r in clean_out["arms"] if r["arm"] == "raw")
    assert raw_mixed["override_rate"] == 1.0 and raw_mixed["p50_ms"] > 800  # the raw arm received HyDE
    assert raw_clean["override_rate"] == 0.0 and raw_clean["asked_otherwise_rate"] == 1.0 and raw_clean["p50_ms"] < 100
    received = {r["arm"]: r["count"] for r in mixed_out["by_treatment_received"]["arms"]}
    assert received == {"hyde": 40}  # every retrieval got HyDE: no comparison is possible by treatment
    text = runner.invoke(app, ["ab-report", "--file", str(clean)]).output
    assert "by assigned arm (intention to treat)" in text and "by treatment received" in text
    assert "asked other" in text and "overridden" in text


def test_ab_report_skips_non_object_lines_and_says_how_many(tmp_path: Path) -> None:
    path = tmp_path / "m.jsonl"
    _write_run(path, explicit_wins=False)
    with path.open("a", encoding="utf-8") as fh:
        fh.write("[1, 2]\n42\n{not json\n")
    result = CliRunner().invoke(app, ["ab-report", "--file", str(path)])
    assert result.exit_code == 0, result.output
    assert "40 retrievals, 3 lines skipped" in result.output
    assert "line 41: a JSON list, not a record object (skipped)" in result.output
    assert "line 43: not JSON" in result.output
    only_bad = tmp_path / "bad.jsonl"
    only_bad.write_text("[1]\n", encoding="utf-8")
    bad = CliRunner().invoke(app, ["ab-report", "--file", str(only_bad)])
    assert bad.exit_code == 2 and "holds no records (1 lines skipped)" in bad.output


def test_a_bad_dotenv_keeps_the_last_good_experiment_and_tool_calls_work(isolated_env: Path, hyde_retriever) -> None:  # noqa: F811
    import os
    import time
    import warnings

    from hyde_tutor import ReloadableExperiment
    from hyde_tutor.experiment.assignment import ExperimentConfigWarning

    env = isolated_env / ".env"
    env.write_text("HYDE_EXPERIMENT__ENABLED=true\nHYDE_EXPERIMENT__HYDE_SHARE=1.0\n")
    live = ReloadableExperiment(env, check_every_s=0)
    env.write_text("HYDE_EXPERIMENT__ENABLED=true\nHYDE_EXPERIMENT__HYDE_SHARE=1.5\n")  # out of range: Settings() raises ValidationError
    os.utime(env, (time.time() + 5, time.time() + 5))
    monitor = Monitor()
    agent = Agent(_always_asks_for_hyde(), deps_type=TutorDeps, toolsets=[HydeSearchToolset()])
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        for _ in range(3):
            result = agent.run_sync("Как сказать?", deps=TutorDeps(hyde_retriever, live, monitor, "u1"))
            assert result.output == "ok"
            live.current()  # later checks: the same bad file is not reported again
    reports = [w for w in caught if issubclass(w.category, ExperimentConfigWarning)]
    assert len(reports) == 1 and "experiment.hyde_share" in str(reports[0].message)
    assert "keeping the running experiment" in str(reports[0].message)
    assert [r.arm for r in monitor.records()] == ["hyde"] * 3  # the last good split (share 1.0) still runs
    env.write_text("HYDE_EXPERIMENT__ENABLED=true\nHYDE_EXPERIMENT__HYDE_SHARE=0.0\n")
    os.utime(env, (time.time() + 10, time.time() + 10))
    assert live.current().hyde_share == 0.0 and live.last_error is None  # a fixed file is picked up
