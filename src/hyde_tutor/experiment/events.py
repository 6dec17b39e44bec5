"""The served tutor's event log: what an A/B report reads, whoever wrote it.

One record per served turn (:class:`TurnRecord`), the retrievals it made (the monitor's
:class:`~hyde_tutor.plugin.monitor.RetrievalRecord`, tied to it by ``turn_id``), the learner's ratings
(:class:`RatingEvent`) and the experiment's changes (:class:`ExperimentEvent`: start, stop, a new share).
An :class:`EventLog` keeps them; :class:`MemoryEventLog` is the in-process one (tests, a notebook, a
simulation); the server keeps them in the same database as its conversations, so every worker writes to
one place and ``ab-report`` reads one source.

Outcomes arrive after the turn: a rating when the learner clicks, ``rephrase`` when the learner's next
message asks the same thing again, a judge's score when a sampled judgement is done. They are set with
:meth:`EventLog.update_turn`, which touches only the fields it is given.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Sequence
from dataclasses import dataclass, field, replace
from typing import Any, Literal, Protocol, runtime_checkable

from ..plugin.monitor import RetrievalRecord

__all__ = ("TurnRecord", "RatingEvent", "ExperimentEvent", "EventLog", "MemoryEventLog", "OUTCOME_FIELDS")

ExperimentChange = Literal["start", "stop", "share"]

OUTCOME_FIELDS = frozenset({"rephrase", "judge_score", "judge_calls", "judge_tokens", "rating", "rating_reason"})
"""The :class:`TurnRecord` fields :meth:`EventLog.update_turn` may set after the turn was recorded."""


@dataclass(frozen=True, slots=True, kw_only=True)
class TurnRecord:
    """One served turn: who asked (no text), which arm, what the reply used, what it cost, how it went."""

    turn_id: str
    subject: str
    """The learner (the A/B subject id): a signed session id or the id the host application passed."""
    conversation_id: str
    experiment: str | None
    """The experiment running when the turn started (``None``: no experiment, arm ``unassigned``)."""
    arm: str
    timestamp: float = field(default_factory=time.time)
    """When the turn started (its arm was decided then): the period it belongs to."""
    question_chars: int = 0
    failed: bool = False
    """The model did not answer (the learner got the entries and one line about the failure)."""
    abandoned: bool = False
    """The learner closed the stream before the turn ended (``seconds``: how long it had run; its retrievals and
    cost so far are kept; ``failed`` only if the model had already failed)."""
    seconds: float = 0.0
    first_token_s: float | None = None
    grounded: bool | None = None
    """The reply teaches from an entry the search found (names it, gives Korean)."""
    grounded_rank: int | None = None
    """1-based rank of the found entry the reply is headed by (``None``: not grounded)."""
    found_ids: tuple[str, ...] = ()
    """Ids of the entries found this turn, best first (the judge and the simulation read them)."""
    agent_tokens_in: int = 0
    agent_tokens_out: int = 0
    agent_requests: int = 0
    hypothesis_tokens: int = 0
    """Output tokens the agent spent writing its own hypotheses in tool calls (tools mode)."""
    rephrase: bool | None = None
    """The learner's next message asked the same thing again (``None`` until the next message, or none)."""
    judge_score: float | None = None
    """A sampled relevance judgement of the top results, 0..1 (``None``: not judged)."""
    judge_calls: int = 0
    judge_tokens: int = 0
    rating: int | None = None
    """The learner's latest rating: +1 (👍) or -1 (👎)."""
    rating_reason: str | None = None


@dataclass(frozen=True, slots=True, kw_only=True)
class RatingEvent:
    """A learner rated a reply. The latest rating of a turn counts; every one is kept."""

    turn_id: str
    subject: str
    rating: int
    reason: str | None = None
    timestamp: float = field(default_factory=time.time)


@dataclass(frozen=True, slots=True, kw_only=True)
class ExperimentEvent:
    """The operator started, stopped or resized an experiment; the log's latest event is what runs now."""

    change: ExperimentChange
    experiment: str
    hyde_share: float
    enabled: bool
    actor: str = "operator"
    timestamp: float = field(default_factory=time.time)


@runtime_checkable
class EventLog(Protocol):
    """Where served turns, their retrievals, ratings and experiment changes are kept (one per deployment)."""

    def add_turn(self, turn: TurnRecord) -> None:
        """Store a turn once (a second call with the same ``turn_id`` raises ``ValueError``)."""

    def update_turn(self, turn_id: str, **outcomes: Any) -> bool:
        """Set outcome fields (:data:`OUTCOME_FIELDS`) of a stored turn; False when no such turn."""

    def add_retrieval(self, record: RetrievalRecord, turn_id: str | None) -> None:
        """Store one retrieval, tied to its turn."""

    def add_rating(self, rating: RatingEvent) -> bool:
        """Store a rating and set the turn's ``rating``; False (nothing stored) when the turn is not the subject's."""

    def add_experiment_event(self, event: ExperimentEvent) -> None: ...

    def turns(self, experiment: str | None = None) -> list[TurnRecord]: ...

    def last_turn(self, subject: str, conversation_id: str) -> TurnRecord | None:
        """The subject's latest turn in a conversation (the one a rephrase would follow), or None."""

    def rated(self, subject: str, turn_ids: Sequence[str]) -> dict[str, tuple[int, str | None]]:
        """The subject's last ``(rating, reason)`` of each of its own turns among ``turn_ids`` it rated (one read)."""

    def retrievals(self, turn_id: str | None = None) -> list[tuple[str | None, RetrievalRecord]]:
        """``(turn_id, record)`` pairs, oldest first (``turn_id`` given: that turn's only)."""

    def ratings(self, turn_id: str | None = None) -> list[RatingEvent]:
        """Every stored rating, oldest first (``turn_id`` given: that turn's only)."""

    def experiment_events(self, experiment: str | None = None) -> list[ExperimentEvent]:
        """Oldest first."""

    def latest_experiment_event(self) -> ExperimentEvent | None:
        """The experiment running now, as the operator last set it (None: never set; the settings decide)."""


class MemoryEventLog:
    """An :class:`EventLog` in this process's memory (thread-safe)."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._turns: dict[str, TurnRecord] = {}
        self._retrievals: list[tuple[str | None, RetrievalRecord]] = []
        self._ratings: list[RatingEvent] = []
        self._experiment: list[ExperimentEvent] = []

    def add_turn(self, turn: TurnRecord) -> None:
        with self._lock:
            if turn.turn_id in self._turns:
                raise ValueError(f"turn {turn.turn_id!r} is already stored")
            self._turns[turn.turn_id] = turn

    def update_turn(self, turn_id: str, **outcomes: Any) -> bool:
        unknown = set(outcomes) - OUTCOME_FIELDS
        if unknown:
            raise ValueError(f"not outcome fields: {sorted(unknown)}; allowed: {sorted(OUTCOME_FIELDS)}")
        with self._lock:
            turn = self._turns.get(turn_id)
            if turn is None:
                return False
            self._turns[turn_id] = replace(turn, **outcomes)
            return True

    def add_retrieval(self, record: RetrievalRecord, turn_id: str | None) -> None:
        with self._lock:
            self._retrievals.append((turn_id, record))

    def add_rating(self, rating: RatingEvent) -> bool:
        if rating.rating not in (1, -1):
            raise ValueError(f"a rating is +1 or -1, got {rating.rating!r}")
        with self._lock:
            turn = self._turns.get(rating.turn_id)
            if turn is None or turn.subject != rating.subject:
                return False
            self._ratings.append(rating)
            self._turns[rating.turn_id] = replace(turn, rating=rating.rating, rating_reason=rating.reason)
            return True

    def add_experiment_event(self, event: ExperimentEvent) -> None:
        with self._lock:
            self._experiment.append(event)

    def turns(self, experiment: str | None = None) -> list[TurnRecord]:
        with self._lock:
            return [t for t in self._turns.values() if experiment is None or t.experiment == experiment]

    def last_turn(self, subject: str, conversation_id: str) -> TurnRecord | None:
        with self._lock:
            mine = [t for t in self._turns.values() if t.subject == subject and t.conversation_id == conversation_id]
        return max(mine, key=lambda t: t.timestamp, default=None)

    def rated(self, subject: str, turn_ids: Sequence[str]) -> dict[str, tuple[int, str | None]]:
        with self._lock:
            turns = [self._turns.get(turn_id) for turn_id in turn_ids]
        return {t.turn_id: (t.rating, t.rating_reason) for t in turns
                if t is not None and t.subject == subject and t.rating is not None}

    def retrievals(self, turn_id: str | None = None) -> list[tuple[str | None, RetrievalRecord]]:
        with self._lock:
            return [(t, r) for t, r in self._retrievals if turn_id is None or t == turn_id]

    def ratings(self, turn_id: str | None = None) -> list[RatingEvent]:
        with self._lock:
            return [r for r in self._ratings if turn_id is None or r.turn_id == turn_id]

    def experiment_events(self, experiment: str | None = None) -> list[ExperimentEvent]:
        with self._lock:
            return [e for e in self._experiment if experiment is None or e.experiment == experiment]

    def latest_experiment_event(self) -> ExperimentEvent | None:
        with self._lock:
            return self._experiment[-1] if self._experiment else None
