"""A SIMULATED A/B experiment (not learners): does ab-report find the HyDE effect, and does its SRM check work?

Simulated learners (ids) ask the eval sets' questions (grammar, grammar_holdout, docs, followups) through the
real tools path: a pydantic-ai agent with the real toolset, the real embedded store and USE embedder (the
corpora ingested into a temporary HYDE_DATA_DIR), its model replaying the recorded tool calls of a capable
agent (data/recordings/agent/); the real Experiment assigns each id an arm at a 50 % share. The reply is the
search's top found entry; 👍 when it is relevant by the qrels (see hyde_tutor.evaluation.simulation).

Three runs, each through outcome_report:
  (a) HyDE vs raw, as served (the HyDE arm searches with the hypothesis the agent wrote);
  (b) an A/A test: both arms on plain search (the HyDE arm's searches made plain);
  (c) run (a) with 30 % of the raw arm's learners dropped afterwards (a broken split).

    .venv/bin/python scripts/simulate_experiment.py                 # 300 learners, prints the three reports
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
from pathlib import Path
from typing import Any

import numpy as np

from hyde_tutor.config import Settings
from hyde_tutor.corpus.ingest import ingest_file
from hyde_tutor.evaluation.abreport import format_outcome_report, outcome_report
from hyde_tutor.evaluation.agent_replay import load_agent_turns
from hyde_tutor.evaluation.simulation import SimulationConfig, drop_learners, known_effect, load_questions, simulate
from hyde_tutor.hyde import HydeRetriever
from hyde_tutor.llm.tokens import qwen_counter
from hyde_tutor.retrieval.retriever import Retriever

ROOT = Path(__file__).resolve().parents[1]
LABEL = "SIMULATION (simulated learners, recorded agent, outcomes from the qrels; not real learners)"


class MemoDense:
    """The real embedder's vectors memoised by text (learners ask the same eval questions many times)."""

    def __init__(self, inner: Any) -> None:
        self.inner, self.name, self.dim = inner, inner.name, inner.dim
        self.memo: dict[str, np.ndarray] = {}

    def embed(self, texts: list[str]) -> np.ndarray:
        todo = [t for t in dict.fromkeys(texts) if t not in self.memo]
        if todo:
            for text, vec in zip(todo, self.inner.embed(todo), strict=True):
                self.memo[text] = vec
        return np.vstack([self.memo[t] for t in texts]) if texts else np.zeros((0, self.dim), np.float32)

    def close(self) -> None:
        close = getattr(self.inner, "close", None)
        if callable(close):
            close()


def build_retriever(data_dir: Path) -> HydeRetriever:
    settings = Settings(data_dir=data_dir, llm={"provider": "replay"}, hyde={"cache": "memory"})  # type: ignore[arg-type]
    base = Retriever.from_settings(settings)
    have = set(base.store.list_collections())
    for collection, path in (("grammar", ROOT / "data" / "grammar.jsonl"), ("docs", ROOT / "data" / "docs.jsonl")):
        if collection not in have:
            ingest_file(path, collection, base.store, base.dense, base.sparse, progress=False)
    base.dense = MemoDense(base.dense)  # type: ignore[assignment]
    return HydeRetriever.from_settings(settings, base)


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
        for name, plain in (("a_hyde_vs_raw", False), ("b_plain_both", True)):
            config = SimulationConfig(learners=args.learners, seed=args.seed, plain_both=plain)
            started = time.perf_counter()
            log, stats = asyncio.run(simulate(hr, turns, questions, config, count_tokens=count))
            out[name] = {"seconds": round(time.perf_counter() - started, 1), "replay_served": stats.served,
                         "not_recorded": stats.not_recorded, "stale": stats.stale,
                         "report": outcome_report(log, mde=args.mde)}
            if not plain:
                skewed, dropped = drop_learners(log, "raw", 0.3, seed=args.seed)
                out["c_skewed"] = {"dropped_raw_learners": dropped, "report": outcome_report(skewed, mde=args.mde)}
    finally:
        hr.close()
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--learners", type=int, default=300)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--mde", type=float, default=0.05)
    ap.add_argument("--data-dir", help="Where to ingest the corpora (default: a new temporary folder).")
    ap.add_argument("--json", type=Path, help="Also write the three reports here.")
    args = ap.parse_args()
    out = run(args)
    titles = {"a_hyde_vs_raw": "(a) HyDE vs raw at a 50 % share", "b_plain_both": "(b) A/A: both arms on plain search",
              "c_skewed": "(c) run (a) with 30 % of the raw arm's learners dropped (a broken split)"}
    print(f"{LABEL}\n{out['questions']} eval questions with a recorded agent turn; {out['learners']} learners per run; "
          f"hypothesis tokens counted with {out['token_counter']}, agent tokens pydantic-ai's estimate for a replayed model")
    known = out["known_effect"]
    print(f"known effect on this question pool (each question searched once per treatment, top entry relevant): "
          f"hyde {known['hyde']:.3f}, raw {known['raw']:.3f}, difference {known['difference']:+.3f}")
    for key, title in titles.items():
        extra = (f"; {out[key]['seconds']} s, {out[key]['replay_served']} turns replayed, "
                 f"{out[key]['not_recorded']} not recorded") if "seconds" in out[key] else \
            f"; {out[key]['dropped_raw_learners']} raw learners dropped"
        print(f"\n########## {title} [{LABEL.split(' (')[0]}]{extra}\n")
        print(format_outcome_report(out[key]["report"]))
    if args.json:
        args.json.parent.mkdir(parents=True, exist_ok=True)
        args.json.write_text(json.dumps(out, ensure_ascii=False, indent=1), encoding="utf-8")
        print(f"\nwrote {args.json}", file=sys.stderr)


if __name__ == "__main__":
    main()
