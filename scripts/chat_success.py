"""How often a tutor turn with the configured (default: embedded) model ends in an answer.

Runs learner questions from the bundled eval sets through the tutor agent, one fresh conversation
per question, and counts: the model answered (no exception, non-empty text), it called a search tool
(tools mode), what it raised otherwise, and the time per turn.

    .venv/bin/python scripts/chat_success.py --mode tools --n 20            # the tool-calling turn
    .venv/bin/python scripts/chat_success.py --mode retrieve-first --n 20   # search first, then answer

``--mode bare-tools`` is the agent as it was before the retrieval-first work (tools, no guard): the
"before" figure. Needs the collections: hyde-tutor ingest (make ingest).
"""

from __future__ import annotations

import argparse
import json
import time
from collections import Counter
from pathlib import Path

from pydantic_ai import Agent
from pydantic_ai.messages import ToolCallPart
from pydantic_ai.usage import UsageLimits

from hyde_tutor.config import Settings
from hyde_tutor.evaluation.beir import load_beir
from hyde_tutor.hyde import HydeRetriever
from hyde_tutor.llm.backends import make_llm
from hyde_tutor.plugin.monitor import Monitor
from hyde_tutor.plugin.toolset import HydeSearchToolset, TutorDeps, tutor_instructions


def questions(n: int) -> list[str]:
    """Spread over the hold-out, grammar and docs sets (unnamed and named questions alike)."""
    root = Path("data/eval")
    sets = [load_beir(root / name).queries for name in ("grammar_holdout", "grammar", "docs")]
    picked: list[str] = []
    i = 0
    while len(picked) < n:
        qs = sets[i % 3]
        picked.append(qs[(i // 3) * 5 % len(qs)].text)
        i += 1
    return picked


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--mode", choices=["bare-tools", "tools", "retrieve-first"], required=True)
    ap.add_argument("--n", type=int, default=20)
    ap.add_argument("--json", type=Path)
    args = ap.parse_args()
    settings = Settings()
    llm = make_llm(settings)
    hr = HydeRetriever.from_settings(settings)
    rows = []
    try:
        if args.mode == "bare-tools":
            agent = Agent(llm.model, deps_type=TutorDeps, instructions=tutor_instructions(),
                          toolsets=[HydeSearchToolset()], model_settings=llm.extra_settings or None)  # type: ignore[arg-type]
        else:
            from hyde_tutor.tutor.chat import build_tutor_agent

            agent = build_tutor_agent(llm, mode=args.mode)
        for q in questions(args.n):
            deps = TutorDeps(retriever=hr, monitor=Monitor())
            t0 = time.perf_counter()
            try:
                if args.mode == "bare-tools":
                    result = agent.run_sync(q, deps=deps, usage_limits=UsageLimits(request_limit=6))
                    text, error = str(result.output), None
                    tools = [p.tool_name for m in result.new_messages() for p in getattr(m, "parts", [])
                             if isinstance(p, ToolCallPart)]
                else:
                    from hyde_tutor.tutor.chat import answer_turn

                    turn = answer_turn(agent, deps, q, [])
                    text, error, tools = turn.text, turn.model_error, list(turn.tool_calls)
            except Exception as exc:  # noqa: BLE001 - this is what is being measured
                text, error, tools = "", f"{type(exc).__name__}: {str(exc)[:120]}", []
            seconds = time.perf_counter() - t0
            ok = error is None and bool(text.strip())
            rows.append({"question": q, "ok": ok, "error": error, "tools": tools, "seconds": round(seconds, 1),
                         "answer": text[:300]})
            print(json.dumps(rows[-1], ensure_ascii=False), flush=True)
    finally:
        hr.close()
        llm.close()
    ok = sum(r["ok"] for r in rows)
    secs = sorted(r["seconds"] for r in rows)
    print(f"mode {args.mode}, model {llm.name}: {ok}/{len(rows)} turns answered; "
          f"tool calls in {sum(bool(r['tools']) for r in rows)}; median {secs[len(secs) // 2]:.1f} s/turn; "
          f"errors {dict(Counter((r['error'] or '').split(':')[0] for r in rows if r['error']))}")
    if args.json:
        args.json.write_text(json.dumps(rows, ensure_ascii=False, indent=1), encoding="utf-8")


if __name__ == "__main__":
    main()
