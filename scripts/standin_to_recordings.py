"""Turn a stand-in writer's answers into recordings (see data/recordings/README.md).

The writer (a capable LLM given only the prompt files and the questions) saves one line per answer:
{"id", "query", "perspective", "text"}. This script adds what an API call's record carries: kind,
domain, the honest model label, the prompt refs and the hash of the rendered request, and the time.

    python scripts/standin_to_recordings.py --domain grammar --out data/recordings/grammar_eval.jsonl A.jsonl B.jsonl

Follow-up answers (``--followups``: the writer got the rendered requests of ``scripts/render_requests.py`` and saved
{"id" or "key", "perspective", "text"}; ``--queries`` has the conversations, ``--requests`` maps keys to ids; ``--followup-version`` the template it answered):

    python scripts/standin_to_recordings.py --domain grammar --followups --followup-version 2 \
        --queries data/eval/followups/queries.jsonl --out data/recordings/followups.v2.jsonl answers.jsonl

One-call answers (``--one-call``: the writer got the rendered one-call request per line and saved
{"id", "n", "text"}; ``--queries`` maps ids back to the question text) become ``hypotheses`` records
whose perspective names the first N perspectives (``rule+example``):

    python scripts/standin_to_recordings.py --domain grammar --one-call --queries data/eval/grammar/queries.jsonl \
        --out data/recordings/grammar_eval.one_call.jsonl answers.jsonl
"""

from __future__ import annotations

import argparse
import json
from collections.abc import Iterator
from pathlib import Path

from hyde_tutor.hyde.hypotheses import DOMAINS
from hyde_tutor.llm.prompts import load_prompt, parse_perspectives
from hyde_tutor.llm.recorder import RecordingWriter
from hyde_tutor.hyde.requests import render_hypothesis_request, render_multi_request
from hyde_tutor.llm.recordings import Recording, request_sha256, utc_now

MODEL_LABEL = "frontier-llm-stand-in"


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--domain", required=True, choices=sorted(DOMAINS))
    ap.add_argument("--out", required=True, type=Path)
    ap.add_argument("--one-call", action="store_true", help="answers to the one-call request: {id, n, text}")
    ap.add_argument("--followups", action="store_true",
                    help="answers to the follow-up request: {id, perspective, text}; --queries has the history")
    ap.add_argument("--condense", action="store_true",
                    help="answers to the condense request: {id, text}; --queries has the follow-ups and history")
    ap.add_argument("--queries", type=Path, help="with --one-call: the BEIR queries.jsonl the ids come from")
    ap.add_argument("--requests", type=Path,
                    help="with --followups: the request file of scripts/render_requests.py, for answers named by key")
    ap.add_argument("--followup-version", type=int, default=None,
                    help="with --followups: the follow-up request template version the writer answered (default: newest)")
    ap.add_argument("answers", nargs="+", type=Path)
    args = ap.parse_args()
    profile = DOMAINS[args.domain]
    if args.one_call:
        records = one_call(args, profile)
    elif args.followups:
        records = followups(args, profile)
    elif args.condense:
        records = condense(args)
    else:
        records = single(args, profile)
    writer = RecordingWriter(args.out)
    added = 0
    for rec in records:
        if not writer.has(rec.key):  # a re-run adds only what is new
            writer.append(rec)
            added += 1
    print(f"{args.out}: {added} records added")


def single(args: argparse.Namespace, profile: object, rows: list[dict] | None = None) -> Iterator[Recording]:
    """One hypothesis per answer: {id, query, perspective, text} (``rows``, else read from ``args.answers``)."""
    system, request, persp = (load_prompt(profile.prompt), load_prompt(profile.request),  # type: ignore[attr-defined]
                              load_prompt(profile.perspectives))  # type: ignore[attr-defined]
    instructions = {p.name: p.instruction for p in parse_perspectives(persp.text)}
    for row in rows if rows is not None else _rows(args.answers):
        query = row["query"].strip()
        user = render_hypothesis_request(request, query, instructions[row["perspective"]])
        yield Recording(kind="hypothesis", domain=args.domain, query=query, perspective=row["perspective"],
                        text=row["text"], model=MODEL_LABEL, prompt_refs=(system.ref, request.ref, persp.ref),
                        prompt_sha256=request_sha256(system.text, user), created=utc_now())


def _rows(paths: list[Path]) -> Iterator[dict]:
    """The writer's answers, one JSON object per non-empty line, file after file."""
    for path in paths:
        for line in path.read_text(encoding="utf-8").splitlines():
            if line.strip():
                yield json.loads(line)


def followups(args: argparse.Namespace, profile: object) -> Iterator[Recording]:
    from hyde_tutor.evaluation.beir import load_beir
    from hyde_tutor.hyde.conversation import render_conversation
    from hyde_tutor.hyde.requests import render_followup_request

    system, persp = load_prompt(profile.prompt), load_prompt(profile.perspectives)  # type: ignore[attr-defined]
    request = load_prompt(profile.followup_request, version=args.followup_version)  # type: ignore[attr-defined]
    instructions = {p.name: p.instruction for p in parse_perspectives(persp.text)}
    queries = {q.id: q for q in load_beir(args.queries.parent).queries}
    ids = {r["key"]: r["id"] for r in _rows([args.requests])} if args.requests else {}
    for row in _rows(args.answers):
        q = queries[row["id"] if "id" in row else ids[row["key"]]]
        if not q.history:  # a message with no conversation before it gets the plain request
            yield from single(argparse.Namespace(domain=args.domain, answers=None), profile,
                              [{"query": q.text, "perspective": row["perspective"], "text": row["text"]}])
            continue
        conversation = render_conversation(q.history)
        user = render_followup_request(request, conversation, q.text.strip(), instructions[row["perspective"]])
        yield Recording(kind="hypothesis", domain=args.domain, query=q.text.strip(), perspective=row["perspective"],
                        text=row["text"], model=MODEL_LABEL, prompt_refs=(system.ref, request.ref, persp.ref),
                        prompt_sha256=request_sha256(system.text, user), created=utc_now(), conversation=conversation)


def condense(args: argparse.Namespace) -> Iterator[Recording]:
    """Follow-ups rewritten as standalone questions (``prompts/condense.v<N>.md``): ``condense`` records."""
    from hyde_tutor.evaluation.beir import load_beir
    from hyde_tutor.hyde.conversation import render_conversation
    from hyde_tutor.hyde.requests import render_condense_request

    system, request = load_prompt("condense"), load_prompt("condense_request")
    queries = {q.id: q for q in load_beir(args.queries.parent).queries}
    for row in _rows(args.answers):
        q = queries[row["id"]]
        conversation = render_conversation(q.history)
        user = render_condense_request(request, conversation, q.text.strip())
        yield Recording(kind="condense", query=q.text.strip(), perspective="standalone", text=row["text"],
                        model=MODEL_LABEL, prompt_refs=(system.ref, request.ref),
                        prompt_sha256=request_sha256(system.text, user), created=utc_now(), conversation=conversation)


def one_call(args: argparse.Namespace, profile: object) -> Iterator[Recording]:
    system, request, persp = (load_prompt(profile.prompt), load_prompt(profile.multi_request),  # type: ignore[attr-defined]
                              load_prompt(profile.perspectives))  # type: ignore[attr-defined]
    perspectives = parse_perspectives(persp.text)
    texts = {json.loads(l)["_id"]: json.loads(l)["text"] for l in args.queries.read_text(encoding="utf-8").splitlines()
             if l.strip()}
    for row in _rows(args.answers):
        query, chosen = texts[row["id"]].strip(), perspectives[: int(row["n"])]
        user = render_multi_request(request, query, [p.instruction for p in chosen])
        yield Recording(kind="hypotheses", domain=args.domain, query=query, perspective="+".join(p.name for p in chosen),
                        text=row["text"], model=MODEL_LABEL, prompt_refs=(system.ref, request.ref, persp.ref),
                        prompt_sha256=request_sha256(system.text, user), created=utc_now())


if __name__ == "__main__":
    main()
