"""A/B reports.

* Over a served tutor's event log (:func:`outcome_report`, :func:`format_outcome_report`; in
  :mod:`~hyde_tutor.experiment.outcomes`): did the learners of the HyDE arm fare better (ratings, judged relevance,
  grounded, rephrase and failed rates, with clustered intervals, an SRM check and power), per experiment period.
* Over the monitor's retrieval JSONL (:func:`arm_rows`, :func:`differences`, :func:`format_report`): the
  retrieval-only view (latency, fallbacks, result counts, HyDE cost per retrieval), a PNG chart. Its intervals:
  percentile bootstrap, 2,000 resamples of each arm independently, 95 %, fixed seed. Raw top scores are not
  compared: HyDE's fused scores and plain hybrid scores are on different scales.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

import numpy as np

from .assignment import ARMS as EXPERIMENT_ARMS
from .assignment import arm_uses_hyde
from .outcome_text import format_outcome_report
from .outcomes import outcome_report

__all__ = ("ArmRow", "Difference", "arm_rows", "differences", "format_report", "plot", "bootstrap_mean",
           "bootstrap_diff", "group_of", "outcome_report", "format_outcome_report")

ARMS = ("hyde", "raw")


@dataclass(frozen=True, slots=True)
class ArmRow:
    arm: str
    count: int
    p50_ms: float
    p95_ms: float
    mean_ms: float
    fallback_rate: float
    mean_results: float
    asked_otherwise_rate: float = 0.0
    """Share of retrievals whose caller asked for the other treatment than this arm's (``requested_hyde``)."""
    override_rate: float = 0.0
    """Share of retrievals where the caller's request won against the arm (``explicit_wins``)."""
    llm_calls: tuple[float, float, float] = (0.0, 0.0, 0.0)
    """LLM calls per retrieval: mean and its 95 % bootstrap interval."""
    tokens: tuple[float, float, float] = (0.0, 0.0, 0.0)
    """LLM tokens (input + output) per retrieval: mean and its 95 % bootstrap interval."""
    skipped_rate: float = 0.0
    """Share of retrievals where the cascade made no LLM call (``skipped: confident``)."""


@dataclass(frozen=True, slots=True)
class Difference:
    metric: str
    hyde_minus_raw: float
    ci_low: float
    ci_high: float


Grouping = Literal["assigned", "received"]


def group_of(rec: dict[str, Any], by: Grouping = "assigned") -> str:
    """``assigned``: the subject's arm (intention to treat). ``received``: the treatment actually given
    (``hyde`` when HyDE shaped the results, ``used_hyde``; an attempt that fell back gave ``raw``)."""
    if by == "received":  # the questions channel is a treatment too: keep it apart from hyde vs raw
        return ("hyde" if rec.get("used_hyde") else "raw") + ("+questions" if rec.get("used_questions") else "")
    return str(rec.get("arm", "unassigned"))


def _total(rec: dict[str, Any]) -> float:
    return float((rec.get("stages_ms") or {}).get("total_ms", 0.0))


def _asked_otherwise(rec: dict[str, Any]) -> bool:
    requested, arm = rec.get("requested_hyde"), str(rec.get("arm", "unassigned"))
    return requested is not None and arm in EXPERIMENT_ARMS and requested != arm_uses_hyde(arm)


def arm_rows(records: Sequence[dict[str, Any]], by: Grouping = "assigned") -> list[ArmRow]:
    rows = []
    for arm in sorted({group_of(r, by) for r in records}):
        recs = [r for r in records if group_of(r, by) == arm]
        totals = np.array([_total(r) for r in recs])
        rows.append(ArmRow(
            arm, len(recs), float(np.percentile(totals, 50)), float(np.percentile(totals, 95)), float(totals.mean()),
            sum(1 for r in recs if r.get("use_hyde") and r.get("fallback_reason")) / len(recs),
            float(np.mean([r.get("results", 0) for r in recs])),
            sum(map(_asked_otherwise, recs)) / len(recs), sum(1 for r in recs if r.get("overridden")) / len(recs),
            bootstrap_mean([float(r.get("llm_calls", 0)) for r in recs]),
            bootstrap_mean([float(r.get("tokens_in", 0)) + float(r.get("tokens_out", 0)) for r in recs]),
            sum(1 for r in recs if r.get("skipped")) / len(recs),
        ))
    return rows


def bootstrap_mean(values: Sequence[float], n: int = 2000, seed: int = 0) -> tuple[float, float, float]:
    """Mean of ``values`` with a 95 % percentile-bootstrap interval."""
    x = np.asarray(values, dtype=float)
    means = np.random.default_rng(seed).choice(x, (n, len(x))).mean(axis=1)
    low, high = np.percentile(means, [2.5, 97.5])
    return float(x.mean()), float(low), float(high)


def bootstrap_diff(a: Sequence[float], b: Sequence[float], n: int = 2000, seed: int = 0) -> tuple[float, float, float]:
    """Mean(a) - mean(b) with a 95 % percentile-bootstrap interval."""
    x, y = np.asarray(a, dtype=float), np.asarray(b, dtype=float)
    rng = np.random.default_rng(seed)
    diffs = rng.choice(x, (n, len(x))).mean(axis=1) - rng.choice(y, (n, len(y))).mean(axis=1)
    low, high = np.percentile(diffs, [2.5, 97.5])
    return float(x.mean() - y.mean()), float(low), float(high)


def differences(records: Sequence[dict[str, Any]], by: Grouping = "assigned") -> list[Difference]:
    by_arm = {arm: [r for r in records if group_of(r, by) == arm] for arm in ARMS}
    if not all(by_arm.values()):
        return []
    # no top-score difference: HyDE's fused scores and raw hybrid scores are on different scales
    signals = {
        "total_ms": _total,
        "results": lambda r: float(r.get("results", 0)),
        "llm_calls": lambda r: float(r.get("llm_calls", 0)),
    }
    out = []
    for name, fn in signals.items():
        a = [v for v in map(fn, by_arm["hyde"]) if not np.isnan(v)]
        b = [v for v in map(fn, by_arm["raw"]) if not np.isnan(v)]
        if a and b:
            out.append(Difference(name, *bootstrap_diff(a, b)))
    return out


def format_report(rows: Sequence[ArmRow], diffs: Sequence[Difference], title: str = "by assigned arm") -> str:
    head = (f"{'arm':<12}{'n':>7}{'p50 ms':>10}{'p95 ms':>10}{'mean ms':>10}{'fallback':>10}{'results':>9}"
            f"{'asked other':>13}{'overridden':>12}")
    lines = [title, head, "-" * len(head)]
    for r in rows:
        lines.append(f"{r.arm:<12}{r.count:>7}{r.p50_ms:>10.1f}{r.p95_ms:>10.1f}{r.mean_ms:>10.1f}"
                     f"{r.fallback_rate:>10.1%}{r.mean_results:>9.2f}"
                     f"{r.asked_otherwise_rate:>13.1%}{r.override_rate:>12.1%}")
    lines += ["", "cost per retrieval (mean, 95% bootstrap CI): LLM calls | tokens in+out | skipped by the cascade"]
    lines += [f"  {r.arm:<12}{r.llm_calls[0]:>6.2f} [{r.llm_calls[1]:.2f}, {r.llm_calls[2]:.2f}] | "
              f"{r.tokens[0]:>7.0f} [{r.tokens[1]:.0f}, {r.tokens[2]:.0f}] | {r.skipped_rate:.1%}" for r in rows]
    if diffs:
        lines += ["", "hyde - raw (mean difference, 95% bootstrap CI, 2000 resamples):"]
        lines += [f"  {d.metric:<10} {d.hyde_minus_raw:+.4f}  [{d.ci_low:+.4f}, {d.ci_high:+.4f}]" for d in diffs]
    else:
        lines += ["", "(need records in both the hyde and raw arms for a comparison)"]
    return "\n".join(lines)


def plot(rows: Sequence[ArmRow], out: Path) -> Path:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, (ax1, ax2) = plt.subplots(1, 2, figsize=(9, 3.5))
    names = [r.arm for r in rows]
    x = np.arange(len(rows))
    ax1.bar(x - 0.2, [r.p50_ms for r in rows], 0.4, label="p50")
    ax1.bar(x + 0.2, [r.p95_ms for r in rows], 0.4, label="p95")
    ax1.set_xticks(x, names)
    ax1.set_ylabel("ms per retrieval")
    ax1.set_title("Latency by arm")
    ax1.legend()
    ax2.bar(x, [r.fallback_rate * 100 for r in rows], 0.5, color="tab:red")
    ax2.set_xticks(x, names)
    ax2.set_ylabel("% of HyDE retrievals")
    ax2.set_title("Fallback rate")
    fig.tight_layout()
    out.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(out, dpi=100)
    plt.close(fig)
    return out
