"""The always-valid readout of an A/B period: each outcome's hyde − raw difference with a confidence sequence
(:mod:`~hyde_tutor.experiment.sequential`), and one decision line from the primary outcome.

Read it while the experiment runs: it may be looked at after every learner and acted on the first time it
excludes 0. The fixed-horizon intervals beside it are for one look, at the planned end (the learners the power
figures say are needed).
"""

from __future__ import annotations

from collections import Counter, defaultdict
from collections.abc import Callable, Mapping, Sequence
from typing import Any

from .events import TurnRecord
from .sequential import (ALPHA, METHOD_NAME, MIN_LEARNERS, PLANNED_LEARNERS, REFERENCES, SequentialDifference,
                         mixture_precision, sequential_means, sequential_proportions, verdict)

__all__ = ("always_valid_readout", "decision_text", "learner_counts", "LOWER_IS_BETTER", "PRIMARY")

PRIMARY = "thumbs_up"
LOWER_IS_BETTER = frozenset({"rephrase", "failed"})

READ_WHILE_RUNNING = ("read the always-valid interval while the experiment runs (any number of looks, stop the "
                      "first time it excludes 0); read the fixed 95 % interval once, at the planned end (the "
                      "learners needed below)")


def learner_counts(turns: Sequence[TurnRecord],
                   value: Callable[[TurnRecord], bool | None]) -> tuple[list[int], list[int]]:
    """Per learner (in order of first turn): successes and turns in the denominator (``value`` None: left out)."""
    hits: dict[str, int] = Counter()
    trials: dict[str, int] = Counter()
    for t in turns:
        v = value(t)
        if v is not None:
            trials[t.subject] += 1
            hits[t.subject] += bool(v)
    return [hits[s] for s in trials], list(trials.values())


def _scores(turns: Sequence[TurnRecord]) -> list[list[float]]:
    scores: dict[str, list[float]] = defaultdict(list)
    for t in turns:
        if t.judge_score is not None:
            scores[t.subject].append(float(t.judge_score))
    return list(scores.values())


def decision_text(diff: SequentialDifference | None, learners: int, metric: str = PRIMARY,
                  alpha: float = ALPHA) -> str:
    """``HyDE better / worse / no difference shown yet, always-valid, after N learners`` (and the interval)."""
    said = verdict(diff, metric in LOWER_IS_BETTER)
    head = f"HyDE {said}" if said != "no difference shown yet" else said
    if diff is None:
        return f"{head} (always-valid; too few learners per arm for an interval), after {learners} learners"
    return (f"{head} (always-valid {(1 - alpha) * 100:.0f} %, {metric}: hyde − raw {diff.value:+.3f} "
            f"[{diff.low:+.3f}, {diff.high:+.3f}]), after {learners} learners")


def always_valid_readout(treatment: Sequence[TurnRecord], control: Sequence[TurnRecord],
                         proportions: Mapping[str, tuple[Callable[[TurnRecord], bool | None], str]], *,
                         planned: int = PLANNED_LEARNERS, alpha: float = ALPHA, primary: str = PRIMARY,
                         srm_mismatch: bool = False) -> dict[str, Any]:
    """The hyde − raw differences (``treatment`` − ``control``) with always-valid intervals, and the decision.

    Args:
        treatment: the HyDE arm's turns (assigned arm).
        control: the raw arm's turns.
        proportions: the per-turn proportions (name → (turn → value or ``None``, description)).
        planned: the learners the mixture is tuned for (fixed before the experiment).
        alpha: 1 - the time-uniform coverage.
        primary: the outcome the decision is read from; the others are marked secondary.
        srm_mismatch: the period's split is broken: the decision says not to read it.

    Returns:
        ``{"method", "references", "alpha", "planned_learners", "rho", "min_learners_per_arm", "read",
        "learners", "differences": {name: {..., "role"}}, "decision": {"metric", "verdict", "text"}}``.
    """
    diffs: dict[str, SequentialDifference | None] = {}
    for name, (fn, _) in proportions.items():
        (sa, ta), (sb, tb) = learner_counts(treatment, fn), learner_counts(control, fn)
        diffs[name] = sequential_proportions(sa, ta, sb, tb, alpha=alpha, planned=planned)
    diffs["judged_relevance"] = sequential_means(_scores(treatment), _scores(control), alpha=alpha, planned=planned)
    learners = len({t.subject for t in treatment}) + len({t.subject for t in control})
    primary_diff = diffs.get(primary)
    said = verdict(primary_diff, primary in LOWER_IS_BETTER)
    text = decision_text(primary_diff, learners, primary, alpha)
    if srm_mismatch:
        text = f"DO NOT READ (sample ratio mismatch: the split is broken): {text}"
    return {
        "method": METHOD_NAME, "references": list(REFERENCES), "alpha": alpha, "planned_learners": planned,
        "rho": round(mixture_precision(planned, alpha), 4), "min_learners_per_arm": MIN_LEARNERS,
        "read": READ_WHILE_RUNNING, "learners": learners,
        "differences": {name: d.as_dict() | {"role": "primary" if name == primary else "secondary"}
                        for name, d in diffs.items() if d is not None},
        "decision": {"metric": primary, "verdict": said, "learners": learners, "srm_mismatch": srm_mismatch,
                     "text": text},
    }
