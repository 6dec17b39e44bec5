"""Write the hypothesis requests a BEIR set's queries make, rendered exactly as the API call carries them.

For a set whose queries carry a ``history`` (the conversation before the message), each line is the request
the HyDE pipeline sends for that message: the follow-up request (``prompts/hypothesis_followup_request.v<N>.md``)
with the recent conversation as ``Ученик:`` / ``Репетитор:`` lines, the message and the perspective. A query
without history gets the plain request (``hypothesis_request``). The file is what a recording writer is given
(with the system prompt file it names), so its answers can become replayable recordings
(``scripts/standin_to_recordings.py --followups``).

    .venv/bin/python scripts/render_requests.py --dataset data/eval/followups --out requests.jsonl
    .venv/bin/python scripts/render_requests.py --dataset data/eval/conversations --perspectives rule,example \\
        --followup-version 2 --out conversations.v2.jsonl

One JSON object per line: ``key`` (``r001``…: an opaque name for the request, what a writer answers with when
the ids would tell it something, e.g. ``cv-f…`` follow-ups and ``cv-n…`` new questions; ``--shuffle-seed`` hides
the order too), ``id``, ``system_prompt`` (the file name under ``prompts/``), ``request`` (the
request template's ``name@vN``), ``perspective``, ``user`` (the rendered user message) and ``user_sha256``
(the hash of system prompt + user message that the recording will carry, to check a round trip).
"""

from __future__ import annotations

import argparse
import json
import random
from collections.abc import Iterator
from pathlib import Path

from hyde_tutor.evaluation.beir import load_beir
from hyde_tutor.hyde.conversation import render_conversation
from hyde_tutor.hyde.domains import DOMAINS
from hyde_tutor.hyde.requests import render_followup_request, render_hypothesis_request
from hyde_tutor.llm.prompts import load_prompt, parse_perspectives
from hyde_tutor.llm.recordings import request_sha256


def rendered(dataset: Path, domain: str, perspectives: list[str], followup_version: int | None) -> Iterator[dict]:
    """One request per (query, perspective), in the set's order."""
    profile = DOMAINS[domain]
    system = load_prompt(profile.prompt)
    plain, followup = load_prompt(profile.request), load_prompt(profile.followup_request, version=followup_version)
    by_name = {p.name: p.instruction for p in parse_perspectives(load_prompt(profile.perspectives).text)}
    unknown = [p for p in perspectives if p not in by_name]
    if unknown:
        raise SystemExit(f"unknown perspective {unknown[0]!r}; choose from {', '.join(by_name)}")
    for q in load_beir(dataset).queries:
        for name in perspectives:
            if q.history:
                template = followup
                user = render_followup_request(followup, render_conversation(q.history), q.text.strip(), by_name[name])
            else:
                template = plain
                user = render_hypothesis_request(plain, q.text.strip(), by_name[name])
            yield {"id": q.id, "system_prompt": f"{system.name}.v{system.version}.md", "request": template.ref,
                   "perspective": name, "user": user, "user_sha256": request_sha256(system.text, user)}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--dataset", required=True, type=Path, help="a BEIR folder whose queries.jsonl has history")
    ap.add_argument("--out", required=True, type=Path)
    ap.add_argument("--domain", default="grammar", choices=sorted(DOMAINS))
    ap.add_argument("--perspectives", default="rule",
                    help="comma-separated; the default policy's one hypothesis uses the first (rule)")
    ap.add_argument("--followup-version", type=int, default=None, help="follow-up template version (default: newest)")
    ap.add_argument("--shuffle-seed", type=int, default=None, help="shuffle the lines (their keys then say nothing)")
    args = ap.parse_args()
    rows = list(rendered(args.dataset, args.domain, args.perspectives.split(","), args.followup_version))
    if args.shuffle_seed is not None:  # ids and order can say which kind a message is (cv-f…, cv-n…): hide both
        random.Random(args.shuffle_seed).shuffle(rows)
    for no, row in enumerate(rows, start=1):
        row["key"] = f"r{no:03d}"
    args.out.parent.mkdir(parents=True, exist_ok=True)
    with args.out.open("w", encoding="utf-8") as fh:
        for row in rows:
            fh.write(json.dumps(row, ensure_ascii=False) + "\n")
    print(f"{args.out}: {len(rows)} requests ({sum(1 for r in rows if 'followup' in r['request'])} with the conversation)")


if __name__ == "__main__":
    main()
