"""Headline rules scored on recorded model answers, no LLM: for each row of a `grounded_answers.py` or
`tutor_turns.py` JSON (the model's entry number and the entries it was shown), the search's margin is measured
again (plain search of the question, as the chat does for a new question) and every rule is scored: the model's
choice, the search's top entry, and ``unsure`` at several margins.

    .venv/bin/python scripts/headline_rules.py docs/recorded/grounded_answers.sentence_rule.json
"""

from __future__ import annotations

import argparse
import asyncio
import json
from pathlib import Path

from hyde_tutor.config import Settings
from hyde_tutor.evaluation.beir import load_beir
from hyde_tutor.hyde import HydeRetriever
from hyde_tutor.tutor.grounding import GroundedAnswer, headline_entry

EVAL = Path(__file__).resolve().parent.parent / "data" / "eval"


def relevant_by_question() -> dict[str, set[str]]:
    out: dict[str, set[str]] = {}
    for name in ("grammar_holdout", "grammar"):
        data = load_beir(EVAL / name)
        for q in data.queries:
            out.setdefault(q.text, {d for d, g in data.qrels[q.id].items() if g > 0})
    return out


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("runs", type=Path, nargs="+")
    ap.add_argument("--margins", default="0.1,0.15,0.2,0.25,0.3,0.4")
    args = ap.parse_args()
    relevant = relevant_by_question()
    hr = HydeRetriever.from_settings(Settings())
    try:
        for path in args.runs:
            rows = [r for r in json.loads(path.read_text(encoding="utf-8"))["rows"]
                    if r.get("answer") or r.get("model_entry")]
            rows = [r for r in rows if r["question"] in relevant and r.get("kind", "question") == "question"]
            margins = asyncio.run(_margins(hr, [r["question"] for r in rows]))
            scores = {"model": 0, "top": 0, **{f"unsure@{m}": 0 for m in args.margins.split(",")}}
            same_top = 0
            for row, (top, margin) in zip(rows, margins, strict=True):
                entry = row["answer"]["entry"] if row.get("answer") else row["model_entry"]
                found = [{"id": i} for i in row["found_ids"]]
                same_top += found[0]["id"] == top
                answer = GroundedAnswer(entry=min(max(entry, 1), 5), korean="", russian="")
                for rule in scores:
                    name, _, at = rule.partition("@")
                    number = headline_entry(answer, found, name, margin if not at or margin is None  # type: ignore[arg-type]
                                            else margin - float(at) + 0.25)  # the rule's threshold moved to `at`
                    scores[rule] += found[number - 1]["id"] in relevant[row["question"]]
            print(json.dumps({"run": str(path), "n": len(rows), "same_top_as_recorded": same_top, **scores}))
    finally:
        hr.close()


async def _margins(hr: HydeRetriever, questions: list[str]) -> list[tuple[str | None, float | None]]:
    out = []
    for q in questions:
        result = await hr.search("grammar", q, top_k=3, use_hyde=False)
        out.append((result.results[0].id if result.results else None, result.raw_margin))
    return out


if __name__ == "__main__":
    main()
