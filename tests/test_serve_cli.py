"""`hyde-tutor experiment` and `hyde-tutor serve`'s refusals, through the CLI."""

from __future__ import annotations

import json
from pathlib import Path

from typer.testing import CliRunner

from hyde_tutor.cli import app
from hyde_tutor.experiment.sqlstore import open_event_log


def test_the_experiment_command_writes_events_the_server_reads(isolated_env: Path, monkeypatch) -> None:
    monkeypatch.setenv("HYDE_LLM__BASE_URL", "http://127.0.0.1:9/v1")  # a capable model: no --force (never called)
    runner = CliRunner()
    status = json.loads(runner.invoke(app, ["experiment", "status", "--json"]).stdout)
    assert status["enabled"] is False and status["set_by"].startswith("settings")
    started = runner.invoke(app, ["experiment", "start", "--share", "0.3", "--name", "t1"])
    assert started.exit_code == 0 and "t1: start, HyDE share 0.30, running" in started.output
    assert runner.invoke(app, ["experiment", "share", "--share", "0.6"]).exit_code == 0
    bad = runner.invoke(app, ["experiment", "share"])
    assert bad.exit_code == 2 and "--share" in bad.output
    assert runner.invoke(app, ["experiment", "pause"]).exit_code == 2
    assert runner.invoke(app, ["experiment", "stop"]).exit_code == 0
    events = open_event_log(None).experiment_events("t1")
    assert [(e.change, e.hyde_share, e.enabled, e.actor) for e in events] == [
        ("start", 0.3, True, "cli"), ("share", 0.6, True, "cli"), ("stop", 0.6, False, "cli")]


def test_serve_refuses_several_workers_on_qdrant_client_local_mode(isolated_env: Path, monkeypatch) -> None:
    """The embedded store serves several workers (a copy each: tests/test_store_replicas.py); qdrant-client's
    local mode opens in one process only, so several workers are refused before uvicorn starts."""
    monkeypatch.setenv("HYDE_SERVER__WORKERS", "1")  # serve writes its options to the environment: undone after
    monkeypatch.setenv("HYDE_QDRANT__LOCAL", "true")
    result = CliRunner().invoke(app, ["serve", "--workers", "2"])
    assert result.exit_code == 2 and "HYDE_QDRANT__LOCAL" in result.output and "one process only" in result.output


def test_several_workers_on_the_embedded_model_are_told_what_they_cost(isolated_env: Path, monkeypatch) -> None:
    """Several workers on the embedded store are served (each its own copy); on the embedded model each worker
    also starts its own model, which the command says before it starts uvicorn (stubbed here)."""
    import uvicorn

    started: list[dict] = []
    monkeypatch.setattr(uvicorn, "run", lambda *a, **k: started.append(k))
    monkeypatch.setenv("HYDE_SERVER__WORKERS", "1")  # serve writes its options to the environment: undone after
    result = CliRunner().invoke(app, ["serve", "--workers", "2"])
    assert result.exit_code == 0 and started and started[0]["workers"] == 2
    assert "each of the 2 workers starts its own embedded model" in result.output
    monkeypatch.setenv("HYDE_LLM__PROVIDER", "replay")
    result = CliRunner().invoke(app, ["serve", "--workers", "2"])
    assert result.exit_code == 0 and "embedded model" not in result.output
