"""Does the ranking keep what the hypothesis knows? Follow-ups split by what their hypothesis names (issue 39).

For each follow-up of a replayed set, the hypothesis's «Конструкция:» line is read with the named lead's own
matcher (:func:`hyde_tutor.retrieval.patterns.name_match`) against every entry's pattern, and the follow-up goes in
one of three groups: the best-matching entries include a **label**; they are **another** entry (and whether the
labeller called it also right); or the name matches **no entry** (an inflected or compound name, or a construction
the corpus lacks). Per group: how many, and how often the served ranking (the default row of
``scripts/followup_table.py --json``) puts a label first.

    .venv/bin/python scripts/named_split.py fresh6:data/recordings/fresh_followups6.v2.rec1.jsonl:docs/recorded/issue39.fresh6.rec1.json

Each argument is ``set:recording:table-json`` (the set as in ``followup_table.SETS``); ``--misses`` lists the
follow-ups whose label is not first.
"""

from __future__ import annotations

import argparse
import csv
import json
import re
import sys
from pathlib import Path

from hyde_tutor.retrieval.patterns import name_match

sys.path.insert(0, str(Path(__file__).resolve().parent))
from followup_table import SETS  # noqa: E402

ROOT = Path(__file__).resolve().parent.parent
DEFAULT_ROW = "v2 hypothesis + conversation search, both leads (default)"


def header(text: str) -> str:
    """The construction a hypothesis names in its «Конструкция:» line ("" without one)."""
    m = re.search(r"Конструкция[^:\n]*:\**\s*(.+)", text)
    return m.group(1).strip() if m else ""


def split(patterns: dict[str, str], labels: dict[str, list[str]], also: dict[str, list[str]],
          named: dict[str, str], firsts: dict[str, str]) -> dict[str, dict]:
    """Group the follow-ups of ``firsts`` (query id → first entry) by what ``named`` (query id → name) names."""
    groups = {g: {"n": 0, "label_first": 0, "also_right": 0, "misses": []} for g in ("label", "other", "none")}
    for qid, first in firsts.items():
        name = named.get(qid, "")
        scores = {e: name_match(name, p) for e, p in patterns.items()} if name else {}
        best = max(scores.values(), default=0)
        top = {e for e, s in scores.items() if best and s == best}
        group = "none" if not best else "label" if top & set(labels[qid]) else "other"
        g = groups[group]
        g["n"] += 1
        g["label_first"] += first in labels[qid]
        g["also_right"] += bool(top & set(also.get(qid, ())))
        if first not in labels[qid]:
            g["misses"].append((qid, name, first))
    return groups


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("runs", nargs="+", help="set:recording:table-json")
    parser.add_argument("--row", default=DEFAULT_ROW)
    parser.add_argument("--misses", action="store_true")
    args = parser.parse_args()
    patterns = {e["id"]: e["pattern"] for e in map(json.loads, (ROOT / "data" / "grammar.jsonl").read_text(
        encoding="utf-8").splitlines()) if e}
    for run in args.runs:
        name, recording, table = run.split(":")
        folder = ROOT / SETS[name]
        labels: dict[str, list[str]] = {}
        with (folder / "qrels" / "test.tsv").open(encoding="utf-8") as f:
            for qid, doc, _ in list(csv.reader(f, delimiter="\t"))[1:]:
                labels.setdefault(qid, []).append(doc)
        queries = [json.loads(line) for line in (folder / "queries.jsonl").read_text(encoding="utf-8").splitlines()]
        by_text = {}
        for line in Path(recording).read_text(encoding="utf-8").splitlines():
            r = json.loads(line)
            if r.get("kind") == "hypothesis":
                by_text[r["query"]] = header(r["text"])
        named = {q["_id"]: by_text.get(q["text"], "") for q in queries}
        also = {q["_id"]: (q.get("metadata") or {}).get("also_right") or [] for q in queries}
        data = json.loads(Path(table).read_text(encoding="utf-8"))
        part = next(iter(data.values()))
        firsts = {qid: ranked[0] for key, rows in part.items() if key.endswith(":followup")
                  for qid, ranked in rows[args.row]["by_query"].items()}
        groups = split(patterns, labels, also, named, firsts)
        print(f"{name} ({Path(recording).name}): {len(firsts)} follow-ups; "
              + "; ".join(f"names {g}: {v['n']} (label first {v['label_first']}"
                          + (f", also right {v['also_right']}" if g == "other" else "") + ")"
                          for g, v in groups.items()))
        if args.misses:
            for g, v in groups.items():
                for qid, nm, first in v["misses"]:
                    print(f"  {g:5} {qid:8} named {nm[:50]!r:54} first {first} {patterns[first]}")


if __name__ == "__main__":
    main()
