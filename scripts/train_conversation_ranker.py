"""Learn the offline follow-up ranker's weights (``hyde_tutor.hyde.conversation_rank``, issue 39).

Every follow-up search of the chosen sets (the message alone, after the tutor's reply, after the exchange) is read
from ``scripts/conversation_split.py``'s cache (searched once with the real embedder and store; built here when
missing), and the ranker's features are computed by the package's own code (``feature_matrix``). A
conditional-logit model (softmax over each message's candidates, the labelled entries the targets, L2 penalty)
is fitted by full-batch gradient descent from zero: deterministic, no random start.

The penalty is chosen by leave-one-set-out on the training pool: each training set in turn is scored by weights
learned on the others, and the penalty with the best pooled recall@1 of follow-ups wins (a tie: the larger
penalty). The final weights are learned on the whole pool. Only messages read as follow-ups are ranked (a new
question is searched alone), so only they train it. The held-out half and every set named in ``--report`` are
scored, never trained on.

    HYDE_DATA_DIR=<dir with data/grammar.jsonl ingested> .venv/bin/python scripts/train_conversation_ranker.py \\
        --out src/hyde_tutor/hyde/conversation_ranker.json
    # another pool (here: the shipped one plus fresh12 and fresh13), scored on the held-out half and fresh14
    HYDE_DATA_DIR=<…> .venv/bin/python scripts/train_conversation_ranker.py --report heldout,fresh14 \\
        --train tune,fresh,fresh2,fresh3,fresh4,fresh5,fresh6,fresh7,fresh8,fresh9,fresh10,fresh11,fresh12,fresh13
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import os
import sys
from pathlib import Path
from typing import Any

import numpy as np

from hyde_tutor.evaluation.beir import load_beir
from hyde_tutor.evaluation.metrics import recall_at_k
from hyde_tutor.hyde.conversation import fuse_rankings
from hyde_tutor.hyde.conversation_rank import FEATURES, ConversationRanker, FollowUp, feature_matrix

sys.path.insert(0, str(Path(__file__).resolve().parent))
from conversation_split import build  # noqa: E402
from followup_table import SETS  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]
TRAIN = ("tune", "fresh", "fresh2", "fresh3", "fresh4", "fresh5", "fresh6", "fresh7", "fresh8", "fresh9", "fresh10",
         "fresh11")
"""The dev pool: the tuning half and every outside set that had a choice made on it (fresh12 was written after
every choice and is reported, never trained on)."""
REPORT = ("heldout", "fresh12", "fresh13", "fresh14", "fresh15", "fresh16", "fresh17")
PENALTIES = (0.001, 0.01, 0.1)
CHANNELS = ("msg", "rep", "ex")


def examples(rows: list[dict[str, Any]], notations: dict[str, str]) -> list[dict[str, Any]]:
    """Per message read as a follow-up (three searches): its candidates, features and labels."""
    histories = {}
    for name in {r["set"] for r in rows}:
        for q in load_beir(ROOT / SETS[name]).queries:
            histories[(name, q.id)] = q.history
    out = []
    for row in rows:
        hits = row["hits"]
        if not row["detected"] or not all(ch in hits for ch in CHANNELS):
            continue
        searches = [[(d, float(s)) for d, s in hits[ch]] for ch in CHANNELS]
        fused = [d for d, _ in fuse_rankings([[d for d, _ in s] for s in searches], [1.0, 1.0, 1.0])]
        follow_up = FollowUp.from_history(histories[(row["set"], row["id"])], row["texts"]["msg"])
        candidates, x = feature_matrix(follow_up, searches, fused, notations)
        out.append({"row": row, "candidates": candidates, "x": x, "fused": fused, "follow_up": follow_up,
                    "searches": searches, "notations": notations,
                    "y": np.array([float(d in row["qrels"]) for d in candidates])})
    return out


def fit(train: list[dict[str, Any]], penalty: float, steps: int = 400, rate: float = 0.5) -> np.ndarray:
    """The weights minimising the mean negative log-probability of a labelled candidate, plus ``penalty``/2·|w|²."""
    usable = [(e["x"], e["y"]) for e in train if e["y"].sum() > 0]
    w = np.zeros(len(FEATURES))
    for _ in range(steps):
        grad = penalty * w
        for x, y in usable:
            s = x @ w
            p = np.exp(s - s.max())
            p /= p.sum()
            q = p * y / (p * y).sum()
            grad += x.T @ (p - q) / len(usable)
        w -= rate * grad
    return w


def group(row: dict[str, Any]) -> str:
    return row["set"] if row["set"].startswith("fresh") else row["half"]


def recall(examples_: list[dict[str, Any]], w: np.ndarray | None) -> tuple[float, float, int]:
    """Follow-ups' recall@1 / @5 as the ranker with weights ``w`` serves them (None: the RRF fusion as it was)."""
    r1, r5 = [], []
    ranker = None if w is None else ConversationRanker(tuple(float(v) for v in w))
    for e in examples_:
        if e["row"]["kind"] != "followup":
            continue
        ids = e["fused"] if ranker is None else [d for d, _ in ranker.rank(e["follow_up"], e["searches"], e["fused"],
                                                                          e["notations"])]
        r1.append(recall_at_k(ids, e["row"]["qrels"], 1))
        r5.append(recall_at_k(ids, e["row"]["qrels"], 5))
    return (float(np.mean(r1)) if r1 else 0.0, float(np.mean(r5)) if r5 else 0.0, len(r1))


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--out", type=Path, help="write the ranker here (default: only print the figures)")
    ap.add_argument("--cache", type=Path, default=Path(os.environ.get("HYDE_DATA_DIR", ".hyde")) / "conv_hits.json")
    ap.add_argument("--train", default=",".join(TRAIN),
                    help="the training pool: comma-separated sets of scripts/followup_table.py's SETS (fresh…) and "
                         "'tune' for the tuning half (default: the pool the shipped weights were learned on)")
    ap.add_argument("--report", default=",".join(REPORT),
                    help="sets scored and never trained on ('heldout': the held-out half); default: %(default)s")
    args = ap.parse_args()
    train_sets, report_sets = tuple(args.train.split(",")), tuple(args.report.split(","))
    known = {"tune", "heldout", *(s for s in SETS if s.startswith("fresh"))}
    if unknown := [s for s in (*train_sets, *report_sets) if s not in known]:
        ap.error(f"unknown set(s) {unknown}: choose among {sorted(known)}")
    if len(set(train_sets)) != len(train_sets) or len(set(report_sets)) != len(report_sets):
        ap.error("a set is named twice in --train or --report")
    if len(train_sets) < 2:
        ap.error("--train needs at least two sets (the penalty is chosen by leaving one set out)")
    if both := set(train_sets) & set(report_sets):
        ap.error(f"{sorted(both)} both trained on and reported: a reported set is never trained on")
    sets = ["conversations", "followups", *[s for s in SETS if s.startswith("fresh")]]
    recordings = {s: str(ROOT / f"data/recordings/fresh_followups{s[5:]}.v2.rec1.jsonl") for s in sets
                  if s.startswith("fresh")}  # the hypotheses are cached with the rows; the ranker does not read them
    rows = build(sets, recordings, args.cache)
    notations = {json.loads(line)["id"]: json.loads(line)["pattern"]
                 for line in (ROOT / "data/grammar.jsonl").read_text(encoding="utf-8").splitlines() if line.strip()}
    data = examples(rows, notations)
    train = [e for e in data if group(e["row"]) in train_sets]
    print(f"{len(train)} follow-up messages to learn from ({sum(e['row']['kind'] == 'followup' for e in train)} "
          f"labelled follow-ups), {len(FEATURES)} features", file=sys.stderr)
    loso = {}
    for penalty in PENALTIES:
        hits = []
        for left_out in train_sets:
            w = fit([e for e in train if group(e["row"]) != left_out], penalty)
            r1, _, n = recall([e for e in train if group(e["row"]) == left_out], w)
            hits.append((r1 * n, n))
        loso[penalty] = sum(a for a, _ in hits) / sum(n for _, n in hits)
        print(f"penalty {penalty}: leave-one-set-out follow-ups recall@1 {loso[penalty]:.3f}", file=sys.stderr)
    penalty = max(PENALTIES, key=lambda p: (round(loso[p], 3), p))
    w = fit(train, penalty)
    print(f"\nchosen penalty {penalty}; the RRF fusion on the pool: {recall(train, None)[0]:.3f}\n")
    print("| set | follow-ups read as such (n) | RRF fusion (before) r@1 / r@5 | learned r@1 / r@5 |\n|---|---:|---:|---:|")
    for name in (*train_sets, *report_sets):
        part = [e for e in data if group(e["row"]) == name]
        if part:
            b, a = recall(part, None), recall(part, w)
            tag = " (reported, never trained on)" if name in report_sets else ""
            print(f"| {name}{tag} | {b[2]} | {b[0]:.3f} / {b[1]:.3f} | {a[0]:.3f} / {a[1]:.3f} |")
    if args.out:
        note = (f"conditional logit, L2 {penalty} (leave-one-set-out recall@1 {loso[penalty]:.3f}), trained "
                f"{dt.date.today().isoformat()} on {len(train)} follow-up messages of {'+'.join(train_sets)}; "
                f"never on {'+'.join(report_sets)}")
        ranker = ConversationRanker(tuple(round(float(v), 4) for v in w), FEATURES, note)
        args.out.write_text(json.dumps({"features": list(ranker.features), "weights": list(ranker.weights),
                                        "trained_on": note}, ensure_ascii=False, indent=1) + "\n", encoding="utf-8")
        print(f"\nwrote {args.out}", file=sys.stderr)


if __name__ == "__main__":
    main()
