"""Charts for evaluation reports, drawn on matplotlib's Agg canvas.

Figures are built without ``pyplot``: no display is needed and the process-wide backend (a notebook's
inline backend, say) is left alone.
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any

import numpy as np

from ..errors import HydeTutorError

EVAL_METRICS = ("ndcg@10", "recall@5")
_GROUP_ORDER = ("all", "named", "unnamed")


def _as_report(report: Mapping[str, Any]) -> dict[str, Any]:
    """Accept ``report_json(...)``'s dict or ``evaluate_arms(...)``'s ``{arm: ArmResult}``."""
    if "arms" in report:
        return {"arms": dict(report["arms"]), "groups": dict(report.get("groups") or {})}
    arms, groups = {}, {}
    for name, result in report.items():
        if not hasattr(result, "metrics"):
            raise HydeTutorError("plot_eval needs an eval report: report_json(...) or evaluate_arms(...)'s result.")
        arms[name] = dict(result.metrics)
        groups[name] = {g: dict(m) for g, m in result.by_group.items()}
    return {"arms": arms, "groups": groups}


def eval_figure(
    report: Mapping[str, Any],
    metrics: tuple[str, ...] = EVAL_METRICS,
    title: str | None = None,
    group_counts: Mapping[str, int] | None = None,
) -> Any:
    """A matplotlib Figure: one panel per metric, one bar group per arm (overall + one bar per query group)."""
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure

    data = _as_report(report)
    arms = list(data["arms"])
    if not arms:
        raise HydeTutorError("The eval report has no arms to plot.")
    found = {g for per_arm in data["groups"].values() for g in per_arm if g != "all"}
    series = ["all", *sorted(found, key=lambda g: (_GROUP_ORDER.index(g) if g in _GROUP_ORDER else 99, g))]
    counts = group_counts or {}
    width = 0.8 / len(series)
    x = np.arange(len(arms))
    fig = Figure(figsize=(max(6.0, 1.6 * len(arms) * len(metrics) + 2), 4.0))
    FigureCanvasAgg(fig)
    axes = fig.subplots(1, len(metrics), squeeze=False)
    for ax, metric in zip(axes[0], metrics, strict=True):
        for i, group in enumerate(series):
            values = [
                float(data["arms"][a].get(metric, np.nan)) if group == "all"
                else float(data["groups"].get(a, {}).get(group, {}).get(metric, np.nan))
                for a in arms
            ]
            label = "all queries" if group == "all" else (f"{group} ({counts[group]})" if group in counts else group)
            bars = ax.bar(x + (i - (len(series) - 1) / 2) * width, values, width, label=label, gid=f"{group}")
            ax.bar_label(bars, fmt="%.2f", fontsize=7, padding=1)
        ax.set_xticks(x, arms)
        ax.set_ylim(0, 1.1)
        ax.set_title(metric)
        ax.grid(axis="y", alpha=0.3)
    axes[0][0].set_ylabel("score")
    handles, labels = axes[0][0].get_legend_handles_labels()
    fig.legend(handles, labels, loc="lower center", ncol=len(series), fontsize=8, frameon=False)
    if title:
        fig.suptitle(title)
    fig.tight_layout(rect=(0, 0.06, 1, 1))
    return fig


def plot_eval(
    report: Mapping[str, Any],
    out: Path | str,
    metrics: tuple[str, ...] = EVAL_METRICS,
    title: str | None = None,
    group_counts: Mapping[str, int] | None = None,
) -> Path:
    """Draw :func:`eval_figure` into a PNG at ``out`` and return the path."""
    return _save_png(eval_figure(report, metrics, title, group_counts), out)


OUTCOME_BARS = (("thumbs_up", "thumbs up"), ("rating_coverage", "rated"), ("grounded", "grounded"),
                ("rephrase", "rephrase ↓"), ("failed", "failed ↓"))
_OUTCOME_ARMS = ("hyde", "raw")


def outcome_figure(report: Mapping[str, Any], period: int = -1) -> Any:
    """A matplotlib Figure of one period of an outcome report (``outcome_report(...)``'s dict; the latest period
    by default): each outcome per assigned arm with its 95 % clustered interval, and the turn latency p50 / p95
    in seconds."""
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure

    periods = list(report.get("periods") or [])
    if not periods:
        raise HydeTutorError("The outcome report has no period to plot (no served turns).")
    section = periods[period]
    rows = section["by_assigned_arm"]["arms"]
    arms = [a for a in _OUTCOME_ARMS if a in rows] + sorted(a for a in rows if a not in _OUTCOME_ARMS)
    fig = Figure(figsize=(10.0, 4.0))
    FigureCanvasAgg(fig)
    rates, latency = fig.subplots(1, 2, gridspec_kw={"width_ratios": [2.2, 1]})
    x = np.arange(len(OUTCOME_BARS))
    width = 0.8 / len(arms)
    for i, arm in enumerate(arms):
        est = [rows[arm][name] for name, _ in OUTCOME_BARS]
        values = np.array([np.nan if e["value"] is None else e["value"] for e in est], dtype=float)
        low = np.array([v if e["low"] is None else e["low"] for e, v in zip(est, values, strict=True)], dtype=float)
        high = np.array([v if e["high"] is None else e["high"] for e, v in zip(est, values, strict=True)], dtype=float)
        rates.bar(x + (i - (len(arms) - 1) / 2) * width, values, width, label=f"{arm} ({rows[arm]['learners']})",
                  yerr=np.clip([values - low, high - values], 0, None), capsize=3, gid=arm)  # Wilson at 0: +1e-18
    rates.set_xticks(x, [label for _, label in OUTCOME_BARS])
    rates.set_ylim(0, 1.05)
    rates.set_ylabel("rate, with its 95 % interval")
    rates.set_title("outcomes by assigned arm (learners)")
    rates.legend(fontsize=8)
    rates.grid(axis="y", alpha=0.3)
    seconds = [[(rows[a]["latency_ms"]["turn"][q] or 0.0) / 1000 for a in arms] for q in ("p50", "p95")]
    xa = np.arange(len(arms))
    for j, (q, values) in enumerate(zip(("p50", "p95"), seconds, strict=True)):
        latency.bar(xa + (j - 0.5) * 0.4, values, 0.4, label=q, gid=q)
    latency.set_xticks(xa, arms)
    latency.set_ylabel("seconds per turn")
    latency.set_title("turn latency")
    latency.legend(fontsize=8)
    info = section["period"]
    fig.suptitle(f"{report.get('experiment') or 'experiment'}: period {info['index']}, {section['learners']} "
                 f"learners, {section['turns']} turns")
    fig.tight_layout()
    return fig


def plot_outcomes(report: Mapping[str, Any], out: Path | str, period: int = -1) -> Path:
    """Draw :func:`outcome_figure` into a PNG at ``out`` and return the path."""
    return _save_png(outcome_figure(report, period), out)


def _save_png(fig: Any, out: Path | str) -> Path:
    """Write ``fig`` as a PNG at ``out`` (its folder made); a clear error when it cannot be written."""
    out = Path(out)
    try:
        out.parent.mkdir(parents=True, exist_ok=True)
        fig.savefig(out, dpi=100, format="png")
    except OSError as exc:
        raise HydeTutorError(f"Could not write the chart to {out}: {exc}") from exc
    return out
