"""What an operator of the served tutor does and sees: the experiment running now (toggled at run time, no
restart), its status, and what a page shows of a found entry and of a search.

The experiment running now is the event log's latest :class:`~hyde_tutor.experiment.events.ExperimentEvent`;
before any, the settings' experiment (``HYDE_EXPERIMENT__*``). :func:`change_experiment` appends one: the
CLI (``hyde-tutor experiment start|stop|status``) and the server's operator endpoint both call it, and every
worker reads the change on its next turn.
"""

from __future__ import annotations

import hashlib
from collections import Counter
from dataclasses import asdict, replace
from typing import Any, Literal

from ..config import Settings
from .events import EventLog, ExperimentEvent
from .assignment import Experiment, arm_uses_hyde
from ..plugin.monitor import RetrievalRecord

__all__ = ("HydeCannotHelp", "change_experiment", "current_experiment", "entry_card", "experiment_status",
           "hyde_cannot_help", "learner_tag", "why_hyde")

Action = Literal["start", "stop", "share"]


def learner_tag(subject: str) -> str:
    """A learner as logs name it: 12 hex digits of a hash, never the id itself."""
    return hashlib.sha256(subject.encode("utf-8", "surrogatepass")).hexdigest()[:12]


def current_experiment(log: EventLog, default: Experiment | None) -> Experiment | None:
    """The experiment running now: the log's latest event applied to ``default`` (its arms and salt), else
    ``default``. A stopped experiment is returned disabled (its learners get the default treatment)."""
    event = log.latest_experiment_event()
    if event is None:
        return default
    base = default or Experiment()
    return replace(base, name=event.experiment, hyde_share=event.hyde_share, enabled=event.enabled)


class HydeCannotHelp(ValueError):
    """An experiment start refused: on this LLM backend the HyDE arm's learners would only wait (pass ``force``)."""


def hyde_cannot_help(settings: Settings) -> str | None:
    """Why HyDE cannot help on the configured LLM backend, naming what the HyDE arm's learners would wait
    (None: a capable model, where it can). The embedded local model: measured in docs/MEASUREMENTS.md."""
    from ..llm.backends import resolve_provider

    if resolve_provider(settings) != "local":
        return None
    timeout = settings.hyde.timeout_s
    return (f"HyDE cannot help on the embedded local model ({settings.llm.local_model}): its hypotheses never "
            "improved a search on the eval sets, and every search of the HyDE arm waits for one, 10–40 s a search "
            f"(10–19 s a hypothesis on an idle 2-core machine), up to the {timeout:g} s generation timeout "
            "(HYDE_HYDE__TIMEOUT_S); a served turn searches twice (grammar and docs) on a model that writes one text "
            f"at a time, so the HyDE arm's learners would wait 20–80 s more a turn, up to {2 * timeout:g} s, for "
            "nothing (docs/MEASUREMENTS.md, \"HyDE with the embedded local models\"). Run the experiment on a "
            "capable model (HYDE_OPENAI__API_KEY or HYDE_LLM__BASE_URL)")


def change_experiment(log: EventLog, action: Action, default: Experiment | None, *, share: float | None = None,
                      name: str | None = None, actor: str = "operator", force: bool = False,
                      cannot_help: str | None = None) -> ExperimentEvent:
    """Start, stop or resize the experiment; the event is appended to ``log`` and returned.

    Args:
        log: the served tutor's event log.
        action: ``start`` (optionally under a new ``name`` and ``share``), ``stop``, or ``share`` (resize).
        default: the settings' experiment (used when the log holds no event yet).
        share: the HyDE arm's share of learners, 0..1.
        name: the experiment's name (``start`` only; part of the assignment hash).
        actor: who changed it (``cli``, ``http``).
        force: start even where HyDE cannot help (``cannot_help`` given).
        cannot_help: why HyDE cannot help on the serving backend (:func:`hyde_cannot_help`); a start that gives
            HyDE to some learners is then refused unless ``force``.

    Raises:
        HydeCannotHelp: a start refused (``cannot_help`` without ``force``).
        ValueError: a share outside 0..1, an unknown action, or ``share`` without a share.
    """
    if action not in ("start", "stop", "share"):
        raise ValueError(f"action must be start, stop or share, not {action!r}")
    if share is not None and not 0.0 <= share <= 1.0:
        raise ValueError(f"share must be within 0..1 (0.5 = half the learners get HyDE), got {share}")
    if action == "share" and share is None:
        raise ValueError("give the new share: --share 0.3 (or {\"share\": 0.3})")
    if name is not None and action != "start":
        raise ValueError("a name is given when an experiment starts (a new name reshuffles the learners)")
    now = current_experiment(log, default) or Experiment(enabled=False)
    split = replace(now, hyde_share=now.hyde_share if share is None else share).shares()
    gives_hyde = any(arm_uses_hyde(arm) and part > 0 for arm, part in split.items())
    if action == "start" and cannot_help and gives_hyde and not force:
        raise HydeCannotHelp(f"{cannot_help}. To start it anyway: --force (over HTTP, \"force\": true).")
    event = ExperimentEvent(change=action, experiment=name or now.name,
                            hyde_share=now.hyde_share if share is None else share,
                            enabled=action == "start" or (action == "share" and now.enabled), actor=actor)
    log.add_experiment_event(event)
    return event


def experiment_status(log: EventLog, default: Experiment | None) -> dict[str, Any]:
    """The experiment running now, where it was set, and how many turns and learners each arm has had."""
    now = current_experiment(log, default)
    event = log.latest_experiment_event()
    turns = log.turns(now.name) if now is not None else []
    return {
        "experiment": now.name if now else None, "enabled": bool(now and now.enabled),
        "hyde_share": now.hyde_share if now else None, "arms": list(now.arms) if now else [],
        "set_by": asdict(event) if event else "settings (HYDE_EXPERIMENT__*)",
        "turns": dict(Counter(t.arm for t in turns)),
        "learners": {arm: len({t.subject for t in turns if t.arm == arm}) for arm in sorted({t.arm for t in turns})},
        "ratings": dict(Counter(f"{t.arm} {'+1' if t.rating == 1 else '-1'}" for t in turns if t.rating)),
    }


WHY_NO_HYDE = {"default": "выключен по умолчанию", "experiment_off": "эксперимент остановлен",
               "explicit": "выключен запросом модели", "experiment": "группа эксперимента без HyDE"}


def why_hyde(record: RetrievalRecord) -> str:
    """Why a search used HyDE or not, in the operator view's words."""
    if record.used_hyde:
        return {"experiment": "HyDE: группа эксперимента", "explicit": "HyDE: запрос модели"}.get(record.reason, "HyDE")
    if record.fallback_reason:
        return f"без HyDE: откат ({record.fallback_reason})"
    if record.skipped:
        return "без HyDE: поиск уверен, гипотеза не нужна"
    return "без HyDE: " + WHY_NO_HYDE.get(record.reason, record.reason)


def entry_card(entry: dict[str, Any]) -> dict[str, Any]:
    """A found entry as a page card: its pattern (or topic), its Russian name, up to two examples, a snippet.
    Plain strings only: the page writes them as text, never as markup."""
    examples = [{"ko": str(ex.get("ko", "")), "ru": str(ex.get("ru", ""))}
                for ex in list(entry.get("examples") or [])[:2] if isinstance(ex, dict) and ex.get("ko")]
    text = str(entry.get("explanation") or entry.get("content") or entry.get("text") or "")
    return {"id": str(entry.get("id", "")), "pattern": str(entry.get("pattern") or entry.get("topic") or entry.get("title") or ""),
            "name": str(entry.get("name") or entry.get("subtopic") or ""), "examples": examples,
            "text": text[:200] + ("…" if len(text) > 200 else "")}
