"""Starting an experiment where HyDE cannot help (the embedded local model) is refused without ``force``, from
the CLI and from the operator endpoint, and the refusal names what the HyDE arm's learners would wait."""

from __future__ import annotations

from pathlib import Path
from types import SimpleNamespace

import pytest
from starlette.testclient import TestClient
from typer.testing import CliRunner

from hyde_tutor.cli import app
from hyde_tutor.config import Settings
from hyde_tutor.experiment.events import MemoryEventLog
from hyde_tutor.experiment.assignment import Experiment
from hyde_tutor.experiment.sqlstore import open_event_log

TOKEN = "op-secret-token"


def test_the_embedded_model_is_where_hyde_cannot_help(isolated_env: Path, monkeypatch) -> None:
    from hyde_tutor.experiment.operations import hyde_cannot_help

    why = hyde_cannot_help(Settings())
    assert why is not None and "embedded local model" in why
    assert "10–40 s a search" in why and "up to the 60 s generation timeout" in why and "MEASUREMENTS" in why
    monkeypatch.setenv("HYDE_HYDE__TIMEOUT_S", "30")
    assert "up to 60 s" in hyde_cannot_help(Settings())  # two searches a turn, each up to its timeout
    monkeypatch.setenv("HYDE_LLM__BASE_URL", "http://127.0.0.1:9/v1")
    assert hyde_cannot_help(Settings()) is None
    monkeypatch.delenv("HYDE_LLM__BASE_URL")
    monkeypatch.setenv("HYDE_OPENAI__API_KEY", "sk-test")
    assert hyde_cannot_help(Settings()) is None


def test_experiment_start_on_the_embedded_model_needs_force(isolated_env: Path) -> None:
    runner = CliRunner()
    refused = runner.invoke(app, ["experiment", "start", "--share", "0.5", "--name", "x1"])
    assert refused.exit_code == 2, refused.output
    assert "HyDE cannot help" in refused.output and "--force" in refused.output
    assert "20–80 s more a turn" in " ".join(refused.output.split())
    assert open_event_log(None).experiment_events() == []  # nothing started
    forced = runner.invoke(app, ["experiment", "start", "--share", "0.5", "--name", "x1", "--force"])
    assert forced.exit_code == 0, forced.output
    assert "x1: start, HyDE share 0.50, running" in forced.output and "started with --force" in forced.output
    assert [(e.change, e.enabled) for e in open_event_log(None).experiment_events("x1")] == [("start", True)]
    assert runner.invoke(app, ["experiment", "stop"]).exit_code == 0  # stopping needs no force
    nobody = runner.invoke(app, ["experiment", "start", "--share", "0"])  # a start that gives no one HyDE
    assert nobody.exit_code == 0, nobody.output


def test_change_experiment_refuses_only_a_start_that_gives_hyde() -> None:
    from hyde_tutor.experiment.operations import HydeCannotHelp, change_experiment

    log = MemoryEventLog()
    with pytest.raises(HydeCannotHelp, match="slow here.*--force"):
        change_experiment(log, "start", Experiment(), share=0.5, cannot_help="slow here")
    assert log.experiment_events() == []
    change_experiment(log, "start", Experiment(), share=0.0, cannot_help="slow here")  # raw for everyone
    even = Experiment(arms=("hyde", "raw"))  # split evenly: HyDE for half whatever the share
    with pytest.raises(HydeCannotHelp):
        change_experiment(MemoryEventLog(), "start", even, share=0.0, cannot_help="slow here")
    assert change_experiment(log, "start", Experiment(), share=0.5, cannot_help="slow here", force=True).enabled
    assert change_experiment(log, "share", Experiment(), share=0.3, cannot_help="slow here").hyde_share == 0.3


def test_the_operator_endpoint_asks_for_force_where_hyde_cannot_help(tmp_path: Path) -> None:
    from hyde_tutor.experiment.operations import hyde_cannot_help
    from hyde_tutor.server import create_app

    from .served_stub import stub_parts

    settings = Settings(data_dir=tmp_path / "data", server={"operator_token": TOKEN,
                                                            "allowed_hosts": ["testserver"]})
    parts = stub_parts(tmp_path, settings)
    parts.hyde_cannot_help = hyde_cannot_help(settings)
    auth = {"Authorization": f"Bearer {TOKEN}"}
    with TestClient(create_app(parts)) as client:
        refused = client.post("/api/operator/experiment", json={"action": "start", "share": 0.5}, headers=auth)
        assert refused.status_code == 422 and "HyDE cannot help" in refused.json()["error"]
        assert '"force": true' in refused.json()["error"] and parts.tutor.log.experiment_events() == []
        sloppy = client.post("/api/operator/experiment", json={"action": "start", "force": "yes"}, headers=auth)
        assert sloppy.status_code == 422  # force is the JSON true, nothing that merely looks like it
        forced = client.post("/api/operator/experiment", json={"action": "start", "share": 0.5, "force": True},
                             headers=auth)
        assert forced.status_code == 200 and forced.json()["enabled"] is True


def test_the_served_app_knows_when_its_model_cannot_help_hyde(isolated_env: Path) -> None:
    from hyde_tutor.server.build import serving_cannot_help

    settings = Settings()
    assert "HyDE cannot help" in serving_cannot_help(SimpleNamespace(kind="local"), settings)
    assert serving_cannot_help(SimpleNamespace(kind="openai"), settings) is None
    assert serving_cannot_help(None, settings) is None  # a drill's ready stub agent
