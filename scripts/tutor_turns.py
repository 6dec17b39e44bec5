"""The offline tutor turn (issue 29, item 5): is the reply's headline entry relevant, and how long does a turn take?

Each question is a fresh chat turn with the configured model (default: the embedded Qwen2.5-1.5B,
retrieve-first, structured answer): the first ``--questions`` learner questions of data/eval/grammar_holdout
then data/eval/grammar, and the first ``--followups`` follow-ups of data/eval/conversations (with their first
turn as history). From ONE run it scores every headline rule on the same answers: the model's choice, the
search's top entry, and the top entry when the ranking is sure / the model's choice when not (``unsure``);
with the time per turn, the time to the entries (what a chat shows first) and the request's prompt tokens.

    .venv/bin/python scripts/tutor_turns.py --temperature server --json out.json   # the server's default (0.8)
    .venv/bin/python scripts/tutor_turns.py --temperature 0
    .venv/bin/python scripts/tutor_turns.py --questions 10 --followups 0 --entries-chars 900   # a lever

Levers: ``--entries-chars`` (the found entries' text in the prompt), ``--short-answer`` (a structured answer
with shorter fields), ``--defeat-cache`` (a new first line per turn, so llama.cpp cannot reuse the fixed
instructions' prefix: what the prompt cache saves).
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import time
import uuid
from pathlib import Path
from typing import Any

from pydantic import Field
from pydantic_ai import Agent, NativeOutput
from pydantic_ai.capabilities import AbstractCapability
from pydantic_ai.messages import ModelRequest, ModelResponse, TextPart, UserPromptPart

from hyde_tutor.config import Settings
from hyde_tutor.corpus.rendering import distinct_entries
from hyde_tutor.evaluation.beir import load_beir
from hyde_tutor.hyde import HydeRetriever
from hyde_tutor.llm.backends import make_llm
from hyde_tutor.tutor.chat import answer_turn
from hyde_tutor.tutor.context_fit import FitContext
from hyde_tutor.tutor.grounding import GroundedAnswer, headline_entry, with_answer_cap
from hyde_tutor.plugin.monitor import Monitor
from hyde_tutor.plugin.toolset import TutorDeps
from hyde_tutor.plugin.capabilities import GROUNDED_ENTRY_CHARS, HydeTutor

EVAL = Path(__file__).resolve().parent.parent / "data" / "eval"


class ShortAnswer(GroundedAnswer):
    """The structured answer with shorter fields (the ``--short-answer`` lever)."""

    korean: str = Field(max_length=60, description="Корейская фраза для ситуации ученика, по этой конструкции.")
    russian: str = Field(max_length=80, description="Перевод этой фразы на русский.")


class Nonce(AbstractCapability[Any]):
    """A new first instruction line per run: no two requests share a prefix (``--defeat-cache``)."""

    def get_instructions(self) -> Any:
        return lambda: f"[{uuid.uuid4().hex}]"


def items(n_questions: int, n_followups: int) -> list[tuple[str, tuple, set[str], str]]:
    out: list[tuple[str, tuple, set[str], str]] = []
    for name in ("grammar_holdout", "grammar"):
        data = load_beir(EVAL / name)
        out += [(q.text, (), {d for d, g in data.qrels[q.id].items() if g > 0}, "question") for q in data.queries]
    out = out[:n_questions]
    conv = load_beir(EVAL / "conversations", group_by="kind")
    fus = [q for q in conv.queries if q.group == "followup"][:n_followups]
    for q in fus:
        history = tuple(ModelRequest(parts=[UserPromptPart(c)]) if role == "user" else ModelResponse(parts=[TextPart(c)])
                        for role, c in q.history)
        out.append((q.text, history, {d for d, g in conv.qrels[q.id].items() if g > 0}, "followup"))
    return out


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--temperature", default="0", help="a number, or 'server' (the server's default)")
    ap.add_argument("--questions", type=int, default=40)
    ap.add_argument("--followups", type=int, default=20)
    ap.add_argument("--entries-chars", type=int, default=None, help=f"default: {GROUNDED_ENTRY_CHARS} (the tutor's)")
    ap.add_argument("--short-answer", action="store_true")
    ap.add_argument("--defeat-cache", action="store_true")
    ap.add_argument("--json", type=Path)
    args = ap.parse_args()
    settings = Settings()
    llm = make_llm(settings)
    hr = HydeRetriever.from_settings(settings)
    model_settings = with_answer_cap(dict(llm.extra_settings))
    if args.temperature != "server":
        model_settings |= {"temperature": float(args.temperature), "seed": 0}
    tutor = HydeTutor(mode="retrieve-first", grounded=True)
    if args.entries_chars:
        tutor._retrieve.max_chars = args.entries_chars
    caps: list[Any] = [Nonce()] if args.defeat_cache else []
    caps += [tutor, FitContext.for_backend(llm, model_settings)]
    agent = Agent(llm.agent_model, deps_type=TutorDeps, capabilities=caps, model_settings=model_settings,  # type: ignore[arg-type]
                  output_type=NativeOutput(ShortAnswer if args.short_answer else GroundedAnswer), retries=2)
    rows = []
    try:
        for i, (text, history, relevant, kind) in enumerate(items(args.questions, args.followups), start=1):
            deps = TutorDeps(retriever=hr, monitor=Monitor())
            shown: list[float] = []
            started = time.perf_counter()
            turn = answer_turn(agent, deps, text, history, max_requests=3, headline="model",
                               on_found=lambda e, r: shown.append(time.perf_counter() - started))
            found = distinct_entries(list(turn.found))
            row: dict[str, Any] = {"kind": kind, "question": text, "seconds": round(turn.seconds, 2),
                                   "entries_s": round(shown[0], 3) if shown else None,
                                   "prompt_tokens": turn.prompt_tokens,
                                   "answered": turn.model_error is None, "found_ids": [e.get("id") for e in found]}
            margin = deps.margins.get(str(found[0].get("id"))) if found else None
            row["margin"] = margin
            if turn.answer is not None and found:
                for rule in ("model", "top", "unsure"):
                    number = headline_entry(turn.answer, found, rule, margin)  # type: ignore[arg-type]
                    row[f"{rule}_relevant"] = found[number - 1].get("id") in relevant
                row["model_entry"] = turn.answer.entry
            rows.append(row)
            print(f"{i:>2} {kind[:4]} {row['seconds']:5.1f}s tok={row['prompt_tokens']} "
                  + " ".join(f"{r}={int(bool(row.get(f'{r}_relevant')))}" for r in ("model", "top", "unsure"))
                  + f" {text[:50]!r}", flush=True)
    finally:
        hr.close()
        llm.close()
    print(json.dumps(summarise(rows, args), ensure_ascii=False))
    if args.json:
        args.json.parent.mkdir(parents=True, exist_ok=True)
        args.json.write_text(json.dumps({"summary": summarise(rows, args), "rows": rows}, ensure_ascii=False, indent=1))


def summarise(rows: list[dict[str, Any]], args: argparse.Namespace) -> dict[str, Any]:
    out: dict[str, Any] = {"temperature": args.temperature, "entries_chars": args.entries_chars or GROUNDED_ENTRY_CHARS,
                           "short_answer": args.short_answer, "defeat_cache": args.defeat_cache}
    for kind in ("question", "followup", "all"):
        sel = [r for r in rows if kind == "all" or r["kind"] == kind]
        if not sel:
            continue
        seconds = sorted(r["seconds"] for r in sel)
        out[kind] = {"n": len(sel), "answered": sum(r["answered"] for r in sel),
                     **{f"{rule}_relevant": sum(bool(r.get(f"{rule}_relevant")) for r in sel)
                        for rule in ("model", "top", "unsure")},
                     "median_s": statistics.median(seconds), "p90_s": seconds[int(0.9 * (len(seconds) - 1))],
                     "median_entries_s": statistics.median(r["entries_s"] or 0 for r in sel),
                     "median_prompt_tokens": statistics.median(r["prompt_tokens"] or 0 for r in sel)}
    out["uptime"] = subprocess.run(["uptime"], capture_output=True, text=True).stdout.strip()
    return out


if __name__ == "__main__":
    main()
