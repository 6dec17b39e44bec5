"""One long chat with the configured model (default: the embedded Qwen2.5-1.5B), as a learner would have it:
ordinary questions one after another in ONE conversation (issue 32's figures).

Per turn: answered by the model (no model error), the reply's headline entry relevant, the search's top entry
relevant (relevance from ``data/eval/long_chat/questions.jsonl``), seconds, seconds to the entries, the request's
prompt tokens. Works on the code before issue 32 too (fields it lacks read as missing).

    .venv/bin/python scripts/long_chat.py --turns 12 --json docs/recorded/long_chat.12.json
    .venv/bin/python scripts/long_chat.py --turns 20
    .venv/bin/python scripts/long_chat.py --turns 20 --stand-in   # no generation: prompt sizes only

``--stand-in`` answers every turn with one fixed structured answer (a pydantic-ai FunctionModel) and counts each
request with the embedded model's own tokenizer, as sent (``FitContext``: bounded, fitted to n_ctx 2048) and as
the chat before issue 32 sent it (the whole conversation): the prompt sizes without minutes of CPU per turn.

The questions were written for the project (none is from data/eval/grammar); the data dir needs the grammar and
docs collections (`make ingest`).
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import time
from pathlib import Path
from typing import Any

from hyde_tutor.config import Settings
from hyde_tutor.corpus.rendering import distinct_entries
from hyde_tutor.hyde import HydeRetriever
from hyde_tutor.llm.backends import LLMBackend, make_llm
from hyde_tutor.tutor import grounding
from hyde_tutor.tutor.chat import answer_turn, build_tutor_agent
from hyde_tutor.plugin.monitor import Monitor
from hyde_tutor.plugin.toolset import TutorDeps

QUESTIONS = Path(__file__).resolve().parent.parent / "data" / "eval" / "long_chat" / "questions.jsonl"


def headline_id(turn: Any, deps: TutorDeps, found: list[dict[str, Any]]) -> str | None:
    """The id of the entry heading the reply (the rule the code in use applies; the model's entry before it)."""
    if not found:
        return None
    answer = turn.answer
    if answer is None:
        return str(found[0].get("id")) if getattr(turn, "replaced", False) else None
    rule = getattr(grounding, "headline_entry", None)
    margins = getattr(deps, "margins", {})
    number = rule(answer, found, "unsure", margins.get(str(found[0].get("id")))) if rule else answer.entry
    return str(found[number - 1 if 1 <= number <= len(found) else 0].get("id"))


seen: list[str] = []
"""The instructions of each stand-in request (to count what the chat before issue 32 would have sent)."""


def stand_in(settings: Settings) -> LLMBackend:
    """A backend whose model answers every turn with entry 1 and a short Korean sentence, with the embedded
    model's tokenizer for counting."""
    from pydantic_ai.messages import ModelResponse, TextPart
    from pydantic_ai.models.function import AgentInfo, FunctionModel

    from hyde_tutor.llm.tokens import qwen_counter

    def reply(messages: list[Any], info: AgentInfo) -> ModelResponse:
        seen.append(info.instructions or "")
        return ModelResponse(parts=[TextPart(ANSWER)])

    counter = qwen_counter(settings.data_dir / "models")
    return LLMBackend(FunctionModel(reply), "stand-in", "stand-in", token_counter=counter)


ANSWER = json.dumps({"entry": 1, "korean": "그렇게 말하면 돼요.", "russian": "Так и говорят."}, ensure_ascii=False)


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--turns", type=int, default=12)
    ap.add_argument("--json", type=Path)
    ap.add_argument("--stand-in", action="store_true", help="a fixed answer instead of the model (prompt sizes only)")
    args = ap.parse_args()
    items = [json.loads(line) for line in QUESTIONS.read_text(encoding="utf-8").splitlines() if line.strip()]
    items = (items * (args.turns // len(items) + 1))[: args.turns]
    settings = Settings()
    llm = stand_in(settings) if args.stand_in else make_llm(settings)
    hr = HydeRetriever.from_settings(settings)
    if args.stand_in:
        from pydantic_ai.messages import ModelRequest, ModelResponse, TextPart, UserPromptPart

        from hyde_tutor.tutor.context_fit import FitContext, chatml_tokens
    old: list[Any] = []  # the conversation as the chat before issue 32 kept and sent it (stand-in only)
    agent = build_tutor_agent(llm, mode="retrieve-first", grounded=True,
                              fit=FitContext(n_ctx=settings.llm.n_ctx, answer_tokens=settings.llm.max_tokens + 48,
                                             counter=llm.token_counter)) if args.stand_in else build_tutor_agent(
        llm, mode="auto")
    deps = TutorDeps(retriever=hr, monitor=Monitor())
    history: tuple = ()
    rows = []
    try:
        for i, item in enumerate(items, start=1):
            shown: list[float] = []
            started = time.perf_counter()
            turn = answer_turn(agent, deps, item["text"], history,
                               on_found=lambda entries, records: shown.append(time.perf_counter() - started))
            history = turn.messages
            found = distinct_entries(list(turn.found))
            relevant = set(item["relevant"])
            grammar = [e for e in found if str(e.get("id", "")).startswith("g-")]
            row = {"turn": i, "question": item["text"], "answered": turn.model_error is None,
                   "error": turn.model_error, "headline": headline_id(turn, deps, found),
                   "top": grammar[0].get("id") if grammar else None, "seconds": round(turn.seconds, 1),
                   "entries_s": round(shown[0], 2) if shown else None,
                   "prompt_tokens": getattr(turn, "prompt_tokens", None), "reply": turn.text[:300]}
            if args.stand_in:  # what the chat before issue 32 sent: the whole conversation and this turn's entries
                old.append(ModelRequest(parts=[UserPromptPart(item["text"])]))
                row["unbounded_tokens"] = chatml_tokens(seen[-1], old, llm.token_counter)
                old.append(ModelResponse(parts=[TextPart(ANSWER)]))
            row["headline_relevant"] = row["headline"] in relevant
            row["top_relevant"] = row["top"] in relevant
            rows.append(row)
            print(f"{i:>2} {row['seconds']:5.1f}s answered={row['answered']:d} head={row['headline_relevant']:d} "
                  f"top={row['top_relevant']:d} tokens={row['prompt_tokens']} {item['text'][:50]!r} "
                  f"{(turn.model_error or '')[:60]}", flush=True)
    finally:
        hr.close()
        llm.close()
    seconds = [r["seconds"] for r in rows]
    summary = {"turns": len(rows), "answered": sum(r["answered"] for r in rows),
               "headline_relevant": sum(r["headline_relevant"] for r in rows),
               "top_relevant": sum(r["top_relevant"] for r in rows), "median_s": statistics.median(seconds),
               "max_s": max(seconds), "median_entries_s": statistics.median(r["entries_s"] or 0 for r in rows),
               "last_prompt_tokens": rows[-1]["prompt_tokens"], "max_prompt_tokens": max(
                   r["prompt_tokens"] or 0 for r in rows), "last_unbounded_tokens": rows[-1].get("unbounded_tokens"),
               "uptime": subprocess.run(["uptime"], capture_output=True, text=True).stdout.strip()}
    print(json.dumps(summary, ensure_ascii=False))
    if args.json:
        args.json.parent.mkdir(parents=True, exist_ok=True)
        args.json.write_text(json.dumps({"summary": summary, "rows": rows}, ensure_ascii=False, indent=1))


if __name__ == "__main__":
    main()
