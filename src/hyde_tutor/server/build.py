"""Build the served tutor's parts from settings, the way ``hyde-tutor chat`` builds its agent: the embedded
model with no key, a capable model by settings (``HYDE_LLM__*``, ``HYDE_OPENAI__API_KEY``)."""

from __future__ import annotations

import functools
from typing import Any

from starlette.applications import Starlette

from ..config import Settings
from .app import ServerParts, create_app
from .learners import LearnerIdentity, server_secret

__all__ = ("app_from_environment", "app_from_settings", "default_judge", "outcome_report")


def outcome_report(log: Any, experiment: str | None, arms: tuple[str, ...] | None = None) -> dict[str, Any]:
    """The A/B report of the event log: ``evaluation.abreport.outcome_report`` where it exists (its SRM check
    against the split the configured ``arms`` make), else the experiment's status and counts
    (``plugin.operations.experiment_status``)."""
    from ..experiment import abreport

    report = getattr(abreport, "outcome_report", None)
    if report is not None:
        return report(log, experiment, arms=arms)
    from ..experiment.operations import experiment_status

    return experiment_status(log, None)


def app_from_settings(settings: Settings | None = None, *, judge: Any = None, agent: Any = None) -> Starlette:
    """The app with the configured model, retriever, database and secrets.

    Args:
        settings: the settings (None: environment and ``.env``).
        judge: a relevance judge (``async maybe_judge(turn, question, entries) -> dict | None``); None: a
            :class:`~hyde_tutor.experiment.judge.RelevanceJudge` on the configured model when it is a capable one
            (OpenAI or a compatible server) and ``HYDE_JUDGE__SHARE`` > 0; the embedded and replay models judge nothing.
        agent: a ready tutor agent in tools mode (a drill's stub model); None builds the configured one.
    """
    from ..hyde import HydeRetriever
    from ..retrieval.retriever import Retriever
    from ..retrieval.store import open_store
    from ..llm.backends import make_llm
    from ..tutor.chat import build_tutor_agent, default_chat_mode
    from ..experiment.assignment import experiment_from_settings
    from ..tutor.served import ServedTutor
    from ..experiment.sqlconversations import SqlConversationStore
    from ..experiment.sqlstore import SqlEventLog, open_database

    settings = settings or Settings()
    _turn_logs()
    database = open_database(settings)
    llm = make_llm(settings) if agent is None else None
    # several workers: each serves its own copy of the embedded store (the engine opens a shard in one process)
    store = open_store(settings, replica=settings.server.workers > 1)
    try:
        retriever = HydeRetriever.from_settings(settings, Retriever.from_settings(settings, store=store))
    except BaseException:
        store.close()  # a worker's copy of the store is removed with it
        raise
    mode = default_chat_mode(llm) if llm is not None else "tools"
    agent = agent if agent is not None else build_tutor_agent(llm, mode=mode)
    judge = judge if judge is not None else default_judge(llm, settings)
    tutor = ServedTutor(agent, retriever, SqlEventLog(database), experiment_from_settings(settings), judge=judge,
                        retrieve_first=mode == "retrieve-first")
    secret = settings.server.secret.get_secret_value() if settings.server.secret else None
    host_secret = settings.server.host_secret.get_secret_value() if settings.server.host_secret else None
    identity = LearnerIdentity(server_secret(secret, settings.data_dir), host_secret)
    report = functools.partial(outcome_report, arms=tutor.default_experiment.arms if tutor.default_experiment else None)
    parts = ServerParts(tutor, SqlConversationStore(database), settings, identity, report=report,
                        closers=[retriever.close, database.close, *([llm.close] if llm is not None else [])],
                        hyde_cannot_help=serving_cannot_help(llm, settings))
    return create_app(parts)


def serving_cannot_help(llm: Any, settings: Settings) -> str | None:
    """Why HyDE cannot help the served tutor's model (the embedded local one), so that an experiment start asks
    for ``force``; None for a capable model, and for a ready agent passed in (``llm`` None: a drill's stub)."""
    if llm is None or llm.kind != "local":
        return None
    from ..experiment.operations import hyde_cannot_help

    return hyde_cannot_help(settings)


def default_judge(llm: Any, settings: Settings) -> Any:
    """The relevance judge a served tutor gets: one on its LLM when that is a capable model (OpenAI or a compatible
    server) and ``HYDE_JUDGE__SHARE`` > 0; none on the embedded model (no judge, and its one request at a time
    would queue learners behind it), on ``replay`` or with no LLM."""
    if llm is None or llm.kind in ("local", "replay") or settings.judge.share <= 0:
        return None
    from ..experiment.judge import RelevanceJudge

    return RelevanceJudge.for_backend(llm, settings)


def _turn_logs() -> None:
    """Each served turn logs one line at INFO (learner hash, arm, outcome, time; never the text), in every worker."""
    import logging

    for name in ("hyde_tutor.served", "hyde_tutor.server"):
        log = logging.getLogger(name)
        log.setLevel(logging.INFO)
        if not any(getattr(h, "hyde_served_handler", False) for h in log.handlers):
            handler = logging.StreamHandler()
            handler.setFormatter(logging.Formatter("%(asctime)s %(levelname)s %(name)s: %(message)s"))
            handler.hyde_served_handler = True  # type: ignore[attr-defined]
            log.addHandler(handler)
            log.propagate = False


def app_from_environment() -> Starlette:
    """uvicorn's factory (``--factory``): each worker builds its parts from the environment and ``.env``."""
    return app_from_settings(Settings())
