"""One call at the quality of two? Policies × LLM calls × tokens × recall@1 / hit@1 / nDCG@10, per set and half.

The levers of issue 29 item 4 for a capable generator, each run through the real pipeline with the replayed
recordings (``scripts/tune_policy.py``'s runner: every policy pays for its own calls): how the raw query and
ONE hypothesis are fused (mode, weight, legs), a short second perspective in the SAME call
(``generation=one_call``, ``n_hypotheses=2``: one request, the system prompt once), and the cascade (no call when
the raw ranking is sure: fewer than one call per search). The target row is two separate calls.

Choose on the bundled sets (grammar, docs); the hold-out (grammar_holdout) and the even/odd halves only check.

    .venv/bin/python scripts/one_call_table.py --json docs/recorded/one_call.json > docs/recorded/one_call.md
    .venv/bin/python scripts/one_call_table.py --only "N=1 (default)" --policy "n_hypotheses=2,generation=one_call"

``recall@1``: the share of a query's relevant entries at rank 1 (a query with two relevant entries scores 0.5
at best); ``hit@1``: whether the top entry is relevant.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Any

import numpy as np

from hyde_tutor.corpus.ingest import IngestRequest, ingest_file
from hyde_tutor.evaluation.beir import load_beir
from hyde_tutor.evaluation.metrics import ndcg_at_k, recall_at_k

sys.path.insert(0, str(Path(__file__).resolve().parent))
from tune_policy import SETS, Runner, corpus_file, parse_policy  # noqa: E402

ONE = "n_hypotheses=1,cascade_margin=0"
SEP2 = "n_hypotheses=2,generation=separate,cascade_margin=0"
OC2 = "n_hypotheses=2,generation=one_call,cascade_margin=0"
POLICIES: dict[str, str] = {
    "raw (no HyDE)": "hyde=0",
    "N=1 (default)": "default",
    "N=1, one hypothesis for both searches, grammar writes it (retrieve-first)": "default,share=listed",
    "N=1, one hypothesis for both searches, the nearest collection writes it (retrieve-first default)":
        "default,share=closest",
    "N=2 separate (target)": SEP2,
    "N=2 separate, w6": f"{SEP2},hypothesis_weight=6",
    **{f"N=1, w{w}": f"{ONE},hypothesis_weight={w}" for w in (1, 2, 4, 6)},
    **{f"N=1, {m}": f"{ONE},fusion={m}" for m in ("rrf", "max", "mean")},
    "N=1, dense leg only": f"{ONE},legs=dense",
    "N=2 one call": OC2,
    **{f"N=2 one call, w{w}": f"{OC2},hypothesis_weight={w}" for w in (2, 4, 6)},
    **{f"N=2 one call, {m}": f"{OC2},fusion={m}" for m in ("rrf", "max", "mean")},
    "N=2 one call, hypotheses only": f"{OC2},only=1",
    "N=4 one call": "n_hypotheses=4,generation=one_call,cascade_margin=0",
    **{f"N=2 one call, cascade {t}": f"{OC2.rsplit(',', 1)[0]},cascade_margin={t}" for t in (0.1, 0.2, 0.3, 0.4)},
    **{f"N=1, cascade {t}": f"n_hypotheses=1,cascade_margin={t}" for t in (0.1, 0.15, 0.2, 0.25, 0.3, 0.35, 0.4)},
}
HALVES = ("all", "even", "odd")
CONVERSATIONS = ("conversations", "data/eval/conversations", "grammar", "grammar_search")
"""Follow-ups and new questions asked mid-chat (``--sets followups,conversations``): searched with their history."""


def score(data: Any, ranked: list[list[str]]) -> dict[str, dict[str, float]]:
    """recall@1, hit@1 and nDCG@10 over all queries and the even / odd halves (by position in the set)."""
    rows = [(recall_at_k(r, data.qrels[q.id], 1), float(bool(r) and r[0] in data.qrels[q.id]),
             ndcg_at_k(r, data.qrels[q.id], 10)) for q, r in zip(data.queries, ranked)]
    out = {}
    for name, sub in (("all", rows), ("even", rows[0::2]), ("odd", rows[1::2])):
        r1, h1, nd = (float(np.mean(col)) for col in zip(*sub))
        out[name] = {"r1": r1, "hit1": h1, "ndcg10": nd, "n": len(sub)}
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--sets", default="grammar,docs,holdout")
    ap.add_argument("--only", action="append", help="run only these labels of the built-in list (repeatable)")
    ap.add_argument("--policy", action="append", help="an extra policy spec (repeatable)")
    ap.add_argument("--json", type=Path)
    ap.add_argument("--retrieve-first", action="store_true",
                    help="search as RetrieveFirst does (grammar AND docs per message); calls per turn")
    args = ap.parse_args()
    policies = {k: v for k, v in POLICIES.items() if (not args.only or k in args.only)
                and (args.retrieve_first or not _share(v)[0])}  # sharing is retrieve-first's lever
    policies.update({s: s for s in args.policy or []})
    sets = [s for s in (*SETS, CONVERSATIONS) if s[0] in args.sets.split(",")]
    runner = Runner(None)
    listed = runner.retriever.store.list_collections()
    for collection in dict.fromkeys(s[2] for s in sets):
        if collection not in listed:
            r = runner.retriever
            ingest_file(corpus_file(collection), IngestRequest(collection=collection, progress=False), r.store, r.dense, r.sparse)
    figures: dict[str, Any] = {}
    for label, spec in policies.items():
        share = _share(spec)  # retrieve-first: one hypothesis for both searches, written by which collection
        policy = parse_policy(",".join(p for p in spec.split(",") if not p.startswith("share=")))
        figures[label] = {"spec": spec}
        for name, root, collection, tool in sets:
            data = load_beir(Path(root))
            outcomes = (retrieve_first(runner, policy, collection, data.queries, share) if args.retrieve_first
                        else runner.run(policy, collection, tool, data.queries))
            n = len(outcomes)
            figures[label][name] = {**score(data, [o.ranked for o in outcomes]),
                                    "calls": sum(o.calls for o in outcomes) / n,
                                    "tokens": sum(o.tokens_in + o.tokens_out for o in outcomes) / n,
                                    "by_query": {q.id: o.ranked[:1] for q, o in zip(data.queries, outcomes)}}
        print(f"done: {label}", file=sys.stderr)
    runner.loop.close()
    runner.retriever.close()
    print_table(figures, [s[0] for s in sets])
    if args.json:
        args.json.write_text(json.dumps(figures, ensure_ascii=False, indent=1))


def _share(spec: str) -> tuple[bool, str]:
    """A spec's ``share=`` token as :class:`RetrieveFirst`'s (``share_hypothesis``, ``order``): ``0`` one
    hypothesis per collection, ``listed`` grammar writes the shared one, ``closest`` the nearest collection does."""
    value = next((p.split("=", 1)[1] for p in spec.split(",") if p.startswith("share=")), "0")
    return value != "0", value if value != "0" else "listed"


def retrieve_first(runner: Runner, policy: Any, collection: str, queries: list[Any],
                   share: tuple[bool, str] = (False, "listed")) -> list[Any]:
    """Each question as :class:`RetrieveFirst` searches it before the tutor answers: grammar AND docs, one
    search each. The ranking scored is ``collection``'s; the calls are the turn's, both searches together.

    A hypothesis that was never recorded (the other collection's prompt for these questions; replay falls back
    to plain search) is counted as the call the policy would make. When the turn's shared hypothesis is such
    an unrecorded one (the nearest collection is not the scored one and its prompt was never recorded for the
    question), the scored ranking is the PLAIN one, a lower bound: the pipeline would have searched a
    hypothesis we cannot replay; ``unmeasured`` counts those turns.
    ``share``: :attr:`RetrieveFirst.share_hypothesis` and :attr:`RetrieveFirst.order`."""
    from hyde_tutor.plugin.deps import TutorDeps
    from hyde_tutor.plugin.capabilities import RetrieveFirst

    from tune_policy import Outcome

    if not policy.use_hyde:  # RetrieveFirst leaves HyDE to the policy: plain search is the policy's "off"
        policy = type(policy)(overrides={**policy.overrides, "enabled": False}, use_hyde=False)
    hr = runner.retriever_for(policy)
    ids_of = {json.loads(line)["_id"] for line in open(f"data/eval/{collection}/corpus.jsonl", encoding="utf-8")}
    step = RetrieveFirst(grammar_top_k=10, docs_top_k=10, share_hypothesis=share[0], order=share[1])
    hyde = runner.settings.hyde.model_copy(update=policy.overrides)
    n = hyde.n_hypotheses or 1
    would_call = 0 if not policy.use_hyde else (1 if hyde.generation == "one_call" else n)

    unmeasured: list[str] = []

    async def all_() -> list[Any]:
        out = []
        for q in queries:
            records: list[Any] = []
            monitor = type("Capture", (), {"record": lambda self, r: records.append(r)})()
            deps = TutorDeps(retriever=hr, monitor=monitor)
            found = await step.search(deps, q.text, tuple(q.history))
            mine = next((r for r in records if r.collection == collection), None)
            calls = tokens_in = tokens_out = 0
            for r in records:
                if r.collection == collection or r.skipped or not r.use_hyde or r.fallback_reason != "not_recorded":
                    calls += r.llm_calls
                    tokens_in, tokens_out = tokens_in + r.tokens_in, tokens_out + r.tokens_out
                else:
                    calls += would_call
            ids = [e["id"] for e in found if e["id"] in ids_of] if mine else []
            first = records[0] if records else None
            if (share[0] and first is not None and first.collection != collection
                    and first.fallback_reason == "not_recorded"):  # the shared hypothesis cannot be replayed
                plain = await hr.search(collection, q.text, top_k=10, use_hyde=False, history=tuple(q.history))
                ids, calls, tokens_in, tokens_out = [d.id for d in plain.results], would_call, 0, 0
                unmeasured.append(q.id)
            out.append(Outcome(ids[:10], calls, tokens_in, tokens_out))
        if unmeasured:
            print(f"  {collection}: {len(unmeasured)} turns scored with the plain ranking (the nearest collection's "
                  f"hypothesis was never recorded): {', '.join(unmeasured)}", file=sys.stderr)
        return out

    return runner.loop.run_until_complete(all_())


def print_table(figures: dict[str, Any], names: list[str]) -> None:
    head = " | ".join(f"{n}: calls · tok · r@1 · hit@1 · nDCG@10 · r@1 even/odd" for n in names)
    print(f"| policy | {head} |")
    print("|---|" + "---|" * len(names))
    for label, fig in figures.items():
        cells = []
        for n in names:
            f = fig[n]
            cells.append(f"{f['calls']:.2f} · {f['tokens']:.0f} · {f['all']['r1']:.3f} · {f['all']['hit1']:.3f} · "
                         f"{f['all']['ndcg10']:.3f} · {f['even']['r1']:.3f}/{f['odd']['r1']:.3f}")
        print(f"| {label} | " + " | ".join(cells) + " |")


if __name__ == "__main__":
    main()
