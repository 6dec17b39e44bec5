"""Capable generation from the conversation: recall@1/@5 per kind (follow-up, new question mid-chat) with the
recorded hypotheses, through the real pipeline (replay; ``scripts/tune_policy.py``'s runner).

Rows: plain search of the message alone and of the conversation (today's context search), the hypothesis written
from the conversation with the v1 request (``hypothesis_followup_request.v1``: recorded for data/eval/followups
only) and with v2 (which says how to tell a follow-up from a new question), each searched beside the context
search (the pipeline's follow-up path) and beside the message alone (the hypothesis handed to the pipeline as a
ready hypothesis, ``agent_hypothesis``, with no history: the raw channel is then the message as typed).

    .venv/bin/python scripts/followup_table.py --sets followups,conversations --json docs/recorded/followups_v2.json

``--issue39``: the offline conversation search, the generated path before and after the hypothesis leads a
follow-up, and (data/eval/followups only: its agent turns are recorded) the agent path, per half of the sets
(``hyde_tutor.evaluation.splits``: tune / heldout) and on the fresh sets (``--sets fresh --recordings <file>``; the
agent path on the sets of :data:`AGENT_SETS`):

    .venv/bin/python scripts/followup_table.py --issue39 --sets conversations,followups --json docs/recorded/issue39.json
    .venv/bin/python scripts/followup_table.py --issue39 --sets fresh \
        --recordings data/recordings/fresh_followups.v2.rec1.jsonl --json docs/recorded/issue39.fresh.rec1.json
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
from hyde_tutor.evaluation.metrics import recall_at_k
from hyde_tutor.evaluation.splits import half_of

sys.path.insert(0, str(Path(__file__).resolve().parent))
from tune_policy import Runner, corpus_file, parse_policy  # noqa: E402

SETS = {"followups": "data/eval/followups", "conversations": "data/eval/conversations",
        "fresh": "data/eval/fresh_followups", "fresh2": "data/eval/fresh_followups2",
        "fresh3": "data/eval/fresh_followups3", "fresh4": "data/eval/fresh_followups4",
        "fresh5": "data/eval/fresh_followups5", "fresh6": "data/eval/fresh_followups6",
        "fresh7": "data/eval/fresh_followups7", "fresh8": "data/eval/fresh_followups8",
        "fresh9": "data/eval/fresh_followups9", "fresh10": "data/eval/fresh_followups10",
        "fresh11": "data/eval/fresh_followups11", "fresh12": "data/eval/fresh_followups12",
        "fresh13": "data/eval/fresh_followups13", "fresh14": "data/eval/fresh_followups14",
        "fresh15": "data/eval/fresh_followups15", "fresh16": "data/eval/fresh_followups16",
        "fresh17": "data/eval/fresh_followups17"}
AGENT_SETS = ("followups", "fresh5", "fresh17")
"""The sets whose agent turns are recorded (data/recordings/agent/): the agent rows run on these only."""
ROWS: dict[str, tuple[str, str]] = {
    # label: (policy spec, how the hypothesis meets the raw channel)
    "raw, the message alone": ("hyde=0,history=0", "pipeline"),
    "raw, previous question + message (context search)": ("hyde=0", "pipeline"),
    "v1 hypothesis + context search": ("followup_request_version=1", "pipeline"),
    "v2 hypothesis + context search": ("followup_request_version=2", "pipeline"),
    "v2 hypothesis + the message alone": ("followup_request_version=2", "message"),
    "v2 hypothesis alone (no raw channel)": ("followup_request_version=2,only=1", "pipeline"),
}
ROWS_39: dict[str, tuple[str, str]] = {
    # issue 39: the offline conversation search, the generated path before and after the lead, the agent
    "offline: the message alone": ("hyde=0,history=0", "pipeline"),
    "offline: conversation search (the `conversation` arm)": ("hyde=0", "pipeline"),
    "v2 hypothesis + conversation search, fused (no lead)": (
        "followup_request_version=2,followup_lead=0,named_lead=0", "pipeline"),
    "v2 hypothesis + conversation search, the hypothesis's top leads (default until 2026-11-28)": (
        "followup_request_version=2,named_lead=0", "pipeline"),
    "v2 hypothesis + conversation search, the entry the hypothesis names leads": (
        "followup_request_version=2,followup_lead=0", "pipeline"),
    "v2 hypothesis + conversation search, both leads (default)": ("followup_request_version=2", "pipeline"),
    "v2 hypothesis + conversation search, both leads, the named entry leads new questions too": (
        "followup_request_version=2,named_lead_new=5", "pipeline"),
    "agent: its own query and hypothesis (tools path), before (no lead)": ("agent=replace,cascade_margin=0,followup_lead=0",
                                                                            "agent"),
    "agent: its own query and hypothesis (tools path)": ("agent=replace,cascade_margin=0", "agent"),
}


def kinds(root: str) -> tuple[dict[str, str], dict[str, str], dict[str, set[str]]]:
    """Query id → ``followup`` or ``new`` (a set without the field: all follow-ups), → the entry turn 1 was
    about (a new question whose top entry is that one was pulled into the old topic), and → the entries the
    labeller called also right (``metadata.also_right``: the fourth fresh set on; empty elsewhere)."""
    kind, turn1, also = {}, {}, {}
    for line in Path(root, "queries.jsonl").read_text(encoding="utf-8").splitlines():
        if line.strip():
            q = json.loads(line)
            meta = q.get("metadata") or {}
            # data/eval/followups's own "kind" is the follow-up's subtype (person, tense…): all are follow-ups
            kind[q["_id"]] = "new" if meta.get("kind") == "new" else "followup"
            turn1[q["_id"]] = meta.get("turn1_entry", "")
            also[q["_id"]] = set(meta.get("also_right") or ())
    return kind, turn1, also


def run(runner: Runner, spec: str, mode: str, queries: list[Any]) -> list[tuple[list[str], int, str | None]]:
    policy = parse_policy(spec)
    if mode == "agent":  # the tools path, replayed from the recorded tool calls (data/recordings/agent/)
        return [(o.ranked, o.calls, o.fallback) for o in runner.run(policy, "grammar", "grammar_search", queries)]
    hr = runner.retriever_for(policy)

    async def all_() -> list[tuple[list[str], int, str | None]]:
        out = []
        for q in queries:
            history = q.history if policy.history else ()
            if mode == "message":  # the hypothesis from the conversation; the raw channel is the message as typed
                gen = await hr.generators.generate("grammar", q.text, 1, 60.0, history=history)
                text = gen.hypotheses[0].text if gen.hypotheses else None
                r = await hr.search("grammar", q.text, top_k=10, agent_hypothesis=text)
                out.append(([d.id for d in r.results], gen.usage.requests, gen.failure_reason or r.fallback_reason))
                continue
            r = await hr.search("grammar", q.text, top_k=10, use_hyde=policy.use_hyde, include_raw=policy.include_raw,
                                history=history)
            out.append(([d.id for d in r.results], r.usage.requests, r.fallback_reason if policy.use_hyde else None))
        return out

    return runner.loop.run_until_complete(all_())


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--sets", default="followups,conversations")
    ap.add_argument("--recordings", default=None, help="HYDE_LLM__RECORDINGS (default data/recordings)")
    ap.add_argument("--json", type=Path)
    ap.add_argument("--issue39", action="store_true", help="the rows of issue 39, per half (tune / heldout; fresh)")
    args = ap.parse_args()
    rows = ROWS_39 if args.issue39 else ROWS
    runner = Runner(args.recordings)
    r = runner.retriever
    if "grammar" not in r.store.list_collections():
        ingest_file(corpus_file("grammar"), IngestRequest(collection="grammar", progress=False), r.store, r.dense, r.sparse)
    figures: dict[str, Any] = {}
    print("| set | kind | n | policy | calls / search | not served | recall@1 | hit@1 | recall@5 | top-1 = turn-1 entry "
          "| top-1 right (label or also right) |")
    print("|---|---|---|---|---|---|---|---|---|---|---|")
    for name in args.sets.split(","):
        data, (kind_of, turn1, also) = load_beir(Path(SETS[name])), kinds(SETS[name])
        for label, (spec, mode) in rows.items():
            if mode == "agent" and name not in AGENT_SETS:
                continue  # agent turns are recorded for these sets only
            outcomes = run(runner, spec, mode, data.queries)
            halves = ("all",) if not args.issue39 else ("fresh",) if name.startswith("fresh") else ("tune", "heldout")
            for half, kind in ((h, k) for h in halves for k in ("followup", "new", "both")):
                sub = [(q, o) for q, o in zip(data.queries, outcomes) if (kind == "both" or kind_of[q.id] == kind)
                       and half in ("all", "fresh", half_of(q.id))]
                if not sub or (kind == "both" and len({kind_of[q.id] for q in data.queries}) == 1):
                    continue
                r1 = float(np.mean([recall_at_k(o[0], data.qrels[q.id], 1) for q, o in sub]))
                r5 = float(np.mean([recall_at_k(o[0], data.qrels[q.id], 5) for q, o in sub]))
                h1 = float(np.mean([bool(o[0]) and o[0][0] in data.qrels[q.id] for q, o in sub]))
                old = sum(1 for q, o in sub if o[0] and o[0][0] == turn1.get(q.id))
                right1 = float(np.mean([bool(o[0]) and o[0][0] in (set(data.qrels[q.id]) | also[q.id]) for q, o in sub]))
                calls = sum(o[1] for _, o in sub) / len(sub)
                unserved = sum(1 for _, o in sub if o[2] is not None)
                key = kind if half == "all" else f"{half}:{kind}"
                figures.setdefault(name, {}).setdefault(key, {})[label] = {
                    "n": len(sub), "r1": r1, "hit1": h1, "r5": r5, "calls": calls, "top1_is_turn1_entry": old, "not_served": unserved,
                    "right1": right1,
                    "by_query": {q.id: o[0][:5] for q, o in sub}}
                print(f"| {name if half == 'all' else f'{name} ({half})'} | {kind} | {len(sub)} | {label} | {calls:.2f} | {unserved} | {r1:.3f} | {h1:.3f} | "
                      f"{r5:.3f} | {old} | {right1:.3f} |")
    runner.loop.close()
    runner.retriever.close()
    if args.json:
        args.json.write_text(json.dumps(figures, ensure_ascii=False, indent=1))


if __name__ == "__main__":
    main()
