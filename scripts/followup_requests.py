"""The hypothesis requests a capable model would answer for the conversation set, rendered for recording.

One JSONL record per query of data/eval/conversations (follow-ups and new questions mid-chat alike: both have
a history): its id and kind, the system prompt's ref (``name@vN``), the request template's ref, the perspective,
and the rendered user message, exactly as the pipeline renders it with that request version
(``hyde.hypotheses``: the recent conversation, the message, the first perspective's instruction).

    .venv/bin/python scripts/followup_requests.py --out data/recordings/requests/conversations.followup_v2.jsonl
    .venv/bin/python scripts/followup_requests.py --version 1 --out /tmp/v1.jsonl   # today's request

Writing hypotheses is for the recording writers (under the protocol); this script writes only requests.
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

from hyde_tutor.evaluation.beir import load_beir
from hyde_tutor.hyde.conversation import render_conversation
from hyde_tutor.hyde.domains import DOMAINS
from hyde_tutor.hyde.requests import render_followup_request
from hyde_tutor.llm.prompts import load_prompt, parse_perspectives

ROOT = Path(__file__).resolve().parent.parent


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--dataset", type=Path, default=ROOT / "data" / "eval" / "conversations")
    ap.add_argument("--version", type=int, default=2, help="hypothesis_followup_request version to render")
    ap.add_argument("--domain", default="grammar", choices=sorted(DOMAINS))
    ap.add_argument("--out", type=Path, required=True)
    args = ap.parse_args()
    profile = DOMAINS[args.domain]
    system = load_prompt(profile.prompt)
    request = load_prompt(profile.followup_request, args.version)
    perspective = parse_perspectives(load_prompt(profile.perspectives).text)[0]
    data = load_beir(args.dataset, group_by="kind")
    args.out.parent.mkdir(parents=True, exist_ok=True)
    with args.out.open("w", encoding="utf-8") as fh:
        for q in data.queries:
            user = render_followup_request(request, render_conversation(q.history), q.text, perspective.instruction)
            fh.write(json.dumps({"id": q.id, "kind": q.group, "system_prompt_ref": system.ref,
                                 "request_ref": request.ref, "perspective": perspective.name, "query": q.text,
                                 "user_message": user}, ensure_ascii=False) + "\n")
    print(f"{len(data.queries)} requests ({request.ref}, system {system.ref}) -> {args.out}")


if __name__ == "__main__":
    main()
