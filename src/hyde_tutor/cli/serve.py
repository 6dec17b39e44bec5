"""Commands of the served tutor: serve it on the web, and start, stop or resize its A/B experiment."""

from __future__ import annotations

import json
import os
from typing import Annotated

import typer

from ..config import Settings
from .app import app, fail


@app.command()
def serve(
    host: Annotated[str | None, typer.Option(help="Address to listen on (HYDE_SERVER__HOST; default 127.0.0.1).")] = None,
    port: Annotated[int | None, typer.Option(help="Port (HYDE_SERVER__PORT; default 8000).")] = None,
    workers: Annotated[int | None, typer.Option(min=1, max=64, help="uvicorn worker processes (HYDE_SERVER__WORKERS).")] = None,
) -> None:
    """Serve the tutor on the web: the chat page at http://HOST:PORT/, conversations and A/B events in one database.

    The model is the one `hyde-tutor chat` uses (the embedded one with no key). Ctrl-C stops it after the turns
    in flight are finished. docs/serving.md says how to run an experiment and read its report.
    """
    try:
        import uvicorn
    except ImportError:
        fail("serving needs uvicorn (a dependency of hyde-tutor): reinstall with `pip install -e .` or `make install`")
    overrides = {"HYDE_SERVER__HOST": host, "HYDE_SERVER__PORT": port, "HYDE_SERVER__WORKERS": workers}
    for key, value in overrides.items():
        if value is not None:
            os.environ[key] = str(value)  # the worker processes read their settings from the environment
    settings = Settings()
    server = settings.server
    if server.workers > 1 and settings.qdrant.local and not settings.qdrant.url:
        fail(f"--workers {server.workers} cannot share qdrant-client's local mode (HYDE_QDRANT__LOCAL): it opens in "
             "one process only. Serve with --workers 1, or use the embedded store (each worker serves its own "
             "copy) or a Qdrant server (HYDE_QDRANT__URL).")
    from ..llm.backends import resolve_provider

    if server.workers > 1 and resolve_provider(settings) == "local":
        typer.echo(f"note: each of the {server.workers} workers starts its own embedded model (~1.2 GB of memory "
                   "each, all on the same cores): with the embedded model more workers do not answer faster; they "
                   "help with a hosted model (HYDE_LLM__*).", err=True)
    from ..experiment.sqlstore import open_database

    try:
        database = open_database(settings)
    except RuntimeError as exc:
        fail(str(exc))
    typer.echo(f"hyde-tutor serve: http://{server.host}:{server.port}/ ({server.workers} worker"
               f"{'s' if server.workers > 1 else ''}); database {database.describe()}", err=True)
    database.close()
    if not server.operator_token:
        typer.echo("operator endpoints are off (set HYDE_SERVER__OPERATOR_TOKEN to use them)", err=True)
    uvicorn.run("hyde_tutor.server.build:app_from_environment", factory=True, host=server.host, port=server.port,
                workers=server.workers, timeout_graceful_shutdown=int(server.turn_timeout_s) + 5,
                log_level="info", access_log=False, proxy_headers=False)


@app.command()
def experiment(
    action: Annotated[str, typer.Argument(help="start | stop | share | status")],
    share: Annotated[float | None, typer.Option(min=0.0, max=1.0, help="HyDE arm's share of learners (0.5 = half).")] = None,
    name: Annotated[str | None, typer.Option(help="Experiment name (start; a new name reshuffles the learners).")] = None,
    force: Annotated[bool, typer.Option("--force", help="Start even on a backend where HyDE cannot help (the "
                                                         "embedded local model): its learners only wait.")] = False,
    as_json: Annotated[bool, typer.Option("--json")] = False,
) -> None:
    """Start, stop or resize the served tutor's A/B experiment, or show it. Every worker follows on its next turn
    (no restart): the change is an event in the served tutor's database (HYDE_SERVER__DATABASE_URL).

    On the embedded local model HyDE cannot help (its hypotheses never improved a search, and each costs
    10–40 s): a start asks for --force and says what the HyDE arm's learners would wait."""
    from ..experiment.assignment import experiment_from_settings
    from ..experiment.operations import change_experiment, experiment_status, hyde_cannot_help
    from ..experiment.sqlstore import open_event_log

    if action not in ("start", "stop", "share", "status"):
        fail(f"action must be start, stop, share or status, not {action!r}")
    settings = Settings()
    try:
        log = open_event_log(settings)
    except RuntimeError as exc:
        fail(str(exc))
    default = experiment_from_settings(settings)
    cannot_help = hyde_cannot_help(settings)
    try:
        if action != "status":
            event = change_experiment(log, action, default, share=share, name=name, actor="cli",  # type: ignore[arg-type]
                                      force=force, cannot_help=cannot_help)
            if action == "start" and cannot_help and force:
                typer.echo(f"warning: started with --force. {cannot_help}.", err=True)
            typer.echo(f"experiment {event.experiment}: {event.change}, HyDE share {event.hyde_share:.2f}, "
                       f"{'running' if event.enabled else 'stopped'}", err=as_json)
        status = experiment_status(log, default)
    except ValueError as exc:
        fail(str(exc))
    finally:
        log.close()
    if as_json:
        typer.echo(json.dumps(status, ensure_ascii=False))
    elif action == "status":
        state = "running" if status["enabled"] else "stopped"
        typer.echo(f"experiment {status['experiment']}: {state}, HyDE share {status['hyde_share']}, "
                   f"set by {status['set_by'] if isinstance(status['set_by'], str) else status['set_by']['actor']}")
        typer.echo(f"turns by arm: {status['turns'] or 'none yet'}; learners by arm: {status['learners'] or 'none yet'}")
