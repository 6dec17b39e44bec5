"""The outcome report of an A/B experiment over a served tutor's event log: did the HyDE arm's learners fare better?

Per experiment period (a start, or a change of share, begins one: learners split at 30 % and at 50 % are two
samples that must not be pooled), per arm (the assigned arm, intention to treat; the treatment each turn
received as a secondary view): learners, turns, the 👍 rate among rated turns and the rating coverage, the
judge's relevance score, the grounded, rephrase, failed and abandoned rates, each with a 95 % interval
clustered by learner (:mod:`~hyde_tutor.experiment.abstats`), the hyde − raw differences with their intervals, a
sample-ratio-mismatch check, the learners still needed to detect ``mde``, cost per turn and latency.

Raw top scores are not compared: HyDE's fused scores and plain hybrid scores are on different scales.
"""

from __future__ import annotations

import math
import time
from collections import Counter, defaultdict
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field, replace
from typing import Any

from .events import EventLog, ExperimentEvent, TurnRecord
from .assignment import Experiment
from ..plugin.monitor import RetrievalRecord
from .abstats import (SRM_ALPHA, Estimate, clustered_mean, clustered_proportion, mean_difference,
                      newcombe_difference, required_total, srm_check)
from .always_valid import always_valid_readout, learner_counts
from .sequential import METHOD_NAME, PLANNED_LEARNERS, REFERENCES
from .treatment import CONTROL, TREATMENT, hyde_searches, received_treatment

__all__ = ("Period", "split_periods", "outcome_report", "hyde_searches", "PROPORTIONS", "METHOD")

DEFAULT_SHARE = 0.5

PROPORTIONS: dict[str, tuple[Callable[[TurnRecord], bool | None], str]] = {
    "thumbs_up": (lambda t: None if t.rating is None else t.rating == 1, "👍 among rated turns"),
    "rating_coverage": (lambda t: t.rating is not None, "turns the learner rated"),
    "grounded": (lambda t: t.grounded, "replies headed by a found entry"),
    "rephrase": (lambda t: t.rephrase, "next message asked the same again (lower is better)"),
    "failed": (lambda t: t.failed, "the model did not answer (lower is better)"),
    "abandoned": (lambda t: t.abandoned, "the learner closed the stream before the turn ended (lower is better)"),
}
"""Per-turn proportions: a turn's value (``None``: not in the denominator) and what it means."""

POWER_METRICS = ("thumbs_up", "grounded", "rephrase")

COMPARED = (*PROPORTIONS, "judged_relevance")
"""The outcomes that get a hyde − raw interval (each may come out marked as excluding 0)."""

METHOD = {
    "primary": f"thumbs_up: decide on it before looking; {len(COMPARED)} outcomes get a hyde − raw interval at 95 % "
               f"({', '.join(COMPARED)}), so where there is no effect at least one of them excludes 0 by chance in "
               f"about {1 - 0.95 ** len(COMPARED):.0%} of runs (1 − 0.95^{len(COMPARED)}, were they independent)",
    "intervals": "95 %, clustered by learner: Wilson on the effective sample n/deff for proportions (deff from "
                 "the ratio estimator's learner-clustered variance), mean ± 1.96·clustered SE for the judge score",
    "differences": "hyde − raw: Newcombe's hybrid score interval from the two clustered Wilson intervals; "
                   "for the judge score, d ± 1.96·√(se₁² + se₂²)",
    "srm": "χ² of enrolled learners per arm against the split the assignment makes: the period's share for the "
           "arms raw,hyde, an even split for any other arm list (HYDE_EXPERIMENT__ARMS); mismatch below "
           f"p = {SRM_ALPHA}",
    "power": "two-sided two-proportion z-test, α = 0.05, power 0.8, base rate = the raw arm's observed rate; the "
             "turns it needs in the outcome's denominator (rated turns for thumbs_up) times the design effect, "
             "divided by the denominator turns per ENROLLED learner (learners who never rate count): learners "
             "to enrol",
    "received": "by treatment received: hyde = HyDE shaped the results of one of the turn's searches (used_hyde); "
                "an attempt that fell back gave the raw treatment",
    "always_valid": f"hyde − raw also as an always-valid 95 % interval: {METHOD_NAME}, learner-clustered "
                    f"(se from the learner clusters, n = learners); {REFERENCES[0]}; {REFERENCES[1]}; {REFERENCES[2]}",
    "cost": "per turn: agent tokens in/out (hypothesis tokens are part of the agent's output), HyDE generation "
            "calls and tokens from the turn's retrievals, judge calls and tokens",
}


@dataclass(slots=True)
class Period:
    """A stretch of the experiment with one share: from a start (or share change) to the next change or stop."""

    index: int
    start: float | None
    end: float | None
    """``None``: still running (or, for ``start``, from the beginning of the log)."""
    hyde_share: float | None
    """``None``: no experiment event in the log; the split is then checked against 50 %."""
    turns: list[TurnRecord] = field(default_factory=list)

    def holds(self, timestamp: float) -> bool:
        return (self.start is None or timestamp >= self.start) and (self.end is None or timestamp < self.end)


def split_periods(events: Sequence[ExperimentEvent], turns: Iterable[TurnRecord]) -> tuple[list[Period], int]:
    """Cut the log into periods at each start, stop and share change, and place each turn in its period.

    A start (or a share event) while a period with the same share runs does not cut it. With no events
    at all the whole log is one period of unknown share.

    Returns:
        The periods (oldest first) and the number of turns outside every period (asked while stopped).
    """
    periods: list[Period] = []
    current: Period | None = None
    for event in sorted(events, key=lambda e: e.timestamp):
        runs = event.change != "stop" and event.enabled
        if current is not None and (not runs or event.hyde_share != current.hyde_share):
            current.end, current = event.timestamp, None
        if runs and current is None:
            current = Period(len(periods) + 1, event.timestamp, None, event.hyde_share)
            periods.append(current)
    if not events:
        periods = [Period(1, None, None, None)]
    outside = 0
    for turn in sorted(turns, key=lambda t: t.timestamp):
        home = next((p for p in periods if p.holds(turn.timestamp)), None)
        if home is None:
            outside += 1
        else:
            home.turns.append(turn)
    return periods, outside


def _percentiles(values: Sequence[float]) -> dict[str, float | None]:
    if not values:
        return {"p50": None, "p95": None}
    ordered = sorted(values)

    def at(q: float) -> float:  # linear interpolation, as numpy's default
        pos = (len(ordered) - 1) * q
        lo, hi = math.floor(pos), math.ceil(pos)
        return round(ordered[lo] + (ordered[hi] - ordered[lo]) * (pos - lo), 1)

    return {"p50": at(0.5), "p95": at(0.95)}


def _proportion(turns: Sequence[TurnRecord], value: Callable[[TurnRecord], bool | None]) -> Estimate:
    return clustered_proportion(*learner_counts(turns, value))


def _judged(turns: Sequence[TurnRecord]) -> tuple[Estimate, float | None]:
    scores: dict[str, list[float]] = defaultdict(list)
    for t in turns:
        if t.judge_score is not None:
            scores[t.subject].append(float(t.judge_score))
    return clustered_mean(list(scores.values()), bounds=(0.0, 1.0))


def _cost(turns: Sequence[TurnRecord], retrievals: dict[str, list[RetrievalRecord]]) -> dict[str, float]:
    n = len(turns)
    recs = [r for t in turns for r in retrievals.get(t.turn_id, ())]
    sums = {
        "agent_requests": sum(t.agent_requests for t in turns),
        "agent_tokens_in": sum(t.agent_tokens_in for t in turns),
        "agent_tokens_out": sum(t.agent_tokens_out for t in turns),
        "hypothesis_tokens": sum(t.hypothesis_tokens for t in turns),
        "retrievals": len(recs),
        "hyde_calls": sum(r.llm_calls for r in recs),
        "hyde_tokens": sum(r.tokens_in + r.tokens_out for r in recs),
        "judge_calls": sum(t.judge_calls for t in turns),
        "judge_tokens": sum(t.judge_tokens for t in turns),
    }
    sums["total_tokens"] = (sums["agent_tokens_in"] + sums["agent_tokens_out"] + sums["hyde_tokens"]
                            + sums["judge_tokens"])
    return {k: round(v / n, 3) for k, v in sums.items()} if n else {k: 0.0 for k in sums}


def _arm_summary(turns: Sequence[TurnRecord], retrievals: dict[str, list[RetrievalRecord]]) -> dict[str, Any]:
    judged, _ = _judged(turns)
    return {
        "learners": len({t.subject for t in turns}),
        "turns": len(turns),
        **{name: _proportion(turns, fn).as_dict() for name, (fn, _) in PROPORTIONS.items()},
        "judged_relevance": judged.as_dict(),
        "latency_ms": {
            "turn": _percentiles([t.seconds * 1000 for t in turns]),
            "first_token": _percentiles([t.first_token_s * 1000 for t in turns if t.first_token_s is not None]),
            "retrieval": _percentiles([r.total_ms for t in turns for r in retrievals.get(t.turn_id, ())]),
        },
        "cost_per_turn": _cost(turns, retrievals),
    }


def _differences(a: Sequence[TurnRecord], b: Sequence[TurnRecord]) -> dict[str, dict[str, Any]]:
    """``a - b`` (hyde − raw) for every outcome with an interval; ``excludes_zero`` marks a clear difference."""
    out: dict[str, dict[str, Any]] = {}
    for name, (fn, _) in PROPORTIONS.items():
        diff = newcombe_difference(_proportion(a, fn), _proportion(b, fn))
        if diff is not None:
            out[name] = {"value": diff[0], "low": diff[1], "high": diff[2]}
    (ja, se_a), (jb, se_b) = _judged(a), _judged(b)
    if ja.value is not None and jb.value is not None:
        d, low, high = mean_difference(ja.value, se_a, jb.value, se_b)
        out["judged_relevance"] = {"value": d, "low": low, "high": high}
    for row in out.values():
        row["excludes_zero"] = row["low"] is not None and (row["low"] > 0 or row["high"] < 0)
    return out


def _view(groups: dict[str, list[TurnRecord]], retrievals: dict[str, list[RetrievalRecord]]) -> dict[str, Any]:
    arms = {arm: _arm_summary(ts, retrievals) for arm, ts in sorted(groups.items())}
    both = groups.get(TREATMENT) and groups.get(CONTROL)
    return {"arms": arms, "differences": _differences(groups[TREATMENT], groups[CONTROL]) if both else {}}


def _power(turns: Sequence[TurnRecord], control: Sequence[TurnRecord], share: float, mde: float) -> dict[str, Any]:
    """Enrolled learners needed per outcome. The test needs ``required_total`` turns in the outcome's denominator
    (rated turns for the 👍 rate), inflated by the design effect; an enrolled learner brings, on average, the
    outcome's denominator turns divided by the enrolled learners (those who never rate bring none), so the
    learners to enrol are ``turns needed · deff · enrolled / denominator turns``."""
    enrolled = len({t.subject for t in turns})
    out: dict[str, Any] = {"mde": mde, "alpha": 0.05, "power": 0.8, "share": share, "enrolled": enrolled,
                           "metrics": {}}
    if not 0 < share < 1:
        return out | {"note": "no split to power (share 0 or 1)"}
    for name in POWER_METRICS:
        fn = PROPORTIONS[name][0]
        pooled, base = _proportion(turns, fn), _proportion(control, fn)
        if pooled.value is None or base.value is None or not pooled.learners:
            continue
        turns_needed = required_total(base.value, mde, share) * pooled.deff
        needed = math.ceil(turns_needed * enrolled / pooled.n)
        out["metrics"][name] = {"base_rate": base.value, "turns_per_learner": round(pooled.n / pooled.learners, 3),
                                "contributing_share": round(pooled.learners / enrolled, 4),
                                "deff": round(pooled.deff, 4), "turns_needed": math.ceil(turns_needed),
                                "learners_needed": needed, "more_learners_needed": max(0, needed - enrolled)}
    return out


def _period_section(period: Period, retrievals: dict[str, list[RetrievalRecord]], mde: float,
                    configured: Experiment) -> dict[str, Any]:
    turns = period.turns
    assigned: dict[str, list[TurnRecord]] = defaultdict(list)
    received: dict[str, list[TurnRecord]] = defaultdict(list)
    for t in turns:
        assigned[t.arm].append(t)
        received[received_treatment(t, retrievals)].append(t)
    share = DEFAULT_SHARE if period.hyde_share is None else period.hyde_share
    shares = replace(configured, hyde_share=share).shares()  # the split the assignment made, whatever the arms
    enrolled = {arm: len({t.subject for t in ts}) for arm, ts in assigned.items() if arm != "unassigned"}
    compared = [t for t in turns if t.arm in (TREATMENT, CONTROL)]
    pair = shares.get(TREATMENT, 0.0) + shares.get(CONTROL, 0.0)
    return {
        "period": {"index": period.index, "start": period.start, "end": period.end, "hyde_share": period.hyde_share,
                   "share_checked": share, "share_source": "assumed (no experiment event in the log)"
                   if period.hyde_share is None else "experiment events",
                   "arms": list(configured.arms), "split": {a: round(v, 4) for a, v in shares.items()}},
        "learners": len({t.subject for t in turns}),
        "turns": len(turns),
        "by_assigned_arm": _view(assigned, retrievals),
        "by_treatment_received": _view(received, retrievals),
        "hyde_searches": {arm: hyde_searches(ts, retrievals) for arm, ts in sorted(assigned.items())},
        "srm": srm_check(enrolled, shares),
        "power": _power(compared, assigned.get(CONTROL, []), shares.get(TREATMENT, 0.0) / pair if pair else 0.0, mde),
    }


def _experiment_name(log: EventLog, experiment: str | None) -> str | None:
    """The one asked for, else the experiment of the latest event, else the one most turns ran under."""
    if experiment is not None:
        return experiment
    events = log.experiment_events()
    if events:
        return max(events, key=lambda e: e.timestamp).experiment
    named = Counter(t.experiment for t in log.turns() if t.experiment is not None)
    return named.most_common(1)[0][0] if named else None


def outcome_report(log: EventLog, experiment: str | None = None, *, mde: float = 0.05,
                   arms: Sequence[str] | None = None,
                   planned_learners: int = PLANNED_LEARNERS) -> dict[str, Any]:
    """The A/B outcome report of one experiment in ``log``, as a JSON-ready dict.

    Args:
        log: the event log (the server's SQL one, or a :class:`~hyde_tutor.experiment.events.MemoryEventLog`).
        experiment: its name; ``None``: the experiment of the latest experiment event (else of most turns).
        mde: the absolute difference of proportions the power figures are for (0.05 = 5 points).
        arms: the experiment's arms as configured (``HYDE_EXPERIMENT__ARMS``; the events carry the share only):
            the SRM check tests the split :meth:`~hyde_tutor.experiment.assignment.Experiment.arm` made with them
            (``raw,hyde`` by the share, any other list evenly). ``None``: ``raw,hyde``.
        planned_learners: the learners the always-valid intervals' mixture is tuned for (set before the
            experiment; any value keeps them valid).

    Returns:
        ``{"experiment", "generated_at", "mde", "method", "turns", "learners", "turns_outside_periods",
        "periods": [...], "warnings": [...]}``; each period holds ``by_assigned_arm`` and
        ``by_treatment_received`` (``arms`` and hyde − raw ``differences``), ``hyde_searches`` (per assigned
        arm: searches that attempted HyDE, that it shaped, and why the others fell back), ``srm``, ``power``
        and ``always_valid`` (the differences as confidence sequences and the ``decision``); the report's
        ``decision`` is the latest period's.
    """
    if not 0 < mde < 1:
        raise ValueError(f"mde is an absolute difference of proportions within 0..1, got {mde}")
    configured = Experiment(arms=tuple(arms)) if arms is not None else Experiment()
    name = _experiment_name(log, experiment)
    turns = log.turns(name) if name is not None else log.turns()
    events = log.experiment_events(name) if name is not None else []
    retrievals: dict[str, list[RetrievalRecord]] = defaultdict(list)
    for turn_id, record in log.retrievals():
        if turn_id is not None:
            retrievals[turn_id].append(record)
    periods, outside = split_periods(events, turns)
    sections = [_period_section(p, retrievals, mde, configured) for p in periods]
    for period, section in zip(periods, sections, strict=True):
        section["always_valid"] = always_valid_readout([t for t in period.turns if t.arm == TREATMENT],
                                                       [t for t in period.turns if t.arm == CONTROL], PROPORTIONS,
                                                       planned=planned_learners,
                                                       srm_mismatch=section["srm"]["mismatch"])
    warnings = []
    for section in sections:
        srm = section["srm"]
        if srm["mismatch"]:
            warnings.append(f"SAMPLE RATIO MISMATCH in period {section['period']['index']}: learners per arm "
                            f"{srm['observed']} against expected {srm['expected']} (p = {srm['p_value']:.2g} < "
                            f"{SRM_ALPHA}). The split is broken (assignment, logging or a bot): do not read "
                            "this period's comparison until the cause is found.")
    if len(periods) > 1:
        warnings.append(f"{len(periods)} periods with different shares: compare arms within a period, not pooled.")
    if outside:
        warnings.append(f"{outside} turns fall outside every period (asked while the experiment was stopped).")
    return {"experiment": name, "generated_at": time.time(), "mde": mde, "method": METHOD, "turns": len(turns),
            "learners": len({t.subject for t in turns}), "turns_outside_periods": outside, "periods": sections,
            "warnings": warnings, "decision": sections[-1]["always_valid"]["decision"] | {
                "period": sections[-1]["period"]["index"]} if sections else None}
