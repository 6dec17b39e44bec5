"""Commands a person talks to: chat with the example tutor, and the demo."""

from __future__ import annotations

import sys
import threading
from pathlib import Path
from typing import Annotated

import typer

from ..config import Settings
from ..errors import HydeTutorError
from .app import app, fail, open_hyde


@app.command()
def chat(
    subject_id: Annotated[str | None, typer.Option("--subject-id", help="User/session id for A/B assignment.")] = None,
    mode: Annotated[str, typer.Option(
        help="auto | tools | retrieve-first. auto: retrieve-first with the embedded model, tools otherwise.")] = "auto",
) -> None:
    """Chat with the example tutor (shows searches and whether HyDE was used).

    Reads questions from standard input when it is not a terminal, one per line, prints each answer
    and exits 0 at the end: printf 'вопрос\\n' | hyde-tutor chat
    """
    from ..tutor.chat import CHAT_MODES, build_tutor_agent, chat_loop, default_chat_mode, warm_up_in_background
    from ..experiment.assignment import ReloadableExperiment
    from ..llm.backends import make_llm
    from ..plugin.monitor import Monitor, configure_logfire
    from ..plugin.toolset import TutorDeps

    if mode not in ("auto", *CHAT_MODES):
        fail(f"--mode must be auto, tools or retrieve-first, not {mode!r}.")
    settings = Settings()
    token = settings.monitor.logfire_token
    configure_logfire(token.get_secret_value() if token else None)
    interactive = sys.stdin.isatty()
    try:
        llm = make_llm(settings)
    except HydeTutorError as exc:
        fail(str(exc))
    hr = open_hyde(settings)
    stop_warm_up = threading.Event()
    warming = warm_up_in_background(hr, ("grammar", "docs"), stop_warm_up)  # while the first question is typed
    monitor = Monitor(settings.data_dir / "metrics.jsonl" if settings.monitor.jsonl else None, settings.monitor.window)
    deps = TutorDeps(hr, ReloadableExperiment(), monitor, subject_id)
    chosen = default_chat_mode(llm) if mode == "auto" else mode
    agent = build_tutor_agent(llm, mode=chosen)  # type: ignore[arg-type]
    typer.echo(f"hyde-tutor chat — model {llm.name}, mode {chosen}, {hyde_line(hr, deps)}"
               + ("; /exit to quit" if interactive else ""), err=not interactive)

    def read() -> str | None:
        if not interactive:
            line = sys.stdin.readline()
            if not line:
                return None
            if line.strip():
                typer.echo(f"вы> {line.strip()}")  # a transcript shows the question above its answer
            return line
        try:
            return input("вы> ")
        except EOFError:
            return None

    try:
        stream = (lambda text: (sys.stdout.write(text), sys.stdout.flush())) if interactive else None
        chat_loop(agent, deps, read, typer.echo, show_time=True, search_first=chosen == "retrieve-first",
                  stream=stream)
    finally:
        stop_warm_up.set()
        warming.join(60)  # a search in flight ends (the embedder's own wait is bounded) before the stores close
        monitor.flush()
        hr.close()
        llm.close()


def hyde_line(hr: object, deps: object) -> str:
    """What this chat's searches will do: the subject's arm when an experiment runs, else the default."""
    from ..experiment.assignment import arm_uses_hyde

    experiment = deps.current_experiment()  # type: ignore[attr-defined]
    subject = deps.subject_id  # type: ignore[attr-defined]
    default = "on" if hr.policy.enabled else "off (the embedded model: HyDE is slow and does not help it)"  # type: ignore[attr-defined]
    if experiment is None or not experiment.enabled:
        return f"HyDE {default} (no experiment running), subject {subject or '(none)'}"
    if subject is None:
        return f"HyDE {default} (experiment {experiment.name!r} runs, but no --subject-id: not enrolled)"
    arm = experiment.arm(subject)
    return (f"subject {subject} in arm {arm!r} of experiment {experiment.name!r}: HyDE "
            f"{'on' if arm_uses_hyde(arm) else 'off'}")


@app.command()
def demo(
    live: Annotated[bool, typer.Option("--live/--no-live", help="Also run one live HyDE search with the configured LLM.")] = True,
    eval_dir: Annotated[Path, typer.Option("--eval-dir", help="BEIR sets: grammar, grammar_holdout, docs.")] = Path("data/eval"),
) -> None:
    """Show what HyDE does: recorded capable-model HyDE vs plain search, then one live search."""
    from ..evaluation.demo import run_demo

    try:
        run_demo(Settings(), typer.echo, eval_dir=eval_dir, live=live)
    except HydeTutorError as exc:
        fail(str(exc))
