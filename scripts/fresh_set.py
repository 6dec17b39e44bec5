"""Build a BEIR follow-up set from outside writers' chats and a labeller's labels (issue 39's fresh sets).

The writers (who never see the corpus) save one chat per line: {"id", "kind", "history", "text", "intended",
"same"}. The labeller (who knows the corpus, and never saw a figure on the set) saves one line per chat:
{"id", "relevant": ["g-…", …], "also_right": ["g-…", …] (optional: entries that would also teach the message
correctly, kept in ``metadata`` for a lenient count beside the strict one), "turn1_entry": "g-…" or "", "drop":
null or "why no entry answers it"}.
This script joins them into ``queries.jsonl`` (``metadata``: kind, turn1_entry, same_entry, writer,
writer_note), ``qrels/test.tsv`` and a copy of the corpus, and refuses chats without a label, labels naming an
entry the corpus lacks, labels of chats nobody wrote, and ids written or labelled twice, naming every problem.

    .venv/bin/python scripts/fresh_set.py --chats w3.jsonl w4.jsonl --labels labels.jsonl \\
        --corpus data/eval/grammar/corpus.jsonl --out data/eval/fresh_followups2
"""

from __future__ import annotations

import argparse
import json
import shutil
import sys
from pathlib import Path


def _lines(path: Path) -> list[dict]:
    return [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines() if line.strip()]


def build(chats: list[dict], labels: dict[str, dict], corpus_ids: set[str]) -> tuple[list[dict], list[tuple[str, str]]]:
    """The set's queries and qrels rows; raises ``ValueError`` naming every problem at once."""
    problems: list[str] = [f"{qid}: labelled, but no writer wrote it" for qid in labels.keys() - {c["id"] for c in chats}]
    seen: set[str] = set()
    queries: list[dict] = []
    qrels: list[tuple[str, str]] = []
    for chat in chats:
        qid = chat["id"]
        if qid in seen:
            problems.append(f"{qid}: written twice")
        seen.add(qid)
        label = labels.get(qid)
        if label is None:
            problems.append(f"{qid}: no label")
            continue
        if label.get("drop"):
            continue
        relevant = label.get("relevant") or []
        if not relevant:
            problems.append(f"{qid}: no relevant entry and no drop reason")
            continue
        also_right = [d for d in label.get("also_right") or [] if d not in relevant]
        unknown = [d for d in [*relevant, *also_right, label.get("turn1_entry") or ""] if d and d not in corpus_ids]
        if unknown:
            problems.append(f"{qid}: {unknown} are not entries of the corpus")
            continue
        turn1 = label.get("turn1_entry") or ""
        queries.append({"_id": qid, "text": chat["text"], "history": chat["history"], "metadata": {
            "kind": chat["kind"], "turn1_entry": turn1, "same_entry": bool(turn1) and turn1 in relevant,
            "writer": qid.split("-")[0], "writer_note": chat.get("intended", ""), "also_right": also_right}})
        qrels.extend((qid, d) for d in relevant)
    if problems:
        raise ValueError("; ".join(problems))
    return queries, qrels


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--chats", nargs="+", required=True, type=Path)
    ap.add_argument("--labels", required=True, type=Path)
    ap.add_argument("--corpus", required=True, type=Path, help="the BEIR corpus.jsonl the labels name entries of")
    ap.add_argument("--out", required=True, type=Path)
    args = ap.parse_args()
    chats = [c for path in args.chats for c in _lines(path)]
    rows = _lines(args.labels)
    labels = {row["id"]: row for row in rows}
    if len(labels) < len(rows):
        sys.exit(f"not written: {len(rows) - len(labels)} chats are labelled twice in {args.labels}")
    corpus_ids = {row["_id"] for row in _lines(args.corpus)}
    try:
        queries, qrels = build(chats, labels, corpus_ids)
    except ValueError as e:
        sys.exit(f"not written: {e}")
    (args.out / "qrels").mkdir(parents=True, exist_ok=True)
    (args.out / "queries.jsonl").write_text("".join(json.dumps(q, ensure_ascii=False) + "\n" for q in queries),
                                            encoding="utf-8")
    (args.out / "qrels" / "test.tsv").write_text(
        "query-id\tcorpus-id\tscore\n" + "".join(f"{q}\t{d}\t1\n" for q, d in qrels), encoding="utf-8")
    shutil.copyfile(args.corpus, args.out / "corpus.jsonl")
    kinds = [q["metadata"]["kind"] for q in queries]
    print(f"{args.out}: {len(queries)} queries ({kinds.count('followup')} follow-ups, {kinds.count('new')} new), "
          f"{len(chats) - len(queries)} dropped, {len(qrels)} qrels")


if __name__ == "__main__":
    main()
