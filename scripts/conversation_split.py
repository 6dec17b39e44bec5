"""Tune the conversation search on one half of the conversation sets, report it on the other (issue 39).

Every text a conversation search can send (the message alone, the previous question + message, the tutor's
reply + message, the whole previous exchange + message) and every recorded hypothesis is searched ONCE with the
real embedder and store (hybrid, depth 30) and cached on disk; the fusions are then replayed in Python, so a grid
over weights costs no search. The split is :func:`hyde_tutor.evaluation.splits.half_of` (SHA-256 of the query id:
even = tune, odd = held out); a fresh set is never tuned on. The figures the docs report come from the real
pipeline (``scripts/followup_table.py --halves``); this script is how the choices were made.

    HYDE_DATA_DIR=$PWD/.hyde .venv/bin/python scripts/conversation_split.py            # cache, grids, report
    HYDE_DATA_DIR=$PWD/.hyde .venv/bin/python scripts/conversation_split.py --sets conversations,followups,fresh \\
        --fresh-recordings data/recordings/fresh_followups.v2.rec1.jsonl

The fourth session's candidate (a long follow-up's own words weigh double) was chosen on the dev pool, the tuning
half and the four outside sets pooled (``--tune-on``), then measured on the held-out half and ``fresh5``, and not
kept (docs/recorded/issue39.tuning.dev_pool.txt):

    HYDE_DATA_DIR=<190-entry dir> .venv/bin/python scripts/conversation_split.py \\
        --sets conversations,followups,fresh,fresh2,fresh3,fresh4 --tune-on tune,fresh,fresh2,fresh3,fresh4 \\
        --fresh-recordings fresh=data/recordings/fresh_followups.v2.rec1.jsonl,fresh2=...,fresh3=...,fresh4=...
"""

from __future__ import annotations

import argparse
import itertools
import json
import os
import sys
from pathlib import Path
from typing import Any

import numpy as np

from hyde_tutor.evaluation.beir import load_beir
from hyde_tutor.evaluation.metrics import recall_at_k
from hyde_tutor.evaluation.splits import half_of
from hyde_tutor.hyde.conversation import REPLY_CHARS, content_words, context_query, last_said, looks_like_followup
from hyde_tutor.hyde.fusion import protect_head, reciprocal_rank_fusion, weighted_score_fusion

sys.path.insert(0, str(Path(__file__).resolve().parent))
from followup_table import SETS, kinds  # noqa: E402

DEPTH = 30
CHANNELS = ("msg", "ctx", "rep", "ex")


def texts_of(history: tuple[tuple[str, str], ...], text: str) -> dict[str, str]:
    """The texts a conversation search can send for ``text`` after ``history`` (as conversation_queries builds them)."""
    text = text.strip()
    out = {"msg": text}
    if not history:
        return out
    reply, previous = last_said(history, "assistant")[:REPLY_CHARS], last_said(history, "user")
    out["ctx"] = context_query(history, text)
    if reply:
        out["rep"] = f"{reply} {text}"[-1000:]
        out["ex"] = f"{previous} {reply} {text}".strip()[-1000:]
    return out


def build(sets: list[str], recordings: dict[str, str | None], cache_path: Path) -> list[dict[str, Any]]:
    """Every query with its texts, its hypothesis (per recording) and the cached hits of each."""
    from tune_policy import Runner, parse_policy

    cache: dict[str, list[list[Any]]] = json.loads(cache_path.read_text()) if cache_path.is_file() else {}
    rows: list[dict[str, Any]] = []
    runners: dict[str | None, Any] = {}
    for name in sets:
        rec = recordings.get(name)
        if rec not in runners:
            runners[rec] = Runner(rec)
        runner = runners[rec]
        hr = runner.retriever_for(parse_policy("default"))
        data, (kind_of, turn1, _) = load_beir(Path(SETS[name])), kinds(SETS[name])

        async def hyp(q: Any) -> str | None:
            gen = await hr.generators.generate("grammar", q.text, 1, 60.0, history=q.history)
            return gen.hypotheses[0].text if gen.hypotheses else None

        for q in data.queries:
            texts = texts_of(q.history, q.text)
            h = runner.loop.run_until_complete(hyp(q))
            if h:
                texts["hyp"] = h
            rows.append({"set": name, "id": q.id, "half": name if name.startswith("fresh") else half_of(q.id),
                         "kind": kind_of[q.id], "turn1": turn1.get(q.id, ""), "qrels": data.qrels[q.id],
                         "detected": bool(q.history) and looks_like_followup(q.text), "texts": texts})
    todo = sorted({t for r in rows for t in r["texts"].values() if t not in cache})
    if todo:
        runner = next(iter(runners.values()))
        r = runner.retriever
        for i in range(0, len(todo), 32):
            chunk = todo[i:i + 32]
            enc = r.encode(chunk, "grammar")
            found = r.store.search_batch("grammar", [r.request(enc, j, DEPTH, collection="grammar")
                                                     for j in range(len(chunk))])
            for t, hits in zip(chunk, found, strict=True):
                cache[t] = [[h.doc_id, float(h.score)] for h in hits]
        cache_path.write_text(json.dumps(cache, ensure_ascii=False))
    for runner in runners.values():
        runner.loop.close()
        runner.retriever.close()
    for row in rows:
        row["hits"] = {ch: cache[t] for ch, t in row["texts"].items()}
    return rows


# -- the offline conversation search ---------------------------------------------------------------

def offline(row: dict[str, Any], cfg: dict[str, Any]) -> list[tuple[str, float]]:
    """The raw channel's ranking: the message alone unless it reads as a follow-up, else the chosen searches
    fused by weighted RRF, the message's own top kept within ``top_within``; ``long``: (words, weight), the
    message's own weight for a follow-up with at least that many content words."""
    hits = row["hits"]
    if not row["detected"] or len(hits) == 1:
        return [(d, s) for d, s in hits["msg"]]
    weights = dict(cfg["w"])
    if "long" in cfg and len(content_words(row["texts"]["msg"])) >= cfg["long"][0]:
        weights["msg"] = cfg["long"][1]
    chans = [(ch, weights[ch]) for ch in CHANNELS if weights.get(ch, 0) > 0 and ch in hits]
    if len(chans) == 1:
        return [(d, s) for d, s in hits[chans[0][0]]]
    rankings = [[d for d, _ in hits[ch]] for ch, _ in chans]
    fused = reciprocal_rank_fusion(rankings, cfg["k"], [w for _, w in chans])
    within = cfg.get("top_within", 0)
    own = hits["msg"][0][0] if hits["msg"] else None
    ids = [d for d, _ in fused]
    if within and own in ids[within:]:
        fused.insert(within - 1, fused.pop(ids.index(own)))
    return fused[:DEPTH]


OFFLINE_BEFORE = {"w": {"msg": 1, "rep": 1, "ex": 1}, "k": 5, "top_within": 2}
"""The conversation search as served (equal weights, RRF k 5, the message's own top kept within 2)."""
OFFLINE_LONG = {**OFFLINE_BEFORE, "long": (3, 2.0)}
"""Tried and not kept (issue 39, fourth session): a follow-up with 3+ content words weighs its own search double.
Chosen on the dev pool (recall@1 0.502 → 0.548), it lost on the held-out half (0.689 → 0.651) and did not help on
``fresh5``, written afterwards (0.419 / 0.650 → 0.412 / 0.662): docs/MEASUREMENTS.md."""


def offline_grid() -> list[dict[str, Any]]:
    grid = []
    for wm, wc, wr, we in itertools.product((0, 0.5, 1, 2), (0, 0.5, 1), (0, 0.5, 1, 2), (0, 0.5, 1, 2)):
        if wm + wc + wr + we == 0:
            continue
        for k in (1, 2, 5, 10, 30, 60):
            for tw in (0, 2, 3):
                grid.append({"w": {"msg": wm, "ctx": wc, "rep": wr, "ex": we}, "k": k, "top_within": tw})
    grid += [{**OFFLINE_BEFORE, "long": (words, w)} for words in (1, 2, 3, 4, 5, 6) for w in (1.5, 2.0, 3.0)]
    return grid


# -- the generated path ------------------------------------------------------------------------------

def generated(row: dict[str, Any], cfg: dict[str, Any]) -> list[tuple[str, float]]:
    """Score fusion of the raw channel and the hypothesis (weight ``w_hyp``); for a message read as a
    follow-up the raw channel is ``raw_fu`` at ``w_raw_fu`` (``conv``: the offline fused ranking, as today)."""
    hits = row["hits"]
    if "hyp" not in hits:
        return offline(row, OFFLINE_BEFORE)
    if row["detected"] and len(hits) > 1:
        source, w_raw = cfg["raw_fu"], cfg["w_raw_fu"]
        raw = offline(row, cfg.get("offline", OFFLINE_BEFORE)) if source == "conv" else hits.get(source, hits["msg"])
    else:
        raw, w_raw = hits["msg"], cfg.get("w_raw_new", 1.0)
    lists = [[(d, s) for d, s in hits["hyp"]]]
    weights = [cfg.get("w_hyp", 3.0)]
    if w_raw > 0:
        lists.insert(0, [(d, s) for d, s in raw])
        weights.insert(0, w_raw)
    fused = weighted_score_fusion(lists, weights)
    lead = cfg.get("lead", 0)
    if lead and row["detected"] and len(hits) > 1 and margin(hits["hyp"]) >= cfg.get("lead_margin", 0.0):
        fused = protect_head(fused, [d for d, _ in hits["hyp"]], lead)
    return fused


def margin(hits: list[list[Any]]) -> float:
    """The top-1 score's lead over the second, as a share of the top-1 score (``stages.top_margin``)."""
    if not hits or hits[0][1] <= 0:
        return 0.0
    return (hits[0][1] - (hits[1][1] if len(hits) > 1 else 0.0)) / hits[0][1]


GENERATED_BEFORE = {"raw_fu": "conv", "w_raw_fu": 1.0}
GENERATED_NOW = {**GENERATED_BEFORE, "lead": 1}
"""The choice (issue 39): the hypothesis's top entry leads a follow-up (``HydePolicy.followup_lead``)."""


def generated_grid() -> list[dict[str, Any]]:
    grid = [{"raw_fu": src, "w_raw_fu": w} for src in ("conv", "msg", "ctx", "rep", "ex")
            for w in (0.0, 0.25, 0.5, 1.0, 2.0)]
    grid = [g for g in grid if not (g["w_raw_fu"] == 0 and g["raw_fu"] != "conv")]
    grid += [{"raw_fu": src, "w_raw_fu": w, "lead": lead, "lead_margin": m} for src in ("conv", "msg", "ex")
             for w in (0.5, 1.0) for lead in (1, 2) for m in (0.0, 0.02, 0.05, 0.1)]
    return grid


# -- scoring -------------------------------------------------------------------------------------------

def score(rows: list[dict[str, Any]], rank: Any, cfg: dict[str, Any]) -> dict[tuple[str, str], tuple[float, float, int]]:
    """(half, kind) → (recall@1, recall@5, n); halves: tune, heldout, fresh, and the sets' own names."""
    acc: dict[tuple[str, str], list[tuple[float, float]]] = {}
    for row in rows:
        ids = [d for d, _ in rank(row, cfg)]
        r = (recall_at_k(ids, row["qrels"], 1), recall_at_k(ids, row["qrels"], 5))
        for key in ((row["half"], row["kind"]), (f"{row['set']}:{row['half']}", row["kind"])):
            acc.setdefault(key, []).append(r)
    return {k: (float(np.mean([a for a, _ in v])), float(np.mean([b for _, b in v])), len(v)) for k, v in acc.items()}


def pick(rows: list[dict[str, Any]], rank: Any, grid: list[dict[str, Any]], top: int = 8,
         tune_on: tuple[str, ...] = ("tune",)) -> list[tuple[Any, ...]]:
    """The grid ranked on the tuning rows only (``tune_on``: the halves and fresh sets pooled; by default the
    tuning half): follow-ups recall@1, then new questions' recall@1, then @5."""
    tune = [{**r, "half": "tune"} for r in rows if r["half"] in tune_on]
    scored = []
    for cfg in grid:
        s = score(tune, rank, cfg)
        fu, new = s.get(("tune", "followup"), (0, 0, 0)), s.get(("tune", "new"), (0, 0, 0))
        scored.append(((round(fu[0], 4), round(new[0], 4), round(fu[1], 4)), cfg))
    scored.sort(key=lambda x: x[0], reverse=True)
    return scored[:top]


def table(rows: list[dict[str, Any]], rank: Any, label_cfgs: dict[str, dict[str, Any]]) -> None:
    halves = [h for h in ("tune", "heldout", *(n for n in SETS if n.startswith("fresh")))
              if any(r["half"] == h for r in rows)]
    print("| config | " + " | ".join(f"{h} follow-ups r@1 / r@5 (n) | {h} new r@1 / r@5 (n)" for h in halves) + " |")
    print("|---|" + "---|" * (2 * len(halves)))
    for label, cfg in label_cfgs.items():
        s = score(rows, rank, cfg)
        cells = []
        for h in halves:
            for kind in ("followup", "new"):
                v = s.get((h, kind))
                cells.append(f"{v[0]:.3f} / {v[1]:.3f} ({v[2]})" if v else "–")
        print(f"| {label} | " + " | ".join(cells) + " |")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--sets", default="conversations,followups")
    ap.add_argument("--fresh-recordings", default=None, help="the hypotheses of every fresh set (one file each: "
                    "name=path,name=path; a bare path is the first fresh set's)")
    ap.add_argument("--tune-on", default="tune", help="what the grids are chosen on: halves and fresh sets, pooled "
                    "(e.g. tune,fresh,fresh2,fresh3,fresh4); never a set reported as unseen")
    ap.add_argument("--cache", type=Path, default=Path(os.environ.get("HYDE_DATA_DIR", ".hyde")) / "conv_hits.json")
    ap.add_argument("--dump", type=Path, help="write the rows (texts, hits) here")
    args = ap.parse_args()
    sets = [s for s in args.sets.split(",") if s]
    recs = dict(p.split("=", 1) for p in (args.fresh_recordings or "").split(",") if "=" in p)
    if args.fresh_recordings and "=" not in args.fresh_recordings:
        recs = {"fresh": args.fresh_recordings}
    rows = build(sets, recs, args.cache)
    tune_on = tuple(args.tune_on.split(","))
    if args.dump:
        args.dump.write_text(json.dumps(rows, ensure_ascii=False))
    print(f"\n## offline conversation search: best on {'+'.join(tune_on)}\n")
    for key, cfg in pick(rows, offline, offline_grid(), tune_on=tune_on):
        print(key, cfg)
    print(f"\n## generated path: best on {'+'.join(tune_on)}\n")
    for key, cfg in pick(rows, generated, generated_grid(), top=12, tune_on=tune_on):
        print(key, cfg)
    print("\n## offline: the conversation search kept, and the message alone\n")
    table(rows, offline, {"conversation search, equal weights (served)": OFFLINE_BEFORE,
                          "conversation search, a long follow-up's own words double (tried)": OFFLINE_LONG,
                          "message alone": {"w": {"msg": 1}, "k": 5}})
    print("\n## generated: before, and the hypothesis leads a follow-up (the choice)\n")
    table(rows, generated, {"before": GENERATED_BEFORE, "hypothesis leads": GENERATED_NOW})


if __name__ == "__main__":
    main()
