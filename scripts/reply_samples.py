"""The tutor's replies as the learner reads them, for blind judging (issue 36) and the mechanical measures.

Runs the chat's own path (``build_tutor_agent(llm, mode="auto")`` + ``answer_turn``, the default headline rule,
a new chat per question) on the 40 questions and 20 follow-ups of ``scripts/tutor_turns.py`` (a follow-up with
its first turn as history), after the issue's three-turn chat in one conversation (first, so that a slow
machine still yields it), questions and follow-ups interleaved two to one. One JSON line per reply:

    HYDE_DATA_DIR=.hyde/after .venv/bin/python scripts/reply_samples.py --out replies.after.jsonl
    HYDE_DATA_DIR=.hyde/before PYTHONPATH=/path/to/main/src .venv/bin/python scripts/reply_samples.py --out before.jsonl

Only APIs that predate issue 36 are used, so the same script runs on the code before the change.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))

from tutor_turns import items  # noqa: E402

from hyde_tutor.config import Settings  # noqa: E402
from hyde_tutor.corpus.rendering import distinct_entries  # noqa: E402
from hyde_tutor.hyde import HydeRetriever  # noqa: E402
from hyde_tutor.llm.backends import make_llm  # noqa: E402
from hyde_tutor.tutor.chat import answer_turn, build_tutor_agent  # noqa: E402
from hyde_tutor.tutor.grounding import headline_entry  # noqa: E402
from hyde_tutor.plugin.monitor import Monitor  # noqa: E402
from hyde_tutor.plugin.toolset import TutorDeps  # noqa: E402

THREE_TURNS = ("Как сказать, что я хочу поехать в Пусан?", "А в прошедшем времени?",
               "Как сказать, что я чуть не опоздал на поезд?")


def plain(text: str) -> str:
    """The reply as a reader sees it rendered: markdown's bold markers gone."""
    return text.replace("**", "")


def row_of(turn: Any, deps: TutorDeps, qid: str, kind: str, message: str, previous: str | None,
           relevant: set[str] | None) -> dict[str, Any]:
    found = distinct_entries(list(turn.found))
    head = None
    if turn.answer is not None and found:
        top = str(found[0].get("id"))
        head = found[headline_entry(turn.answer, found, "unsure", deps.margins.get(top)) - 1].get("id")
    return {"id": qid, "kind": kind, "message": message, "previous": previous, "reply": plain(turn.text),
            "seconds": round(turn.seconds, 2), "error": turn.model_error, "found_ids": [e.get("id") for e in found],
            "headline": head, "headline_relevant": None if relevant is None else head in relevant,
            "model_korean": turn.answer.korean if turn.answer is not None else None,
            "answer": turn.answer.model_dump() if turn.answer is not None else None,
            "margin": deps.margins.get(str(found[0].get("id"))) if found else None, "found": found,
            "history": [[type(m).__name__, getattr(p, "content", "")] for m in turn.messages[:-2]
                        for p in getattr(m, "parts", []) if isinstance(getattr(p, "content", None), str)]}


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", type=Path, required=True)
    ap.add_argument("--questions", type=int, default=40)
    ap.add_argument("--followups", type=int, default=20)
    args = ap.parse_args()
    settings = Settings()
    llm = make_llm(settings)
    hr = HydeRetriever.from_settings(settings)
    agent = build_tutor_agent(llm, mode="auto")
    args.out.parent.mkdir(parents=True, exist_ok=True)
    try:
        with args.out.open("w", encoding="utf-8") as out:
            def write(row: dict[str, Any]) -> None:
                out.write(json.dumps(row, ensure_ascii=False) + "\n")
                out.flush()
                print(f"{row['id']} {row['seconds']:5.1f}s head={row['headline_relevant']} {row['reply'][:70]!r}",
                      flush=True)

            deps = TutorDeps(retriever=hr, monitor=Monitor())
            history: tuple = ()
            previous = None
            for n, text in enumerate(THREE_TURNS, start=1):  # first: a slow machine still yields the chat
                turn = answer_turn(agent, deps, text, history, on_found=lambda e, r: None)
                history = turn.messages
                write(row_of(turn, deps, f"chat{n}", "chat", text, previous if n == 2 else None, None))
                previous = text
            numbered = [(f"{kind[0]}{i:02d}", item) for i, item in
                        enumerate(items(args.questions, args.followups), start=1) for kind in [item[3]]]
            questions = [x for x in numbered if x[1][3] == "question"]
            followups = [x for x in numbered if x[1][3] == "followup"]
            order = [x for k in range(len(questions)) for x in
                     ([questions[k]] + ([followups[k // 2]] if k % 2 and k // 2 < len(followups) else []))]
            order += [x for x in followups if x not in order]  # interleaved, two questions to a follow-up
            for qid, (text, history, relevant, kind) in order:
                deps = TutorDeps(retriever=hr, monitor=Monitor())
                previous = next((p.content for m in history for p in getattr(m, "parts", [])
                                 if getattr(p, "part_kind", "") == "user-prompt"), None)
                turn = answer_turn(agent, deps, text, history, on_found=lambda e, r: None)
                write(row_of(turn, deps, qid, kind, text, previous, relevant))
    finally:
        hr.close()
        llm.close()
    print(subprocess.run(["uptime"], capture_output=True, text=True).stdout.strip())


if __name__ == "__main__":
    main()
