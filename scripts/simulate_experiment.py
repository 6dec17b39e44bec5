"""A SIMULATED A/B experiment (not learners): does ab-report find the HyDE effect, and does its SRM check work?

Simulated learners (ids) ask the eval sets' questions (grammar, grammar_holdout, docs, followups) through the
real tools path: a pydantic-ai agent with the real toolset, the real embedded store and USE embedder (the
corpora ingested into a temporary HYDE_DATA_DIR), its model replaying the recorded tool calls of a capable
agent (data/recordings/agent/); the real Experiment assigns each id an arm at a 50 % share. The reply is the
search's top found entry; 👍 when it is relevant by the qrels (see hyde_tutor.experiment.simulation).

Three runs, each through outcome_report:
  (a) HyDE vs raw, as served (the HyDE arm searches with the hypothesis the agent wrote);
  (b) an A/A test: both arms on plain search (the HyDE arm's searches made plain);
  (c) run (a) with 30 % of the raw arm's learners dropped afterwards (a broken split).

    .venv/bin/python scripts/simulate_experiment.py                 # 600 learners, prints the three reports
    .venv/bin/python scripts/simulate_experiment.py --seeds 20      # and how often each verdict comes out over 20 seeds
    .venv/bin/python scripts/simulate_experiment.py --json out.json # also writes the three reports' JSON
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any


from hyde_tutor.config import Settings
from hyde_tutor.corpus.ingest import IngestRequest, ingest_file
from hyde_tutor.experiment.abreport import format_outcome_report, outcome_report
from hyde_tutor.evaluation.agent_replay import load_agent_turns
from hyde_tutor.experiment.simulation import SimulationConfig, drop_learners, known_effect, load_questions, simulate
from hyde_tutor.hyde import HydeRetriever
from hyde_tutor.llm.tokens import qwen_counter
from hyde_tutor.retrieval.retriever import Retriever

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(Path(__file__).resolve().parent))
from tune_policy import CachedDense  # noqa: E402  (the real embedder memoised by text: learners repeat questions)

LABEL = "SIMULATION (simulated learners, recorded agent, outcomes from the qrels; not real learners)"


def build_retriever(data_dir: Path) -> HydeRetriever:
    settings = Settings(data_dir=data_dir, llm={"provider": "replay"}, hyde={"cache": "memory"})  # type: ignore[arg-type]
    base = Retriever.from_settings(settings)
    have = set(base.store.list_collections())
    for collection, path in (("grammar", ROOT / "data" / "grammar.jsonl"), ("docs", ROOT / "data" / "docs.jsonl")):
        if collection not in have:
            ingest_file(path, IngestRequest(collection=collection, progress=False), base.store, base.dense, base.sparse)
    base.dense = CachedDense(base.dense)  # type: ignore[assignment]
    return HydeRetriever.from_settings(settings, base)


def one_seed(hr: HydeRetriever, turns: Any, questions: Any, args: argparse.Namespace, seed: int,
             count: Any) -> dict[str, Any]:
    """Runs (a) and (b) for one seed's learners, and (c) from (a)."""
    out: dict[str, Any] = {}
    for name, plain in (("a_hyde_vs_raw", False), ("b_plain_both", True)):
        config = SimulationConfig(learners=args.learners, seed=seed, plain_both=plain)
        started = time.perf_counter()
        log, stats = asyncio.run(simulate(hr, turns, questions, config, count_tokens=count))
        out[name] = {"seconds": round(time.perf_counter() - started, 1), "replay_served": stats.served,
                     "not_recorded": stats.not_recorded, "stale": stats.stale,
                     "report": outcome_report(log, mde=args.mde)}
        if not plain:
            skewed, dropped = drop_learners(log, "raw", 0.3, seed=seed)
            out["c_skewed"] = {"dropped_raw_learners": dropped, "report": outcome_report(skewed, mde=args.mde)}
    return out


def calibration(runs: list[dict[str, Any]], known: dict[str, float]) -> dict[str, Any]:
    """Over many seeds: how often each run's intervals exclude 0, cover the known effect, and the SRM check fires."""
    def diff(run: dict[str, Any], metric: str) -> dict[str, Any]:
        return run["report"]["periods"][0]["by_assigned_arm"]["differences"][metric]

    metrics = ("thumbs_up", "judged_relevance", "grounded", "rephrase")
    a, b, c = ([r[k] for r in runs] for k in ("a_hyde_vs_raw", "b_plain_both", "c_skewed"))
    covers = [diff(r, "thumbs_up")["low"] <= known["difference"] <= diff(r, "thumbs_up")["high"] for r in a]
    return {"seeds": len(runs),
            "a_excludes_zero": {m: sum(diff(r, m)["excludes_zero"] for r in a) for m in metrics},
            "a_thumbs_up_interval_covers_known_effect": sum(covers),
            "b_excludes_zero": {m: sum(diff(r, m)["excludes_zero"] for r in b) for m in metrics},
            "b_srm_mismatch": sum(r["report"]["periods"][0]["srm"]["mismatch"] for r in b),
            "c_srm_mismatch": sum(r["report"]["periods"][0]["srm"]["mismatch"] for r in c),
            "srm_p_values_b": [round(r["report"]["periods"][0]["srm"]["p_value"], 4) for r in b]}


def run(args: argparse.Namespace) -> dict[str, Any]:
    data_dir = Path(args.data_dir or tempfile.mkdtemp(prefix="hyde-sim-"))
    os.environ["HYDE_DATA_DIR"] = str(data_dir)
    turns = load_agent_turns(sorted((ROOT / "data" / "recordings" / "agent").glob("*.jsonl")))
    questions = load_questions(ROOT / "data" / "eval", turns)
    counter = qwen_counter(Settings().data_dir / "models")
    count = counter.count_text if counter is not None else None
    hr = build_retriever(data_dir)
    out: dict[str, Any] = {"label": LABEL, "questions": len(questions), "learners": args.learners,
                           "token_counter": "qwen2.5-gguf-vocab" if counter else "words"}
    try:
        out["known_effect"] = asyncio.run(known_effect(hr, turns, questions))
        out |= one_seed(hr, turns, questions, args, args.seed, count)
        if args.seeds:
            runs = [one_seed(hr, turns, questions, args, seed, count) for seed in range(args.seed + 1,
                                                                                        args.seed + args.seeds)]
            out["calibration"] = calibration([out] + runs, out["known_effect"])
    finally:
        hr.close()
    return out


def render(out: dict[str, Any]) -> str:
    """The three reports (and the calibration) as text."""
    lines: list[str] = []
    titles = {"a_hyde_vs_raw": "(a) HyDE vs raw at a 50 % share", "b_plain_both": "(b) A/A: both arms on plain search",
              "c_skewed": "(c) run (a) with 30 % of the raw arm's learners dropped (a broken split)"}
    lines.append(f"{LABEL}\n{out['questions']} eval questions with a recorded agent turn; {out['learners']} learners per run; "
                     f"hypothesis tokens counted with {out['token_counter']}, agent tokens pydantic-ai's estimate for a replayed model")
    known = out["known_effect"]
    lines.append(f"known effect on this question pool (each question searched once per treatment, top entry relevant): "
                     f"hyde {known['hyde']:.3f}, raw {known['raw']:.3f}, difference {known['difference']:+.3f}")
    for key, title in titles.items():
        extra = (f"; {out[key]['seconds']} s, {out[key]['replay_served']} turns replayed, "
                 f"{out[key]['not_recorded']} not recorded") if "seconds" in out[key] else \
            f"; {out[key]['dropped_raw_learners']} raw learners dropped"
        lines.append(f"\n########## {title} [{LABEL.split(' (')[0]}]{extra}\n")
        lines.append(format_outcome_report(out[key]["report"]))
    if "calibration" in out:
        cal = out["calibration"]
        lines.append(f"\n########## calibration over {cal['seeds']} seeds of {out['learners']} learners [SIMULATION]")
        lines.append(f"(a) HyDE vs raw: hyde − raw interval excludes 0 in {cal['a_excludes_zero']} runs; the 👍 interval "
                     f"covers the known effect ({known['difference']:+.3f}) in {cal['a_thumbs_up_interval_covers_known_effect']}")
        lines.append(f"(b) A/A: an interval excludes 0 (a false positive) in {cal['b_excludes_zero']} runs; SRM mismatch in "
                     f"{cal['b_srm_mismatch']} (p-values {cal['srm_p_values_b']})")
        lines.append(f"(c) 30 % of the raw learners dropped: SRM mismatch in {cal['c_srm_mismatch']} of {cal['seeds']} runs")
    return "\n".join(lines)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--learners", type=int, default=600)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--mde", type=float, default=0.05)
    ap.add_argument("--data-dir", help="Where to ingest the corpora (default: a new temporary folder).")
    ap.add_argument("--json", type=Path, help="Also write the three reports here.")
    ap.add_argument("--seeds", type=int, default=0,
                    help="Also repeat the runs for this many seeds (the first is --seed) and count how often the "
                         "intervals exclude 0, cover the known effect, and the SRM check fires.")
    ap.add_argument("--render", type=Path, help="Print the reports of a JSON written by --json, and stop.")
    report(ap.parse_args(), run, render)


def report(args: argparse.Namespace, run: Callable[[argparse.Namespace], dict[str, Any]],
           render: Callable[[dict[str, Any]], str]) -> None:
    """``--render FILE``: print a JSON written before, and stop; else run, print, and write ``--json``."""
    if args.render:
        print(render(json.loads(args.render.read_text(encoding="utf-8"))))
        return
    out = run(args)
    print(render(out))
    if args.json:
        args.json.parent.mkdir(parents=True, exist_ok=True)
        args.json.write_text(json.dumps(out, ensure_ascii=False, indent=1), encoding="utf-8")
        print(f"\nwrote {args.json}", file=sys.stderr)


if __name__ == "__main__":
    main()
