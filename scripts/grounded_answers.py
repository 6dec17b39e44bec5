"""Do the tutor's replies teach from the entries found? Before/after figures for the embedded model.

For learner questions from the grammar eval sets (each a fresh conversation, retrieve-first, the
configured model: by default the embedded Qwen2.5-1.5B), counts the replies that contain Korean, that
name the RELEVANT entry's pattern (from the qrels: its pattern, or the stem a conjugated sentence shows),
and that refuse while entries were found; and the median time per turn.

    .venv/bin/python scripts/grounded_answers.py --mode free --n 40      # before: free text, no guard
    .venv/bin/python scripts/grounded_answers.py --mode grounded --n 40  # after: structured answer + guard

Needs the collections as `make ingest` writes them (grammar entries with their patterns and examples); a data
dir holding the BEIR-format eval corpora instead gives entries without patterns, and other figures.
"""

from __future__ import annotations

import argparse
import json
import re
import statistics
import time
from pathlib import Path

from pydantic_ai.usage import UsageLimits

from hyde_tutor.config import Settings
from hyde_tutor.corpus.documents import iter_jsonl_documents
from hyde_tutor.corpus.rendering import distinct_entries
from hyde_tutor.evaluation.beir import load_beir
from hyde_tutor.hyde import HydeRetriever
from hyde_tutor.llm.backends import make_llm
from hyde_tutor.tutor.chat import answer_turn, build_tutor_agent
from hyde_tutor.tutor.grounding import HANGUL, names_an_entry
from hyde_tutor.plugin.monitor import Monitor
from hyde_tutor.plugin.toolset import TutorDeps

REFUSAL = re.compile(r"нет в справочнике|не наш[её]л|не могу|извините|не знаю|к сожалению", re.IGNORECASE)


def questions(n: int) -> list[tuple[str, set[str]]]:
    out: list[tuple[str, set[str]]] = []
    for name in ("grammar_holdout", "grammar"):
        data = load_beir(Path("data/eval") / name)
        out += [(q.text, {d for d, g in data.qrels[q.id].items() if g > 0}) for q in data.queries]
    return out[:n]


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--mode", choices=["free", "grounded"], required=True)
    ap.add_argument("--n", type=int, default=40)
    ap.add_argument("--json", type=Path)
    ap.add_argument("--temperature", type=float, help="the tutor's sampling temperature (default: the server's)")
    args = ap.parse_args()
    settings = Settings()
    patterns = {p.document.id: p.document.payload for p in iter_jsonl_documents(Path("data/grammar.jsonl"))
                if p.document is not None}
    llm = make_llm(settings)
    hr = HydeRetriever.from_settings(settings)
    extra = {} if args.temperature is None else {"temperature": args.temperature, "seed": 0}
    agent = build_tutor_agent(llm, {**llm.extra_settings, **extra} or None, mode="retrieve-first",
                              grounded=args.mode == "grounded")
    rows = []
    try:
        for i, (question, relevant) in enumerate(questions(args.n), start=1):
            deps = TutorDeps(retriever=hr, monitor=Monitor())
            started = time.perf_counter()
            answer = None
            if args.mode == "free":  # the chat before: the model's free text, shown as it came
                deps.clear_found()
                try:
                    text = str(agent.run_sync(question, deps=deps, usage_limits=UsageLimits(request_limit=3)).output)
                except Exception as exc:  # noqa: BLE001
                    text = f"[error {type(exc).__name__}]"
                replaced = False
            else:
                turn = answer_turn(agent, deps, question, max_requests=3)
                text, replaced, answer = turn.text, turn.replaced, turn.answer
            seconds = time.perf_counter() - started
            rel = [{"pattern": patterns[d].get("pattern"), "id": d} for d in relevant if d in patterns]
            row = {"question": question, "reply": text, "seconds": round(seconds, 1), "replaced": replaced,
                   "korean": bool(HANGUL.search(text)), "relevant_pattern": names_an_entry(text, rel),
                   "refusal": bool(REFUSAL.search(text)) and bool(deps.found), "found": len(deps.found)}
            found = distinct_entries(deps.found)
            if answer is not None and found:  # the entry the model chose (the reply's headline) vs the search's top
                named = found[answer.entry - 1] if 1 <= answer.entry <= len(found) else found[0]
                row |= {"answer": answer.model_dump(), "found_ids": [e.get("id") for e in found],
                        "named_relevant": named.get("id") in relevant, "top_relevant": found[0].get("id") in relevant}
            rows.append(row)
            print(f"{i:>2} {seconds:5.1f}s ko={row['korean']:d} rel={row['relevant_pattern']:d} "
                  f"ref={row['refusal']:d} {text[:90]!r}", flush=True)
    finally:
        hr.close()
        llm.close()
    n = len(rows)
    summary = {"mode": args.mode, "n": n, "korean": sum(r["korean"] for r in rows) / n,
               "relevant_pattern": sum(r["relevant_pattern"] for r in rows) / n,
               "refusals": sum(r["refusal"] for r in rows) / n, "replaced": sum(r["replaced"] for r in rows) / n,
               "median_s": statistics.median(r["seconds"] for r in rows)}
    if any("named_relevant" in r for r in rows):  # grounded: is the reply's headline entry relevant (qrels)?
        summary |= {key: sum(bool(r.get(key)) for r in rows) / n for key in ("top_relevant", "named_relevant")}
    print(json.dumps(summary, ensure_ascii=False))
    if args.json:
        args.json.write_text(json.dumps({"summary": summary, "rows": rows}, ensure_ascii=False, indent=1))


if __name__ == "__main__":
    main()
