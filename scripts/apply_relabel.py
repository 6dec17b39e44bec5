"""Apply a label check's decisions to the bundled eval sets, after entries were added to the corpus.

When the corpus grows, a labeller who sees only the new entries, the corpus and every labelled message decides,
per message, whether a new entry answers it (``data/eval/relabel.*.jsonl``, one line per decision)::

    {"key": "<set>:<query id>", "action": "replace" | "add" | "also", "entry": "g-…", "why": "…"}

- ``replace``: the new entry becomes the label (same qrels score); the old label moves to
  ``metadata.also_right``, since it was the nearest entry that teaches the message.
- ``add``: the new entry becomes a second label, at the query's highest score.
- ``also``: the new entry goes to ``metadata.also_right`` only (the lenient count; qrels unchanged).

``long_chat:<n>`` keys address line n of ``data/eval/long_chat/questions.jsonl``: its questions carry a
``relevant`` list only, so ``replace`` drops the old labels there and ``also`` is refused. The script refuses
unknown sets, queries, entries and actions and queries without labels, naming every problem before it writes
anything, and is idempotent (a decision already applied changes nothing), so it can be re-run on the committed
sets::

    .venv/bin/python scripts/apply_relabel.py data/eval/relabel.corpus195.jsonl
"""

from __future__ import annotations

import argparse
import csv
import json
import sys
from pathlib import Path

EVAL = Path(__file__).resolve().parent.parent / "data" / "eval"


def _lines(path: Path) -> list[dict]:
    return [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines() if line.strip()]


def _write_lines(path: Path, rows: list[dict]) -> None:
    path.write_text("".join(json.dumps(r, ensure_ascii=False) + "\n" for r in rows), encoding="utf-8")


def _qrels(path: Path) -> list[list[str]]:
    with path.open(encoding="utf-8", newline="") as f:
        return [row for row in csv.reader(f, delimiter="\t")]


def apply(decisions: list[dict], corpus_ids: set[str], root: Path = EVAL) -> list[str]:
    """Apply ``decisions``; returns what changed, one line each. Raises ``ValueError`` naming every problem."""
    problems: list[str] = []
    changes: list[str] = []
    by_set: dict[str, list[dict]] = {}
    for d in decisions:
        name, _, qid = d.get("key", "").partition(":")
        if d.get("action") not in {"replace", "add", "also"}:
            problems.append(f"{d.get('key')}: unknown action {d.get('action')!r}")
        elif d.get("entry") not in corpus_ids:
            problems.append(f"{d.get('key')}: {d.get('entry')!r} is not an entry of the corpus")
        elif not name or not qid or not (root / name).is_dir():
            problems.append(f"{d.get('key')}: no eval set {name!r}")
        elif name == "long_chat" and d["action"] == "also":
            problems.append(f"{d.get('key')}: long_chat has no also-right list (its questions carry `relevant` only)")
        else:
            by_set.setdefault(name, []).append({**d, "qid": qid})
    plans = []
    for name, ds in by_set.items():
        if name == "long_chat":
            path = root / name / "questions.jsonl"
            rows = _lines(path)
            for d in ds:
                if not d["qid"].isdigit() or int(d["qid"]) >= len(rows):
                    problems.append(f"{d['key']}: no such question")
            plans.append((name, path, rows, None, None, ds))
            continue
        qpath, rpath = root / name / "queries.jsonl", root / name / "qrels" / "test.tsv"
        queries, qrels = _lines(qpath), _qrels(rpath)
        ids = {q["_id"] for q in queries}
        labelled = {row[0] for row in qrels[1:]}
        problems += [f"{d['key']}: no such query" for d in ds if d["qid"] not in ids]
        problems += [f"{d['key']}: the query has no label to change" for d in ds
                     if d["qid"] in ids and d["qid"] not in labelled]
        plans.append((name, qpath, queries, rpath, qrels, ds))
    if problems:
        raise ValueError("; ".join(problems))
    for name, qpath, queries, rpath, qrels, ds in plans:
        if rpath is None:
            for d in ds:
                rel = queries[int(d["qid"])]["relevant"]
                if d["entry"] in rel:
                    continue
                if d["action"] == "replace":
                    rel[:] = [d["entry"]]
                else:
                    rel.append(d["entry"])
                changes.append(f"{d['key']}: {d['action']} {d['entry']}")
            _write_lines(qpath, queries)
            continue
        header, rows = qrels[0], qrels[1:]
        by_id = {q["_id"]: q for q in queries}
        for d in ds:
            qid, entry = d["qid"], d["entry"]
            mine = [r for r in rows if r[0] == qid]
            meta = by_id[qid].setdefault("metadata", {})
            also = meta.get("also_right") or []
            if any(r[1] == entry for r in mine) or (d["action"] == "also" and entry in also):
                continue
            if d["action"] == "also":
                also.append(entry)
            elif d["action"] == "add":
                rows.insert(rows.index(mine[-1]) + 1, [qid, entry, str(max(int(r[2]) for r in mine))])
            else:
                first = rows.index(mine[0])
                rows = [r for r in rows if r[0] != qid]
                rows.insert(first, [qid, entry, mine[0][2]])
                also[:0] = [r[1] for r in mine if r[1] not in also]
            if also:
                meta["also_right"] = also
            changes.append(f"{d['key']}: {d['action']} {entry}")
        with rpath.open("w", encoding="utf-8", newline="") as f:
            csv.writer(f, delimiter="\t", lineterminator="\n").writerows([header, *rows])
        _write_lines(qpath, queries)
    return changes


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("decisions", type=Path)
    parser.add_argument("--corpus", type=Path, default=EVAL / "grammar" / "corpus.jsonl")
    args = parser.parse_args()
    corpus_ids = {r["_id"] for r in _lines(args.corpus)}
    try:
        changes = apply(_lines(args.decisions), corpus_ids)
    except ValueError as e:
        sys.exit(f"apply_relabel: {e}")
    print("\n".join(changes) or "nothing to change (already applied)")


if __name__ == "__main__":
    main()
