"""A SIMULATION of peeking (not learners): how often does ab-report's fixed 95 % interval, read after every 25
learners, EVER exclude 0 when nothing differs, against the always-valid one; and after how many learners does
each first exclude 0 when HyDE helps?

The outcome of each question under each treatment comes from the real path, once: every eval question with a
recorded agent turn (199) is asked through the simulated experiment's real tools path (pydantic-ai agent, real
toolset, embedded store and USE embedder, the recorded agent's tool calls replayed) with the arm forced to HyDE
and to raw, as ``known_effect`` does; the top found entry's relevance by the qrels decides 👍, the found
entries decide grounded, ranks 1-3 the judge stand-in. A question's outcome is the same each time it is asked
(the path is deterministic), so the simulated learners then draw from that table instead of searching again:
the same behaviour as ``SimulationConfig`` (2-6 questions each, drawn uniformly; 60 % of turns rated; a
rephrase with probability 0.5 after a top entry that is not relevant; the judge on 20 % of turns), the real
``Experiment`` split at 50 %. That makes 200 seeds × 1,000 learners × 2 runs affordable.

Two runs per seed, the same learners and questions: (A/A) both arms on plain search (the raw column for
everyone); (HyDE vs raw) the HyDE arm's turns from the HyDE column. Looks after every 25 learners (40 looks,
1,000 learners); at each look the report's own statistics: the fixed interval (clustered Wilson + Newcombe,
:mod:`hyde_tutor.experiment.abstats`) and the always-valid one (:mod:`hyde_tutor.experiment.sequential`).

    .venv/bin/python scripts/peeking_simulation.py --json docs/recorded/peeking.json
    .venv/bin/python scripts/peeking_simulation.py --table docs/recorded/peeking.json   # reuse the question table
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import numpy as np

from hyde_tutor.experiment.abstats import clustered_mean, clustered_proportion, mean_difference, newcombe_difference
from hyde_tutor.experiment.sequential import PLANNED_LEARNERS, sequential_means, sequential_proportions
from hyde_tutor.experiment.assignment import Experiment

ROOT = Path(__file__).resolve().parents[1]
LABEL = ("SIMULATION (simulated learners drawing questions whose outcome per treatment came from the real path "
         "once; not real learners)")
METRICS = ("thumbs_up", "grounded", "rephrase", "judged_relevance")
ARMS = ("hyde", "raw")


def question_table(data_dir: Path) -> list[dict[str, Any]]:
    """Each question asked once per treatment through the real path: top entry relevant, grounded, judge score."""
    sys.path.insert(0, str(Path(__file__).resolve().parent))
    from simulate_experiment import build_retriever  # noqa: PLC0415  (the script's real retriever, ingested once)

    from hyde_tutor.evaluation.agent_replay import load_agent_turns
    from hyde_tutor.experiment.simulation import SimulationConfig, _judge_stand_in, load_questions, simulate

    os.environ["HYDE_DATA_DIR"] = str(data_dir)
    turns = load_agent_turns(sorted((ROOT / "data" / "recordings" / "agent").glob("*.jsonl")))
    questions = load_questions(ROOT / "data" / "eval", turns)
    hr = build_retriever(data_dir)
    rows: list[dict[str, Any]] = []
    try:
        for k, q in enumerate(questions):
            row: dict[str, Any] = {"set": q.set_name, "id": q.id}
            for arm, share in (("hyde", 1.0), ("raw", 0.0)):
                config = SimulationConfig(learners=1, hyde_share=share, experiment=f"table-{arm}", seed=k,
                                          questions_per_learner=(1, 1))
                log, _ = asyncio.run(simulate(hr, turns, [q], config))
                turn = log.turns()[0]
                found = turn.found_ids
                row[arm] = {"top": bool(found) and found[0] in q.grades, "grounded": bool(turn.grounded),
                            "judge": _judge_stand_in(found, q.grades), "failed": turn.failed}
            rows.append(row)
    finally:
        hr.close()
    return rows


def _learners(rng: np.random.Generator, n: int, seed: int, questions: int) -> list[dict[str, Any]]:
    """The simulated learners of one seed: arm by the real Experiment, questions and draws by ``rng``."""
    split = Experiment("peeking", hyde_share=0.5)
    takes = np.random.default_rng([seed, 1])  # its own stream: --dilute leaves the other draws as they are
    out = []
    for i in range(n):
        k = int(rng.integers(2, 7))
        out.append({"arm": split.arm(f"peek-learner-{seed}-{i:04d}"), "q": rng.integers(0, questions, k),
                    "rated": rng.random(k) < 0.6, "rephrases": rng.random(k) < 0.5, "judged": rng.random(k) < 0.2, "takes": takes.random(k)})
    return out


def _turns(learner: dict[str, Any], columns: dict[str, dict[str, np.ndarray]], treated: bool,
           dilute: float = 1.0) -> dict[str, np.ndarray]:
    """A learner's turns as arrays: the raw column's outcome of each question, or (``treated``) the HyDE
    column's on the turns whose ``takes`` draw is below ``dilute`` (1: every turn; less: a smaller effect)."""
    q = learner["q"]
    hyde = treated & (learner["takes"] < dilute)
    return {k: np.where(hyde, columns["hyde"][k][q], columns["raw"][k][q]) for k in ("top", "grounded", "judge")}


def _outcomes(learner: dict[str, Any], turns: dict[str, np.ndarray]) -> dict[str, Any]:
    """Per-learner counts of one learner's turns."""
    top, grounded, judge = turns["top"], turns["grounded"], turns["judge"]
    return {"thumbs_up": (int(top[learner["rated"]].sum()), int(learner["rated"].sum())),
            "grounded": (int(grounded.sum()), len(top)),
            "rephrase": (int((~top & learner["rephrases"]).sum()), len(top)),
            "judged_relevance": [float(x) for x in judge[learner["judged"]]]}


def _intervals(hyde: list[dict[str, Any]], raw: list[dict[str, Any]], metric: str) -> tuple[Any, Any]:
    """The fixed (the report's) and the always-valid interval of hyde − raw at one look: ``(low, high)`` pairs."""
    if metric == "judged_relevance":
        a, b = [x[metric] for x in hyde], [x[metric] for x in raw]
        (ea, sa), (eb, sb) = clustered_mean(a, bounds=(0.0, 1.0)), clustered_mean(b, bounds=(0.0, 1.0))
        fixed = mean_difference(ea.value, sa, eb.value, sb)[1:] if ea.value is not None and eb.value is not None \
            else (None, None)
        seq = sequential_means(a, b)
    else:
        a_hits, a_trials = [x[metric][0] for x in hyde], [x[metric][1] for x in hyde]
        b_hits, b_trials = [x[metric][0] for x in raw], [x[metric][1] for x in raw]
        diff = newcombe_difference(clustered_proportion(a_hits, a_trials), clustered_proportion(b_hits, b_trials))
        fixed = (None, None) if diff is None else diff[1:]
        seq = sequential_proportions(a_hits, a_trials, b_hits, b_trials)
    return fixed, (None, None) if seq is None else (seq.low, seq.high)


def _excludes(interval: tuple[Any, Any]) -> int:
    """+1 / -1 when the interval lies above / below 0, 0 otherwise (or with no interval)."""
    low, high = interval
    return 0 if low is None or high is None else (1 if low > 0 else -1 if high < 0 else 0)


def one_run(learners: list[dict[str, Any]], columns: dict[str, dict[str, np.ndarray]], dilute: float,
            looks: int, step: int) -> dict[str, dict[str, list[int]]]:
    """Per metric and interval kind, the sign of the interval (+1, -1, 0) at each look."""
    rows = [(x["arm"], _outcomes(x, _turns(x, columns, x["arm"] == "hyde", dilute))) for x in learners]
    signs: dict[str, dict[str, list[int]]] = {m: {"fixed": [], "always_valid": []} for m in METRICS}
    for look in range(1, looks + 1):
        seen = rows[: look * step]
        hyde, raw = [o for a, o in seen if a == "hyde"], [o for a, o in seen if a == "raw"]
        for metric in METRICS:
            fixed, seq = _intervals(hyde, raw, metric)
            signs[metric]["fixed"].append(_excludes(fixed))
            signs[metric]["always_valid"].append(_excludes(seq))
    return signs


def check_against_report(learners: list[dict[str, Any]], columns: dict[str, dict[str, np.ndarray]]) -> dict[str, Any]:
    """The same learners as turns in an event log through ``outcome_report``: its fixed and always-valid 👍
    intervals must be the ones this script computes from the counts (else the simulation measures something
    other than the report)."""
    from hyde_tutor.experiment.outcomes import outcome_report
    from hyde_tutor.experiment.events import ExperimentEvent, MemoryEventLog, RatingEvent, TurnRecord

    log = MemoryEventLog()
    log.add_experiment_event(ExperimentEvent(change="start", experiment="peeking", hyde_share=0.5, enabled=True,
                                             timestamp=1.0))
    for i, x in enumerate(learners):
        turns = _turns(x, columns, x["arm"] == "hyde")
        for j in range(len(x["q"])):
            top = bool(turns["top"][j])
            turn = TurnRecord(turn_id=f"{i}-{j}", subject=f"learner-{i}", conversation_id=f"{i}-{j}",
                              experiment="peeking", arm=x["arm"], timestamp=2.0 + i,
                              grounded=bool(turns["grounded"][j]),
                              rephrase=(not top) and bool(x["rephrases"][j]),
                              judge_score=float(turns["judge"][j]) if x["judged"][j] else None)
            log.add_turn(turn)
            if x["rated"][j]:
                log.add_rating(RatingEvent(turn_id=turn.turn_id, subject=turn.subject, rating=1 if top else -1))
    period = outcome_report(log)["periods"][0]
    rows = [(x["arm"], _outcomes(x, _turns(x, columns, x["arm"] == "hyde"))) for x in learners]
    fixed, seq = _intervals([o for a, o in rows if a == "hyde"], [o for a, o in rows if a == "raw"], "thumbs_up")
    report_fixed = period["by_assigned_arm"]["differences"]["thumbs_up"]
    report_seq = period["always_valid"]["differences"]["thumbs_up"]
    same = bool(np.allclose(fixed, (report_fixed["low"], report_fixed["high"]), rtol=0, atol=1e-12)
                and np.allclose(seq, (report_seq["low"], report_seq["high"]), rtol=0, atol=1e-12))
    if not same:
        raise SystemExit(f"the script's intervals {fixed} {seq} differ from the report's {report_fixed} {report_seq}")
    return {"learners": len(learners), "fixed": list(fixed), "always_valid": list(seq), "same_as_report": same,
            "report_decision": period["always_valid"]["decision"]["text"]}


def summarise(runs: list[dict[str, dict[str, list[int]]]], step: int, by: int) -> dict[str, Any]:
    """Share of runs that ever exclude 0 (and in which direction), and the first look that does."""
    out: dict[str, Any] = {}
    for metric in METRICS:
        out[metric] = {}
        for kind in ("fixed", "always_valid"):
            firsts = [next(((i + 1) * step for i, s in enumerate(r[metric][kind]) if s), None) for r in runs]
            reached = [f for f in firsts if f is not None]
            out[metric][kind] = {
                "ever_excludes_zero": len(reached) / len(runs),
                "ever_above_zero": sum(1 in r[metric][kind] for r in runs) / len(runs),
                "ever_below_zero": sum(-1 in r[metric][kind] for r in runs) / len(runs),
                "excludes_zero_at_last_look": sum(r[metric][kind][-1] != 0 for r in runs) / len(runs),
                "first_exclusion_median_learners": statistics.median(reached) if reached else None,
                f"share_by_{by}_learners": sum(f <= by for f in reached) / len(runs),
                "first_exclusion_learners": firsts,
            }
    return out


def run(args: argparse.Namespace) -> dict[str, Any]:
    if args.table:
        table = json.loads(args.table.read_text(encoding="utf-8"))["question_table"]
        source = f"question table read from {args.table}"
    else:
        started = time.perf_counter()
        table = question_table(Path(args.data_dir or tempfile.mkdtemp(prefix="hyde-peek-")))
        source = f"question table from the real path in {time.perf_counter() - started:.0f} s"
    columns = {arm: {k: np.array([row[arm][k] for row in table]) for k in ("top", "grounded", "judge")}
               for arm in ARMS}
    aa, ab = [], []
    check = check_against_report(_learners(np.random.default_rng(args.seed), args.looks * args.step, args.seed,
                                           len(table)), columns)
    started = time.perf_counter()
    for seed in range(args.seed, args.seed + args.seeds):
        learners = _learners(np.random.default_rng(seed), args.looks * args.step, seed, len(table))
        aa.append(one_run(learners, columns, 0.0, args.looks, args.step))  # A/A: both arms on plain search
        ab.append(one_run(learners, columns, args.dilute, args.looks, args.step))
    return {"label": LABEL, "source": source, "seconds": round(time.perf_counter() - started, 1),
            "seeds": args.seeds, "first_seed": args.seed, "dilute": args.dilute, "looks": args.looks, "step": args.step,
            "planned_learners_of_the_mixture": PLANNED_LEARNERS,
            "per_question_top_relevant": {arm: float(columns[arm]["top"].mean()) for arm in ARMS},
            "questions": len(table), "check_against_report": check, "question_table": table,
            "a_a": summarise(aa, args.step, args.looks * args.step),
            "hyde_vs_raw": summarise(ab, args.step, args.looks * args.step)}


def render(out: dict[str, Any]) -> str:
    by = out["looks"] * out["step"]
    lines = [f"{out['label']}",
             f"{out['seeds']} seeds; looks after every {out['step']} learners, {out['looks']} looks ({by} learners); "
             f"{out['questions']} questions, top entry relevant: hyde {out['per_question_top_relevant']['hyde']:.3f}, "
             f"raw {out['per_question_top_relevant']['raw']:.3f}; {out['source']}; {out['seconds']} s",
             f"check: the intervals below are outcome_report's (seed {out['first_seed']}, HyDE vs raw, "
             f"{out['check_against_report']['learners']} learners: {out['check_against_report']['report_decision']})",
             "",
             f"A/A (both arms plain): share of runs whose interval EVER excludes 0 over the {out['looks']} looks "
             "(the false-positive rate of a peeking operator; target <= 5 % for the always-valid one)",
             f"  {'outcome':<18}{'fixed 95 %':>12}{'always-valid':>14}{'fixed, last look only':>24}"]
    for metric in METRICS:
        f, s = out["a_a"][metric]["fixed"], out["a_a"][metric]["always_valid"]
        lines.append(f"  {metric:<18}{f['ever_excludes_zero']:>12.1%}{s['ever_excludes_zero']:>14.1%}"
                     f"{f['excludes_zero_at_last_look']:>24.1%}")
    dilute = out.get("dilute", 1.0)
    effect = dilute * (out["per_question_top_relevant"]["hyde"] - out["per_question_top_relevant"]["raw"])
    lines += ["", f"HyDE vs raw{f' (diluted: {dilute:.0%} of the HyDE arm treated)' if dilute < 1 else ''}, "
              f"expected 👍 effect {effect:+.3f}: learners until the interval first excludes 0 (median over the runs "
              f"that get there), and the share of runs that get there by {by} learners",
              f"  {'outcome':<18}{'fixed median':>14}{'fixed share':>13}{'always-valid median':>21}"
              f"{'always-valid share':>20}{'wrong sign':>12}"]
    for metric in METRICS:
        f, s = out["hyde_vs_raw"][metric]["fixed"], out["hyde_vs_raw"][metric]["always_valid"]
        wrong = s["ever_above_zero"] if metric == "rephrase" else s["ever_below_zero"]
        lines.append(f"  {metric:<18}{f['first_exclusion_median_learners'] or '-':>14}"
                     f"{f[f'share_by_{by}_learners']:>13.1%}{s['first_exclusion_median_learners'] or '-':>21}"
                     f"{s[f'share_by_{by}_learners']:>20.1%}{wrong:>12.1%}")
    return "\n".join(lines)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--seeds", type=int, default=200)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--looks", type=int, default=40)
    ap.add_argument("--step", type=int, default=25, help="Learners between looks.")
    ap.add_argument("--dilute", type=float, default=1.0,
                    help="Share of the HyDE arm's turns that get the HyDE column (the rest the raw one): a smaller "
                         "effect, as a served experiment's will be. The A/A run is unchanged.")
    ap.add_argument("--data-dir", help="Where to ingest the corpora for the question table (default: a temp folder).")
    ap.add_argument("--table", type=Path, help="Reuse the question table of a JSON this script wrote.")
    ap.add_argument("--json", type=Path, help="Write the figures (and the question table) here.")
    ap.add_argument("--render", type=Path, help="Print the table of a JSON written by --json, and stop.")
    sys.path.insert(0, str(Path(__file__).resolve().parent))
    from simulate_experiment import report  # noqa: PLC0415  (the two simulations report alike)

    report(ap.parse_args(), run, render)


if __name__ == "__main__":
    main()
