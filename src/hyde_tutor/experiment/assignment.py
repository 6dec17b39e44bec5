"""A/B assignment of subjects (users or sessions) to retrieval arms.

Arms: ``raw`` (plain hybrid), ``hyde`` (read-time HyDE), ``questions`` (write-time questions
channel) and ``hyde+questions``. The classic two-arm ``raw,hyde`` split uses ``hyde_share``;
any other arm list splits evenly.

Assignment is a pure function of (experiment name, salt, subject id): deterministic and sticky,
with no state to store. Deciding one retrieval: an enrolled subject gets its arm, and a caller's
explicit ``use_hyde`` (a model's tool argument) is only recorded beside it, unless ``explicit_wins``
is set for debugging; outside an experiment, explicit ``use_hyde`` > the configured default.
A subject with no id is not enrolled: it gets the configured default (arm ``unassigned``).
"""

from __future__ import annotations

import asyncio

import hashlib
import os
import threading
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Literal

import warnings

from pydantic import ValidationError

from ..config import Settings

Arm = Literal["raw", "hyde", "questions", "hyde+questions", "unassigned"]
ARMS: tuple[str, ...] = ("raw", "hyde", "questions", "hyde+questions")
DecisionReason = Literal["explicit", "experiment", "default", "experiment_off"]


@dataclass(frozen=True, slots=True)
class Experiment:
    """Subjects split over ``arms``; with the default ``("raw", "hyde")``, ``hyde_share`` of them get HyDE."""

    name: str = "hyde-vs-raw"
    hyde_share: float = 0.5
    salt: str = ""
    enabled: bool = True
    arms: tuple[str, ...] = ("raw", "hyde")
    explicit_wins: bool = False
    """Debugging only: a caller's explicit ``use_hyde`` beats an enrolled subject's arm (the override is
    recorded). Off, the arm decides and the request is only recorded, so the arms stay comparable."""

    def __post_init__(self) -> None:
        if not 0.0 <= self.hyde_share <= 1.0:
            raise ValueError(f"hyde_share must be within 0..1, got {self.hyde_share}")
        unknown = [a for a in self.arms if a not in ARMS]
        if unknown or not self.arms or len(set(self.arms)) != len(self.arms):
            raise ValueError(f"experiment arms must be distinct names from {', '.join(ARMS)}; got {list(self.arms)}")

    def bucket(self, subject_id: str) -> float:
        """Uniform position in [0, 1) for this subject in this experiment."""
        key = f"{self.name}\x00{self.salt}\x00{subject_id}".encode("utf-8", "surrogatepass")  # any str has an arm
        digest = hashlib.sha256(key).digest()
        return int.from_bytes(digest[:8], "big") / 2**64

    def arm(self, subject_id: str | None) -> Arm:
        if not self.enabled or not subject_id:
            return "unassigned"
        position = self.bucket(subject_id)
        if self.arms == ("raw", "hyde"):
            return "hyde" if position < self.hyde_share else "raw"
        return self.arms[min(int(position * len(self.arms)), len(self.arms) - 1)]  # type: ignore[return-value]

    def shares(self) -> dict[str, float]:
        """The share of enrolled subjects each arm gets, as :meth:`arm` assigns them: ``hyde_share`` for the
        two-arm ``("raw", "hyde")`` list only; any other list (``hyde,raw`` too) splits evenly."""
        if self.arms == ("raw", "hyde"):
            return {"raw": 1.0 - self.hyde_share, "hyde": self.hyde_share}
        return {arm: 1.0 / len(self.arms) for arm in self.arms}


@dataclass(frozen=True, slots=True)
class Decision:
    """Whether one retrieval uses HyDE, the subject's arm, who decided, and what the caller asked for."""

    use_hyde: bool
    """The treatment given: HyDE attempted or not (a HyDE fallback is still this treatment)."""
    arm: Arm
    reason: DecisionReason
    """Who decided: ``experiment`` (the arm), ``explicit`` (the caller), ``default`` or ``experiment_off``."""
    experiment: str | None = None
    use_questions: bool | None = None  # None: the retriever's default (questions.enabled)
    requested: bool | None = None
    """The caller's ``use_hyde`` (a model's tool argument), recorded whether or not it won."""
    overridden: bool = False
    """The caller's request won against the subject's arm (only with ``explicit_wins``)."""


def arm_uses_hyde(arm: str) -> bool:
    """The treatment an arm gives: HyDE for ``hyde`` and ``hyde+questions``."""
    return arm.startswith("hyde")


def decide(use_hyde: bool | None, experiment: Experiment | None, subject_id: str | None, default: bool) -> Decision:
    """Enrolled subject: the arm decides (the caller's ``use_hyde`` is recorded; it wins only with
    ``explicit_wins``). Not enrolled: explicit ``use_hyde`` > ``default``.

    An explicit ``use_hyde`` decides HyDE only; the questions channel still follows the arm.
    """
    name = experiment.name if experiment else None
    arm: Arm = experiment.arm(subject_id) if experiment else "unassigned"
    questions = None if arm == "unassigned" else "questions" in arm
    requested = None if use_hyde is None else bool(use_hyde)
    if arm != "unassigned":
        by_arm = arm_uses_hyde(arm)
        if requested is not None and experiment is not None and experiment.explicit_wins:
            return Decision(requested, arm, "explicit", name, questions, requested, requested != by_arm)
        return Decision(by_arm, arm, "experiment", name, questions, requested)
    if requested is not None:
        return Decision(requested, arm, "explicit", name, questions, requested)
    reason: DecisionReason = "experiment_off" if experiment is not None and not experiment.enabled else "default"
    return Decision(default, arm, reason, name)


def experiment_from_settings(settings: Settings) -> Experiment:
    e = settings.experiment
    arms = tuple(a.strip() for a in e.arms.split(",") if a.strip())
    return Experiment(e.name, e.hyde_share, e.salt, e.enabled, arms, e.explicit_wins)


class ReloadableExperiment:
    """Re-reads settings (env and ``.env``) when ``.env`` changes or ``reload()`` is called.

    Turning the experiment off is then a one-line edit of ``.env`` (``HYDE_EXPERIMENT__ENABLED=false``),
    no redeploy. The file is checked at most once per ``check_every_s``.
    """

    def __init__(self, env_file: str | os.PathLike[str] = ".env", check_every_s: float = 1.0) -> None:
        self.env_file = Path(env_file)
        self.check_every_s = check_every_s
        self._lock = threading.Lock()
        self._mtime = self._stat()
        self._checked = time.monotonic()
        self._current = experiment_from_settings(Settings(_env_file=self.env_file))  # type: ignore[call-arg]
        self.last_error: str | None = None
        """The bad setting found at the last reload, if any (the running experiment was kept)."""

    def _stat(self) -> float | None:
        try:
            return self.env_file.stat().st_mtime
        except OSError:
            return None

    def reload(self) -> Experiment:
        """Re-read the settings. A bad value keeps the last good experiment (a tool call must never fail
        because someone mistyped ``.env``) and is reported once per change of the file, as a warning."""
        with self._lock:
            self._mtime = self._stat()
            try:
                self._current = experiment_from_settings(Settings(_env_file=self.env_file))  # type: ignore[call-arg]
                self.last_error = None
            except (ValidationError, ValueError, OSError) as exc:
                message = _one_line(exc)
                if message != self.last_error:
                    self.last_error = message
                    warnings.warn(f"{self.env_file}: {message}; keeping the running experiment "
                                  f"({self._current.name}, arms {','.join(self._current.arms)})",
                                  ExperimentConfigWarning, stacklevel=2)
            return self._current

    async def acurrent(self) -> Experiment:
        """:meth:`current` for async code: when a check is due, the ``.env`` stat (and a reload) run on a
        worker thread, so a tool call never does file I/O on the event loop."""
        if time.monotonic() - self._checked < self.check_every_s:
            return self._current
        return await asyncio.to_thread(self.current)

    def current(self) -> Experiment:
        now = time.monotonic()
        if now - self._checked >= self.check_every_s:
            self._checked = now
            if self._stat() != self._mtime:
                return self.reload()
        return self._current


class ExperimentConfigWarning(UserWarning):
    """A changed ``.env`` held a bad experiment setting; the last good experiment keeps running."""


def _one_line(exc: Exception) -> str:
    if isinstance(exc, ValidationError):
        return "; ".join(f"{'.'.join(str(p) for p in err['loc'])}: {err['msg']}" for err in exc.errors())
    return str(exc)
