"""Score HyDE policies on the bundled eval sets with recorded capable-model hypotheses.

Every policy runs through the real pipeline (``HydeRetriever.search``) with the ``replay`` provider,
so the figures are what a user gets with those settings. Dense vectors of repeated texts are cached
in memory (a policy sweep embeds the same hypotheses many times); nothing else is shortcut.

    .venv/bin/python scripts/tune_policy.py                       # the report table (make eval-recorded)
    .venv/bin/python scripts/tune_policy.py --policies sweep      # the wider sweep the default was chosen from
    .venv/bin/python scripts/tune_policy.py --policy "fusion=rrf,rrf_k=10,raw_weight=0.5"

A policy is ``key=value`` pairs over HydeSettings fields (fusion, rrf_k, raw_weight, hypothesis_weight,
n_hypotheses, hypothesis_length, legs, min_agreement) plus ``only=1`` (hypothesis channels without
the raw query) and ``hyde=0`` (plain retrieval). ``default`` is the API-model default policy.
Output: nDCG@10 and recall@1 per set, per query group and per even/odd half; and how many queries
score below raw.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import sys
from pathlib import Path
from typing import Any

import numpy as np

from hyde_tutor.config import Settings
from hyde_tutor.evaluation.beir import load_beir
from hyde_tutor.hyde import HydeRetriever
from hyde_tutor.hyde.hypotheses import HypothesisGenerator, MemoryCache
from hyde_tutor.corpus.ingest import ingest_file
from hyde_tutor.llm.backends import replay_backend
from hyde_tutor.evaluation.metrics import ndcg_at_k, recall_at_k
from hyde_tutor.retrieval.retriever import Retriever

SETS = [("grammar", "data/eval/grammar", "grammar"), ("docs", "data/eval/docs", "docs"),
        ("holdout", "data/eval/grammar_holdout", "grammar")]

REPORT = {  # the table (N=3, as API users had it), then the chosen default
    "raw": "hyde=0",
    "rrf N=3 (old API default)": "fusion=rrf,rrf_k=60,raw_weight=1,hypothesis_weight=1,n_hypotheses=3",
    "max N=3": "fusion=max,n_hypotheses=3",
    "mean N=3": "fusion=mean,n_hypotheses=3",
    "hyde_only N=3": "only=1,fusion=rrf,rrf_k=60,hypothesis_weight=1,n_hypotheses=3",
    "**default: score, N=4, weight 6**": "default",
}

def _sweep() -> dict[str, str]:
    """Every mode at N=3 and N=4: rrf over k and the raw query's weight (hypotheses at 1 each), score over
    the hypotheses' total weight (the raw query at 1), max, mean, and hypotheses alone."""
    out = {"raw": "hyde=0"}
    for n in (3, 4):
        for k, w in ((60, 1), (20, 1), (10, 1), (5, 1), (2, 1), (60, 0.5), (10, 0.5), (5, 0.5), (2, 0.5), (5, 0.25)):
            out[f"N={n} rrf k{k} raw w{w}"] = f"fusion=rrf,rrf_k={k},raw_weight={w},hypothesis_weight=1,n_hypotheses={n}"
        for w in (1, 2, 3, 4, 6, 10):
            out[f"N={n} score hyp w{w}"] = f"fusion=score,hypothesis_weight={w},n_hypotheses={n}"
        out[f"N={n} max"] = f"fusion=max,n_hypotheses={n}"
        out[f"N={n} mean"] = f"fusion=mean,n_hypotheses={n}"
        out[f"N={n} hyde_only rrf k60"] = f"only=1,fusion=rrf,rrf_k=60,hypothesis_weight=1,n_hypotheses={n}"
        out[f"N={n} hyde_only max"] = f"only=1,fusion=max,n_hypotheses={n}"
    out["**default: score N=4 w6**"] = "default"
    return out


SWEEP = _sweep()

ABLATIONS = {
    "raw": "hyde=0",
    "default": "default",
    "default, N=1": "default,n_hypotheses=1",
    "default, N=2": "default,n_hypotheses=2",
    "default, N=3": "default,n_hypotheses=3",
    "default, N=4": "default,n_hypotheses=4",
    "default, 160 chars": "default,hypothesis_length=160",
    "default, 256 chars": "default,hypothesis_length=256",
    "default, 512 chars": "default,hypothesis_length=512",
    "default, 1024 chars": "default,hypothesis_length=1024",
    "default, HyDE on dense leg only": "default,legs=dense",
    "default, HyDE on sparse leg only": "default,legs=sparse",
    "default, HyDE on both legs": "default,legs=both",
}
CHOICES = {"report": REPORT, "sweep": SWEEP, "ablations": ABLATIONS}


class CachedDense:
    """Memoises the real embedder's vectors by text (a sweep embeds the same hypotheses many times)."""

    def __init__(self, inner: Any) -> None:
        self.inner, self.name, self.dim = inner, inner.name, inner.dim
        self._memo: dict[str, np.ndarray] = {}

    def embed(self, texts: list[str]) -> np.ndarray:
        todo = [t for t in dict.fromkeys(texts) if t not in self._memo]
        if todo:
            for t, v in zip(todo, self.inner.embed(todo), strict=True):
                self._memo[t] = v
        return np.vstack([self._memo[t] for t in texts]) if texts else np.zeros((0, self.dim), np.float32)


def parse_policy(spec: str) -> tuple[dict[str, Any], bool, bool]:
    """-> (HydeSettings overrides, use_hyde, include_raw)."""
    overrides: dict[str, Any] = {}
    use, include_raw = True, True
    for item in filter(None, (s.strip() for s in spec.split(","))):
        if item == "default":
            continue
        key, _, value = item.partition("=")
        if key == "hyde":
            use = value != "0"
        elif key == "only":
            include_raw = value != "1"
        elif key in ("fusion", "legs"):
            overrides[key] = value
        elif key in ("rrf_k", "n_hypotheses", "hypothesis_length", "min_agreement"):
            overrides[key] = int(value)
        else:
            overrides[key] = float(value)
    return overrides, use, include_raw


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--policies", default="report", choices=sorted(CHOICES))
    ap.add_argument("--policy", action="append", help="extra policy spec (repeatable)")
    ap.add_argument("--recordings", default=None, help="HYDE_LLM__RECORDINGS (default data/recordings)")
    ap.add_argument("--json", type=Path, help="also write all figures here")
    ap.add_argument("--per-query", action="store_true", help="list queries that score below raw")
    args = ap.parse_args()
    policies = dict(CHOICES[args.policies])
    for spec in args.policy or []:
        policies[spec] = spec

    settings = Settings()
    retriever = Retriever.from_settings(settings)
    retriever.dense = CachedDense(retriever.dense)  # type: ignore[assignment]
    backend = replay_backend(args.recordings)
    cache = MemoryCache(100_000)
    print(f"recordings: {backend.name}", file=sys.stderr)
    for _, _, collection in SETS:
        if collection not in retriever.store.list_collections():
            ingest_file(Path(f"data/eval/{collection}/corpus.jsonl"), collection, retriever.store, retriever.dense, retriever.sparse,
                        progress=False)

    def factory_for(hyde: Any) -> Any:
        return lambda domain: HypothesisGenerator.for_backend(backend, domain, hyde=hyde, llm=settings.llm, cache=cache)

    loop = asyncio.new_event_loop()
    figures: dict[str, dict[str, Any]] = {}
    raw_per_query: dict[str, dict[str, float]] = {}
    for label, spec in policies.items():
        overrides, use, include_raw = parse_policy(spec)
        hyde = settings.hyde.model_copy(update=overrides)
        hr = HydeRetriever(retriever, factory_for(hyde), hyde, weak_model=False)
        figures[label] = {"spec": spec, "policy": str(hr.policy) if use else "no HyDE"}
        for name, root, collection in SETS:
            data = load_beir(Path(root))

            async def run_all() -> list[Any]:
                return [await hr.search(collection, q.text, top_k=10, use_hyde=use, include_raw=include_raw)
                        for q in data.queries]

            results = loop.run_until_complete(run_all())
            nd = {q.id: ndcg_at_k([d.id for d in r.results], data.qrels[q.id], 10) for q, r in zip(data.queries, results)}
            r1 = {q.id: recall_at_k([d.id for d in r.results], data.qrels[q.id], 1) for q, r in zip(data.queries, results)}
            fallbacks: dict[str, int] = {}
            for r in results:
                if use and r.fallback_reason:
                    fallbacks[r.fallback_reason] = fallbacks.get(r.fallback_reason, 0) + 1
            if not use:
                raw_per_query[name] = nd
            subsets = {"all": data.queries, "even": data.queries[0::2], "odd": data.queries[1::2],
                       "named": [q for q in data.queries if q.group == "named"],
                       "unnamed": [q for q in data.queries if q.group == "unnamed"]}
            row = {k: (float(np.mean([nd[q.id] for q in qs])), float(np.mean([r1[q.id] for q in qs])), len(qs))
                   for k, qs in subsets.items() if qs}
            base = raw_per_query.get(name)
            worse = [q.id for q in data.queries if base and nd[q.id] < base[q.id] - 1e-9]
            better = [q.id for q in data.queries if base and nd[q.id] > base[q.id] + 1e-9]
            figures[label][name] = {"subsets": row, "worse": worse, "better": better, "fallbacks": fallbacks}
    loop.close()
    retriever.close()
    _print(figures, args.per_query)
    if args.json:
        args.json.write_text(json.dumps(figures, ensure_ascii=False, indent=1))


def _print(figures: dict[str, dict[str, Any]], per_query: bool) -> None:
    names = [n for n, _, _ in SETS]
    print("nDCG@10 / recall@1 (all queries); even | odd halves; named | unnamed groups; queries better/worse than raw")
    head = "| policy | " + " | ".join(f"{n} all" for n in names) + " | " + " | ".join(
        f"{n} even/odd" for n in names) + " | " + " | ".join(f"{n} named/unnamed" for n in names) + " | +/− vs raw |"
    print(head)
    print("|" + "---|" * (head.count("|") - 1))
    for label, fig in figures.items():
        cells = []
        for n in names:
            a = fig[n]["subsets"]["all"]
            cells.append(f"{a[0]:.3f} / {a[1]:.2f}")
        for n in names:
            s = fig[n]["subsets"]
            cells.append(f"{s['even'][0]:.3f} / {s['odd'][0]:.3f}")
        for n in names:
            s = fig[n]["subsets"]
            cells.append(f"{s['named'][0]:.3f} / {s['unnamed'][0]:.3f}" if "named" in s else "–")
        moves = " ".join(f"{n[0]}:+{len(fig[n]['better'])}/−{len(fig[n]['worse'])}" for n in names)
        print(f"| {label} | " + " | ".join(cells) + f" | {moves} |")
    for label, fig in figures.items():
        fb = {n: fig[n]["fallbacks"] for n in names if fig[n]["fallbacks"]}
        if fb:
            print(f"fallbacks, {label}: {fb}")
        if per_query:
            for n in names:
                if fig[n]["worse"]:
                    print(f"below raw, {label}, {n}: {' '.join(fig[n]['worse'])}")


if __name__ == "__main__":
    main()
