"""What a search tool gets per agent run: the retriever, the experiment, the monitor, the subject, and the
state of one chat turn (what the searches found, what was searched ahead of the run)."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from ..hyde import HydeRetriever
from ..experiment.assignment import Experiment, ReloadableExperiment
from .monitor import Monitor

__all__ = ["TutorDeps"]


@dataclass
class TutorDeps:
    """Per-run dependencies of the search tools."""

    retriever: HydeRetriever
    experiment: Experiment | ReloadableExperiment | None = None
    monitor: Monitor | None = None
    subject_id: str | None = None
    found: list[dict[str, Any]] = field(default_factory=list)
    """Every entry the searches returned since :meth:`clear_found` (what the model was shown): a chat
    turn whose model fails shows these to the learner instead of an error."""
    unavailable: list[str] = field(default_factory=list)
    """Why searches run on the model's behalf failed in this turn (retrieve-first says so instead of entries)."""
    prompt_tokens: int | None = None
    margins: dict[str, float | None] = field(default_factory=dict)
    """How sure each search of the turn was, keyed by its top entry's id: the top score's lead over the second,
    as a share of the top score (a chat turn clears it; the grounded reply's headline rule reads it)."""
    """Tokens of this turn's last model request as sent (:class:`~hyde_tutor.tutor.context_fit.FitContext`)."""
    run_usage: Any = None
    """The agent run's own usage object while it runs (set by :class:`~hyde_tutor.plugin.capabilities.HydeTutor` at its
    start): a turn cut short (the learner left, the model failed) reads what its requests spent so far."""
    _found_by_question: dict[str, list[dict[str, Any]]] = field(default_factory=dict, repr=False)
    _prefetched: dict[str, tuple[list[dict[str, Any]], list[str]]] = field(default_factory=dict, repr=False)
    _found_run: str | None = field(default=None, repr=False)

    async def acurrent_experiment(self) -> Experiment | None:
        """:meth:`current_experiment` without file I/O on the event loop."""
        if isinstance(self.experiment, ReloadableExperiment):
            return await self.experiment.acurrent()
        return self.experiment

    def current_experiment(self) -> Experiment | None:
        if isinstance(self.experiment, ReloadableExperiment):
            return self.experiment.current()
        return self.experiment

    def clear_found(self) -> None:
        """Start a new turn: forget what earlier searches found."""
        self.found.clear()
        self.unavailable.clear()
        self.prompt_tokens = None
        self._found_by_question.clear()

    def begin_run(self, run_id: str | None) -> None:
        """A new agent run forgets what earlier runs found (deps may live across many runs)."""
        if run_id is not None and run_id != self._found_run:
            self.clear_found()
            self._found_run = run_id

    def found_for(self, question: str) -> list[dict[str, Any]] | None:
        """What :class:`~hyde_tutor.retrieve_first.RetrieveFirst` already found for this question in this turn."""
        return self._found_by_question.get(question)

    def remember_found(self, question: str, entries: list[dict[str, Any]]) -> None:
        self._found_by_question[question] = entries

    def prefetch(self, question: str, entries: list[dict[str, Any]]) -> None:
        """Entries searched for ``question`` before the agent run (the chat shows them at once); the run's
        retrieve-first step takes them instead of searching again. Why searches failed then (``unavailable``)
        is kept with them: the run starts by forgetting the turn's state (:meth:`begin_run`)."""
        self._prefetched[question] = (entries, list(self.unavailable))

    def take_prefetched(self, question: str) -> list[dict[str, Any]] | None:
        """The entries :meth:`prefetch` kept for ``question`` (None: none), with their failures put back in
        ``unavailable``."""
        kept = self._prefetched.pop(question, None)
        if kept is None:
            return None
        entries, unavailable = kept
        self.unavailable.extend(u for u in unavailable if u not in self.unavailable)
        return entries
