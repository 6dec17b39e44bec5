"""A/B assignment of subjects (users or sessions) to retrieval arms.

Arms: ``raw`` (plain hybrid), ``hyde`` (read-time HyDE), ``questions`` (write-time questions
channel) and ``hyde+questions``. The classic two-arm ``raw,hyde`` split uses ``hyde_share``;
any other arm list splits evenly.

Assignment is a pure function of (experiment name, salt, subject id): deterministic and sticky,
with no state to store. Precedence when deciding one retrieval:
explicit per-call ``use_hyde`` > experiment arm > the configured default.
A subject with no id is not enrolled: it gets the configured default (arm ``unassigned``).
"""

from __future__ import annotations

import hashlib
import os
import threading
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Literal

from .config import Settings

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

    def __post_init__(self) -> None:
        if not 0.0 <= self.hyde_share <= 1.0:
            raise ValueError(f"hyde_share must be within 0..1, got {self.hyde_share}")
        unknown = [a for a in self.arms if a not in ARMS]
        if unknown or not self.arms or len(set(self.arms)) != len(self.arms):
            raise ValueError(f"experiment arms must be distinct names from {', '.join(ARMS)}; got {list(self.arms)}")

    def bucket(self, subject_id: str) -> float:
        """Uniform position in [0, 1) for this subject in this experiment."""
        digest = hashlib.sha256(f"{self.name}\x00{self.salt}\x00{subject_id}".encode()).digest()
        return int.from_bytes(digest[:8], "big") / 2**64

    def arm(self, subject_id: str | None) -> Arm:
        if not self.enabled or not subject_id:
            return "unassigned"
        position = self.bucket(subject_id)
        if self.arms == ("raw", "hyde"):
            return "hyde" if position < self.hyde_share else "raw"
        return self.arms[min(int(position * len(self.arms)), len(self.arms) - 1)]  # type: ignore[return-value]


@dataclass(frozen=True, slots=True)
class Decision:
    """Whether one retrieval uses HyDE, the subject's arm, and why."""

    use_hyde: bool
    arm: Arm
    reason: DecisionReason
    experiment: str | None = None
    use_questions: bool | None = None  # None: the retriever's default (questions.enabled)


def decide(use_hyde: bool | None, experiment: Experiment | None, subject_id: str | None, default: bool) -> Decision:
    """Apply the precedence rule: explicit > experiment arm > default.

    An explicit ``use_hyde`` decides HyDE only; the questions channel still follows the arm.
    """
    name = experiment.name if experiment else None
    arm: Arm = experiment.arm(subject_id) if experiment else "unassigned"
    questions = None if arm == "unassigned" else "questions" in arm
    if use_hyde is not None:
        return Decision(bool(use_hyde), arm, "explicit", name, questions)
    if arm != "unassigned":
        return Decision(arm.startswith("hyde"), arm, "experiment", name, questions)
    reason: DecisionReason = "experiment_off" if experiment is not None and not experiment.enabled else "default"
    return Decision(default, arm, reason, name)


def experiment_from_settings(settings: Settings) -> Experiment:
    e = settings.experiment
    arms = tuple(a.strip() for a in e.arms.split(",") if a.strip())
    return Experiment(e.name, e.hyde_share, e.salt, e.enabled, arms)


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
        self._current = experiment_from_settings(Settings())

    def _stat(self) -> float | None:
        try:
            return self.env_file.stat().st_mtime
        except OSError:
            return None

    def reload(self) -> Experiment:
        with self._lock:
            self._current = experiment_from_settings(Settings())
            self._mtime = self._stat()
            return self._current

    def current(self) -> Experiment:
        now = time.monotonic()
        if now - self._checked >= self.check_every_s:
            self._checked = now
            if self._stat() != self._mtime:
                return self.reload()
        return self._current
