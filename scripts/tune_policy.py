"""Score HyDE policies on the bundled eval sets with recorded capable-model generations: quality AND cost.

Every policy runs through the real pipeline (``HydeRetriever.search``) with the ``replay`` provider, so
the figures are what a user gets with those settings. Agent policies (``agent=replace|add``) run the
whole tools path: a pydantic-ai ``Agent`` with the real toolset, whose model replays the recorded tool
calls of a capable tutor agent (``data/recordings/agent/``). Dense vectors of repeated texts are cached
in memory (a sweep embeds the same hypotheses many times); hypotheses are NOT cached across policies,
so every policy pays for its own LLM calls.

Cost per search: LLM calls, and input/output tokens counted with the embedded Qwen2.5's tokenizer
(``counted:qwen2.5-gguf-vocab``: the replayed requests are rendered in ChatML and tokenized offline).
For agent policies, ``agent tok`` is what the agent wrote into its tool call's ``hypothesis``: output
tokens of the agent's own response, which it pays instead of a generation call.

    .venv/bin/python scripts/tune_policy.py                      # the cost table (make eval-recorded)
    .venv/bin/python scripts/tune_policy.py --policies cascade   # the cascade thresholds, for calibration
    .venv/bin/python scripts/tune_policy.py --policies sweep     # the fusion sweep the old default came from
    .venv/bin/python scripts/tune_policy.py --policy "n_hypotheses=2,generation=one_call"

A policy is ``key=value`` pairs over HydeSettings fields (fusion, rrf_k, raw_weight, hypothesis_weight,
n_hypotheses, hypothesis_length, legs, min_agreement, generation, cascade_margin) plus ``only=1``
(hypothesis channels without the raw query), ``hyde=0`` (plain retrieval) and ``agent=replace|add``
(the tools path with recorded agent-written hypotheses). ``default`` is the policy in force.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import sys
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from hyde_tutor.config import Settings
from hyde_tutor.corpus.ingest import IngestRequest, ingest_file
from hyde_tutor.evaluation.beir import load_beir
from hyde_tutor.evaluation.metrics import ndcg_at_k, recall_at_k
from hyde_tutor.hyde import HydeRetriever
from hyde_tutor.hyde.hypotheses import HypothesisGenerator, MemoryCache
from hyde_tutor.hyde.requests import render_recording
from hyde_tutor.llm.backends import replay_backend
from hyde_tutor.retrieval.retriever import Retriever

SETS = [("grammar", "data/eval/grammar", "grammar", "grammar_search"),
        ("docs", "data/eval/docs", "docs", "docs_search"),
        ("holdout", "data/eval/grammar_holdout", "grammar", "grammar_search"),
        ("passage_en", "data/eval/passage_en", "passage_en", None),
        ("followups", "data/eval/followups", "grammar", "grammar_search")]
AGENT_RECORDINGS = Path("data/recordings/agent")

# Today's default before this table (score fusion, N=4 separate calls, hypotheses weight 6), spelled out so
# the row stays what it was whatever the default becomes.
OLD_DEFAULT = "fusion=score,hypothesis_weight=6,n_hypotheses=4,generation=separate,cascade_margin=0"
REPORT = {
    "raw (no HyDE)": "hyde=0",
    "old default: N=4 separate": OLD_DEFAULT,
    "N=1": "fusion=score,hypothesis_weight=6,n_hypotheses=1,cascade_margin=0",
    "N=2 separate": "fusion=score,hypothesis_weight=6,n_hypotheses=2,generation=separate,cascade_margin=0",
    "N=2 one call": "fusion=score,hypothesis_weight=6,n_hypotheses=2,generation=one_call,cascade_margin=0",
    "N=4 one call": "fusion=score,hypothesis_weight=6,n_hypotheses=4,generation=one_call,cascade_margin=0",
    "N=2 one call, cascade 0.32": "fusion=score,hypothesis_weight=6,n_hypotheses=2,generation=one_call,cascade_margin=0.32",
    "N=2 one call, cascade 0.38": "fusion=score,hypothesis_weight=6,n_hypotheses=2,generation=one_call,cascade_margin=0.38",
    "N=2 one call, cascade 0.42": "fusion=score,hypothesis_weight=6,n_hypotheses=2,generation=one_call,cascade_margin=0.42",
    "N=1, cascade 0.38": "fusion=score,hypothesis_weight=6,n_hypotheses=1,cascade_margin=0.38",
    "agent hypothesis alone": "agent=replace,fusion=score,hypothesis_weight=6,cascade_margin=0",
    "agent hypothesis + N=2 one call": "agent=add,fusion=score,hypothesis_weight=6,n_hypotheses=2,generation=one_call,"
                                       "cascade_margin=0",
    "**default (in force)**": "default",
}
CASCADE = {"raw (no HyDE)": "hyde=0", "N=2 one call, no cascade": REPORT["N=2 one call"]}
for _t in (0.05, 0.10, 0.15, 0.20, 0.25, 0.30, 0.40, 0.50):
    CASCADE[f"N=2 one call, cascade {_t:.2f}"] = f"{REPORT['N=2 one call'].rsplit(',', 1)[0]},cascade_margin={_t}"
SWEEP = {"raw": "hyde=0", **{f"N={n} {mode}": f"fusion={mode},n_hypotheses={n},cascade_margin=0"
                             for n in (1, 2, 4) for mode in ("rrf", "max", "mean", "score")}}
SWEEP.update({f"N={n} score w{w}": f"fusion=score,hypothesis_weight={w},n_hypotheses={n},cascade_margin=0"
              for n in (1, 2, 4) for w in (1, 2, 3, 6, 10)})
FOLLOWUPS = {
    "raw, last message alone": "hyde=0,history=0",
    "raw, previous question + last message (context)": "hyde=0",
    "N=1 hypothesis from the conversation + context": "default",
    "N=1 hypothesis, v1 follow-up request + context": "followup_request_version=1",
    "agent hypothesis (tools path, conversation in the request)": "agent=replace,cascade_margin=0",
}
CHOICES = {"report": REPORT, "cascade": CASCADE, "sweep": SWEEP, "followups": FOLLOWUPS}


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

    def close(self) -> None:
        close = getattr(self.inner, "close", None)
        if callable(close):
            close()


@dataclass
class Policy:
    overrides: dict[str, Any] = field(default_factory=dict)
    use_hyde: bool = True
    include_raw: bool = True
    agent: str | None = None
    history: bool = True
    """Follow-ups: search with the conversation (``history=0``: the last message alone)."""


PROJECT_FILES = {"grammar": Path("data/grammar.jsonl"), "docs": Path("data/docs.jsonl")}
"""What the replays ingest for the tutor's collections: the project files, as `hyde-tutor ingest` does, so the
payload has every field the pipeline reads (``pattern`` for the named lead); the BEIR ``corpus.jsonl`` of an eval
set is the same title + text (tests/test_corpus.py keeps them in step) with no other field."""


def corpus_file(collection: str) -> Path:
    """The file a replay ingests for ``collection``: the project file, else the eval set's BEIR corpus."""
    return PROJECT_FILES.get(collection, Path("data/eval") / collection / "corpus.jsonl")


def parse_policy(spec: str) -> Policy:
    policy = Policy()
    for item in filter(None, (s.strip() for s in spec.split(","))):
        if item == "default":
            continue
        key, _, value = item.partition("=")
        if key == "hyde":
            policy.use_hyde = value != "0"
        elif key == "only":
            policy.include_raw = value != "1"
        elif key == "history":
            policy.history = value != "0"
        elif key == "agent":
            policy.agent = value
            policy.overrides["agent_hypothesis"] = value
        elif key in ("fusion", "legs", "generation"):
            policy.overrides[key] = value
        elif key in ("rrf_k", "n_hypotheses", "hypothesis_length", "min_agreement", "followup_request_version",
                     "followup_lead", "named_lead", "named_lead_new"):
            policy.overrides[key] = int(value)
        else:
            policy.overrides[key] = float(value)
    return policy


@dataclass
class Outcome:
    """One query under one policy: the ranking and what it cost."""

    ranked: list[str]
    calls: int = 0
    tokens_in: int = 0
    tokens_out: int = 0
    agent_tokens: int = 0
    skipped: bool = False
    fallback: str | None = None
    sources: tuple[str, ...] = ()


class Runner:
    def __init__(self, recordings: str | None) -> None:
        self.settings = Settings()
        self.retriever = Retriever.from_settings(self.settings)
        self.retriever.dense = CachedDense(self.retriever.dense)  # type: ignore[assignment]
        self.backend = replay_backend(recordings, self.settings.data_dir / "models", render=render_recording)
        self.loop = asyncio.new_event_loop()
        self.agent_turns: dict[str, Any] | None = None
        print(f"recordings: {self.backend.name}; tokens "
              f"{'counted:' + self.backend.token_counter.name if self.backend.token_counter else 'estimated'}",
              file=sys.stderr)

    def retriever_for(self, policy: Policy) -> HydeRetriever:
        hyde = self.settings.hyde.model_copy(update=policy.overrides)
        cache = MemoryCache(100_000)  # per policy: every policy pays for its own calls
        factory = lambda domain: HypothesisGenerator.for_backend(self.backend, domain, hyde=hyde,  # noqa: E731
                                                                 llm=self.settings.llm, cache=cache)
        return HydeRetriever(self.retriever, factory, hyde, weak_model=False)

    def run(self, policy: Policy, collection: str, tool: str | None, queries: list[Any]) -> list[Outcome]:
        hr = self.retriever_for(policy)
        if policy.agent:
            if tool is None:
                return []
            return self.loop.run_until_complete(self._agent(hr, collection, tool, queries))

        async def all_() -> list[Outcome]:
            out = []
            for q in queries:
                r = await hr.search(collection, q.text, top_k=10, use_hyde=policy.use_hyde,
                                    include_raw=policy.include_raw, history=q.history if policy.history else ())
                out.append(Outcome([d.id for d in r.results], r.usage.requests, r.usage.input_tokens,
                                   r.usage.output_tokens, skipped=r.skipped is not None,
                                   fallback=r.fallback_reason if policy.use_hyde else None,
                                   sources=tuple(h.source for h in r.hypotheses)))
            return out

        return self.loop.run_until_complete(all_())

    async def _agent(self, hr: HydeRetriever, collection: str, tool: str, queries: list[Any]) -> list[Outcome]:
        from pydantic_ai import Agent

        from hyde_tutor.evaluation.agent_replay import AgentReplayModel, ReplayStats, load_agent_turns
        from hyde_tutor.plugin.toolset import HydeSearchToolset, TutorDeps, tutor_instructions

        if self.agent_turns is None:
            self.agent_turns = load_agent_turns(sorted(AGENT_RECORDINGS.glob("*.jsonl")))
        stats = ReplayStats()
        agent = Agent(AgentReplayModel(self.agent_turns, only_tool=tool, stats=stats), deps_type=TutorDeps,
                      toolsets=[HydeSearchToolset(grammar_collection="grammar", docs_collection="docs")],
                      instructions=tutor_instructions())
        records: list[Any] = []
        monitor = type("Capture", (), {"record": lambda self, r: records.append(r)})()
        counter = self.backend.token_counter
        out = []
        for q in queries:
            records.clear()
            deps = TutorDeps(retriever=hr, monitor=monitor)
            run = await agent.run(q.text, deps=deps, message_history=_messages(q.history))
            calls = [p for m in run.all_messages() for p in getattr(m, "parts", []) if type(p).__name__ == "ToolCallPart"]
            hypothesis = next((c.args_as_dict().get("hypothesis") for c in calls), None) or ""
            rec = records[0] if records else None
            out.append(Outcome([e["id"] for e in deps.found], rec.llm_calls if rec else 0, rec.tokens_in if rec else 0,
                               rec.tokens_out if rec else 0,
                               counter.count_text(hypothesis) if counter and hypothesis else 0,
                               skipped=bool(rec and rec.skipped), fallback=rec.fallback_reason if rec else "no_call",
                               sources=tuple(rec.hypothesis_sources) if rec else ()))
        if stats.not_recorded or stats.stale:
            print(f"agent replay on {collection}: {stats.not_recorded} not recorded, {stats.stale} stale", file=sys.stderr)
        print(f"agent replay on {collection}: {stats.served} turns, {stats.rerouted} calls to another tool "
              f"renamed to {tool}, {stats.dropped_calls} extra calls dropped", file=sys.stderr)
        return out


def _messages(history: Any) -> list[Any]:
    """Earlier turns as the pydantic-ai messages a chat would carry (the learner's prompts, the tutor's text)."""
    from pydantic_ai.messages import ModelRequest, ModelResponse, TextPart, UserPromptPart

    return [ModelRequest(parts=[UserPromptPart(content)]) if role == "user" else ModelResponse(parts=[TextPart(content)])
            for role, content in history]


def summarise(data: Any, outcomes: list[Outcome], raw: dict[str, float] | None) -> dict[str, Any]:
    qs = data.queries
    nd = {q.id: ndcg_at_k(o.ranked, data.qrels[q.id], 10) for q, o in zip(qs, outcomes)}
    r1 = {q.id: recall_at_k(o.ranked, data.qrels[q.id], 1) for q, o in zip(qs, outcomes)}
    by = {q.id: o for q, o in zip(qs, outcomes)}
    subsets = {"all": qs, "even": qs[0::2], "odd": qs[1::2],
               "named": [q for q in qs if q.group == "named"], "unnamed": [q for q in qs if q.group == "unnamed"]}
    row: dict[str, Any] = {}
    for name, sub in subsets.items():
        if not sub:
            continue
        row[name] = {"ndcg10": float(np.mean([nd[q.id] for q in sub])), "r1": float(np.mean([r1[q.id] for q in sub])),
                     "n": len(sub)}
    n = len(qs)
    fallbacks = Counter(o.fallback for o in outcomes if o.fallback)
    return {
        "subsets": row, "ndcg": nd,
        "calls": sum(o.calls for o in outcomes) / n, "tokens_in": sum(o.tokens_in for o in outcomes) / n,
        "tokens_out": sum(o.tokens_out for o in outcomes) / n, "agent_tokens": sum(o.agent_tokens for o in outcomes) / n,
        "skipped": sum(o.skipped for o in outcomes) / n,
        "no_generation": sum(1 for o in outcomes if o.calls == 0) / n,
        "fallbacks": dict(fallbacks),
        "worse": [q.id for q in qs if raw and nd[q.id] < raw[q.id] - 1e-9],
        "better": [q.id for q in qs if raw and nd[q.id] > raw[q.id] + 1e-9],
        "groups_below_raw": [],
        "by_query": {q.id: {"ndcg10": nd[q.id], "r1": r1[q.id], "calls": by[q.id].calls} for q in qs},
    }


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--policies", default="report", choices=sorted(CHOICES))
    ap.add_argument("--policy", action="append", help="extra policy spec (repeatable)")
    ap.add_argument("--sets", default=",".join(s[0] for s in SETS), help="comma-separated subset of the sets")
    ap.add_argument("--recordings", default=None, help="HYDE_LLM__RECORDINGS (default data/recordings)")
    ap.add_argument("--json", type=Path, help="also write all figures here")
    ap.add_argument("--per-query", action="store_true", help="list queries that score below raw")
    args = ap.parse_args()
    policies = dict(CHOICES[args.policies])
    for spec in args.policy or []:
        policies[spec] = spec
    wanted = set(args.sets.split(","))
    sets = [s for s in SETS if s[0] in wanted and Path(s[1]).is_dir()]

    runner = Runner(args.recordings)
    listed = runner.retriever.store.list_collections()
    for _, root, collection, _ in sets:
        if collection not in listed:
            ingest_file(corpus_file(collection), IngestRequest(collection=collection, progress=False),
                        runner.retriever.store, runner.retriever.dense, runner.retriever.sparse)
    figures: dict[str, dict[str, Any]] = {}
    raw: dict[str, dict[str, float]] = {}
    for label, spec in policies.items():
        policy = parse_policy(spec)
        figures[label] = {"spec": spec, "policy": str(runner.retriever_for(policy).policy) if policy.use_hyde else "no HyDE"}
        for name, root, collection, tool in sets:
            data = load_beir(Path(root))
            outcomes = runner.run(policy, collection, tool, data.queries)
            if not outcomes:
                continue
            fig = summarise(data, outcomes, raw.get(name))
            if not policy.use_hyde:
                raw[name] = fig["ndcg"]
            figures[label][name] = fig
        print(f"done: {label}", file=sys.stderr)
    runner.loop.close()
    runner.retriever.close()
    _print(figures, [s[0] for s in sets], args.per_query)
    if args.json:
        args.json.write_text(json.dumps(figures, ensure_ascii=False, indent=1))


def _print(figures: dict[str, dict[str, Any]], names: list[str], per_query: bool) -> None:
    old = next((f for f in figures.values() if f["spec"] == OLD_DEFAULT), None)
    for n in names:
        print(f"\n### {n}\n")
        print("| policy | LLM calls / search | tokens in / out per search | vs old default tokens | agent tok | "
              "skipped | nDCG@10 | recall@1 | nDCG@10 even / odd | named / unnamed | +/− vs raw |")
        print("|---|---|---|---|---|---|---|---|---|---|---|")
        base = old[n]["tokens_in"] + old[n]["tokens_out"] if old and n in old else 0
        for label, fig in figures.items():
            if n not in fig:
                continue
            f = fig[n]
            s = f["subsets"]
            total = f["tokens_in"] + f["tokens_out"]
            share = f"{100 * total / base:.0f} %" if base else "–"
            groups = f"{s['named']['ndcg10']:.3f} / {s['unnamed']['ndcg10']:.3f}" if "named" in s else "–"
            print(f"| {label} | {f['calls']:.2f} | {f['tokens_in']:.0f} / {f['tokens_out']:.0f} | {share} | "
                  f"{f['agent_tokens']:.0f} | {100 * f['skipped']:.0f} % | {s['all']['ndcg10']:.3f} | "
                  f"{s['all']['r1']:.3f} | {s['even']['ndcg10']:.3f} / {s['odd']['ndcg10']:.3f} | {groups} | "
                  f"+{len(f['better'])}/−{len(f['worse'])} |")
    for label, fig in figures.items():
        fb = {n: fig[n]["fallbacks"] for n in names if n in fig and fig[n]["fallbacks"]}
        if fb:
            print(f"fallbacks, {label}: {fb}")
        if per_query:
            for n in names:
                if n in fig and fig[n]["worse"]:
                    print(f"below raw, {label}, {n}: {' '.join(fig[n]['worse'])}")


if __name__ == "__main__":
    main()
