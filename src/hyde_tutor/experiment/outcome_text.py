"""The outcome report (:func:`~hyde_tutor.experiment.outcomes.outcome_report`) as text for a terminal."""

from __future__ import annotations

from datetime import datetime, timezone
from typing import Any

from .outcomes import CONTROL, METHOD, PROPORTIONS, TREATMENT

__all__ = ("format_outcome_report",)

LABELS = {"thumbs_up": "👍 rate", "rating_coverage": "rated", "judged_relevance": "judged relevance",
          "grounded": "grounded", "rephrase": "rephrase", "failed": "failed",
          "abandoned": "abandoned"}
OUTCOMES = ("thumbs_up", "rating_coverage", "judged_relevance", "grounded", "rephrase", "failed", "abandoned")
COST = {"agent_requests": "requests", "agent_tokens_in": "agent in", "agent_tokens_out": "agent out",
        "hypothesis_tokens": "of it hyp.", "retrievals": "searches", "hyde_calls": "HyDE calls",
        "hyde_tokens": "HyDE tok", "judge_calls": "judge calls", "judge_tokens": "judge tok", "total_tokens": "all tokens"}


def _pad(text: str, width: int) -> str:
    """Left-justify to ``width`` terminal columns (an emoji takes two)."""
    return text + " " * max(0, width - len(text) - sum(1 for ch in text if ord(ch) > 0xFFFF))


def _when(ts: float | None, default: str) -> str:
    return default if ts is None else datetime.fromtimestamp(ts, timezone.utc).strftime("%Y-%m-%d %H:%M:%S UTC")


def _estimate(e: dict[str, Any] | None) -> str:
    if e is None or e["value"] is None:  # None: a report written before this metric existed
        return "—"
    if e["low"] is None:
        return f"{e['value']:.3f} (n={e['n']})"
    return f"{e['value']:.3f} [{e['low']:.3f}, {e['high']:.3f}] n={e['n']}"


def _difference(d: dict[str, Any] | None) -> str:
    if d is None:
        return "—"
    if d["low"] is None:
        return f"{d['value']:+.3f} (no interval)"
    return f"{d['value']:+.3f} [{d['low']:+.3f}, {d['high']:+.3f}]" + (" *" if d["excludes_zero"] else "")


def _view(view: dict[str, Any], title: str) -> list[str]:
    arms = view["arms"]
    names = [a for a in (TREATMENT, CONTROL) if a in arms] + sorted(a for a in arms if a not in (TREATMENT, CONTROL))
    width = 34
    head = f"{'':<18}" + "".join(f"{a:<{width}}" for a in names) + ("hyde − raw" if view["differences"] else "")
    lines = [title, head, f"{'learners / turns':<18}" + "".join(
        f"{str(arms[a]['learners']) + ' / ' + str(arms[a]['turns']):<{width}}" for a in names)]
    for metric in OUTCOMES:
        row = _pad(LABELS[metric], 18) + "".join(f"{_estimate(arms[a].get(metric)):<{width}}" for a in names)
        if view["differences"]:
            row += _difference(view["differences"].get(metric))
        lines.append(row)
    return lines


def _srm(srm: dict[str, Any]) -> str:
    if srm["p_value"] is None:
        return "SRM check: not enough arms or learners to check the split"
    stat = "∞" if srm["chi2"] is None else f"{srm['chi2']:.2f}"
    text = (f"SRM check: learners {srm['observed']} vs expected {srm['expected']}: χ² = {stat}, df = {srm['df']}, "
            f"p = {srm['p_value']:.3g}")
    if srm["mismatch"]:
        return "!" * 78 + f"\n!!! SAMPLE RATIO MISMATCH (p < {srm['alpha']}): the split is broken; do not trust " \
               f"this comparison.\n!!! {text}\n" + "!" * 78
    return text + f" (ok: no mismatch at p < {srm['alpha']})"


def _split(period: dict[str, Any]) -> str:
    """The configured split where it is not the share's: ``hyde,raw`` (or more arms) split evenly."""
    split, share = period.get("split"), period["share_checked"]
    if not split or split == {"raw": round(1 - share, 4), "hyde": round(share, 4)}:
        return ""
    arms = ",".join(period.get("arms", split))
    return f" (not used: the arms {arms} split evenly, " + " / ".join(f"{a} {v:.0%}" for a, v in split.items()) + ")"


def _cost_and_latency(view: dict[str, Any]) -> list[str]:
    arms = view["arms"]
    lines = ["cost per turn (mean; tokens are the agent's in and out, the hypotheses it wrote being part of its out, "
             "HyDE generation's, the judge's)", f"  {'':<10}" + "".join(f"{h:>12}" for h in COST.values())]
    for arm, row in arms.items():
        lines.append(f"  {arm:<10}" + "".join(f"{row['cost_per_turn'][k]:>12.4g}" for k in COST))
    lines.append("latency (p50 / p95): turn | first token | retrieval")
    for arm, row in arms.items():
        lat = row["latency_ms"]
        lines.append(f"  {arm:<12} " + " | ".join(_latency(lat[k], unit) for k, unit in LATENCY_UNITS))
    return lines


LATENCY_UNITS = (("turn", "s"), ("first_token", "s"), ("retrieval", "ms"))
"""A turn and its first token take seconds (a turn on the embedded model, minutes); a search, milliseconds."""


def _latency(p: dict[str, float | None], unit: str) -> str:
    if p["p50"] is None or p["p95"] is None:
        return "–"
    if unit == "s":
        return f"{p['p50'] / 1000:.2f} / {p['p95'] / 1000:.2f} s"
    return f"{p['p50']:.1f} / {p['p95']:.1f} ms"


def _hyde_searches(rows: dict[str, dict[str, Any]]) -> list[str]:
    """Per assigned arm: searches, those that attempted HyDE, those it shaped, and why the rest fell back."""
    lines = ["HyDE in the searches (per assigned arm): attempted → shaped the results; fell back, and why"]
    for arm, row in rows.items():
        if not row["hyde_attempted"]:
            lines.append(f"  {arm:<12} {row['searches']} searches, HyDE attempted in none")
            continue
        why = ", ".join(f"{reason} {n}" for reason, n in row["fallback_reasons"].items())
        lines.append(f"  {arm:<12} {row['searches']} searches, HyDE attempted in {row['hyde_attempted']} → shaped "
                     f"{row['hyde_used']}; fell back in {row['fell_back']}" + (f" ({why})" if why else ""))
    return lines


def _power(power: dict[str, Any]) -> list[str]:
    if not power["metrics"]:
        return [f"power: {power.get('note', 'no outcome observed yet in the raw arm')}"]
    lines = [f"learners to enrol to detect a difference of {power['mde']:.3g} (power {power['power']}, "
             f"α {power['alpha']}, two-sided; {power['enrolled']} enrolled so far):"]
    for name, p in power["metrics"].items():
        lines.append(f"  {_pad(LABELS[name], 12)} base {p['base_rate']:.3f}: {p['learners_needed']:,} learners in all "
                     f"({p['more_learners_needed']:,} more); {p['turns_needed']:,} turns in its denominator, "
                     f"{p['contributing_share']:.0%} of learners bring {p['turns_per_learner']} each, "
                     f"deff {p['deff']}")
    return lines


def _always_valid(readout: dict[str, Any] | None) -> list[str]:
    """The always-valid block: the decision line, which interval to read when, each outcome's sequence."""
    if not readout:
        return []
    lines = [f"DECISION: {readout['decision']['text']}",
             f"always-valid {(1 - readout['alpha']) * 100:.0f} % hyde − raw ({readout['method']}; mixture tuned for "
             f"{readout['planned_learners']} learners; {readout['references'][0].split(',')[0]} et al. 2021, "
             f"{readout['references'][1].split(',')[0]} et al. 2024, {readout['references'][2].split(',')[0]} et al. "
             f"2022); {readout['read']}:"]
    for metric in OUTCOMES:
        d = readout["differences"].get(metric)
        text = "— (too few learners per arm)" if d is None else (
            f"{d['value']:+.3f} [{d['low']:+.3f}, {d['high']:+.3f}] p = {d['p_value']:.3g}"
            + (" *" if d["excludes_zero"] else ""))
        role = "primary" if d is not None and d["role"] == "primary" else "secondary"
        lines.append(f"  {_pad(LABELS[metric], 18)}{text:<44}{role}")
    return lines


def format_outcome_report(report: dict[str, Any]) -> str:
    """A readable rendering of :func:`~hyde_tutor.experiment.outcomes.outcome_report`'s dict."""
    lines = [f"experiment {report['experiment'] or '(none named)'}: {report['learners']} learners, "
             f"{report['turns']} turns, {len(report['periods'])} period(s)"]
    lines += [f"WARNING: {w}" for w in report["warnings"]]
    if report.get("decision"):
        lines.append(f"DECISION (period {report['decision']['period']}): {report['decision']['text']}")
    for section in report["periods"]:
        period = section["period"]
        share = "unknown (checked against 0.5)" if period["hyde_share"] is None else f"{period['hyde_share']:.0%}"
        lines += ["", f"== period {period['index']}: {_when(period['start'], 'log start')} → "
                  f"{_when(period['end'], 'now')}, HyDE share {share}{_split(period)}; {section['learners']} "
                  f"learners, {section['turns']} turns", _srm(section["srm"]), ""]
        lines += _view(section["by_assigned_arm"], "by assigned arm (intention to treat), 95 % intervals "
                       "clustered by learner; * = the interval excludes 0")
        lines += [""] + _always_valid(section.get("always_valid"))
        lines += [""] + _hyde_searches(section.get("hyde_searches", {}))
        lines += [""] + _view(section["by_treatment_received"], "by treatment received (hyde = HyDE shaped the "
                              "results of a search of the turn; an attempt that fell back is raw; secondary)")
        lines += [""] + _cost_and_latency(section["by_assigned_arm"]) + [""] + _power(section["power"])
    lines += ["", f"primary outcome: {report['method'].get('primary', METHOD['primary'])}.",
              "lower is better for rephrase, failed and abandoned. " + "; ".join(
        f"{LABELS[k]}: {desc}" for k, (_, desc) in PROPORTIONS.items())]
    return "\n".join(lines)
