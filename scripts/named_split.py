"""Does the ranking keep what the hypothesis knows? Follow-ups split by what their hypothesis names (issue 39).

For each follow-up of a replayed set, the construction its hypotheses name («Конструкция:», read by the named
lead's own :func:`~hyde_tutor.hyde.named.named_construction`) is matched against every entry's pattern with the
lead's own :func:`~hyde_tutor.hyde.named.name_strength`, and the follow-up goes in one of three groups: the
best-matching entries include a **label**; they are **another** entry (and whether the labeller called it also
right); or the name matches **no entry** (a name the matcher does not read, or a construction the corpus lacks).
The lead itself only looks at the fused top 10 (5 until 2026-11-29); this looks at every entry. Per group: how many, and how often the
served ranking (the default row of ``scripts/followup_table.py --json``) puts a label first.

    .venv/bin/python scripts/named_split.py fresh6:data/recordings/fresh_followups6.v2.rec1.jsonl:docs/recorded/issue39.fresh6.rec1.json

Each argument is ``set:recording:table-json`` (the set as in ``followup_table.SETS``); ``--misses`` lists the
follow-ups whose label is not first.
"""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Iterable, Sequence
from pathlib import Path

from hyde_tutor.evaluation.beir import EvalQuery, load_beir
from hyde_tutor.hyde.conversation import render_conversation
from hyde_tutor.hyde.domains import DOMAINS
from hyde_tutor.hyde.named import name_strength, named_construction

sys.path.insert(0, str(Path(__file__).resolve().parent))
from followup_table import SETS, kinds  # noqa: E402

ROOT = Path(__file__).resolve().parent.parent
DEFAULT_ROW = "v2 hypothesis + conversation search, both leads (default)"
HEADER = DOMAINS["grammar"].name_header or ""


def names_by_query(recordings: Iterable[dict], queries: Sequence[EvalQuery]) -> dict[str, list[str]]:
    """Query id → the constructions its recorded hypotheses name, found by message *and* conversation, as the
    replay finds them (the same «а если ещё нет?» follows different conversations)."""
    by_request: dict[tuple[str, str], list[str]] = {}
    for r in recordings:
        name = named_construction(r.get("text", ""), HEADER) if r.get("kind") == "hypothesis" else None
        if name:
            by_request.setdefault((r["query"].strip(), r.get("conversation", "")), []).append(name)
    return {q.id: by_request.get((q.text.strip(), render_conversation(q.history)), []) for q in queries}


def split(patterns: dict[str, str], labels: dict[str, list[str]], also: dict[str, list[str]],
          named: dict[str, list[str]], firsts: dict[str, str]) -> dict[str, dict]:
    """Group the follow-ups of ``firsts`` (query id → first entry) by what ``named`` (query id → the names its
    hypotheses give) names."""
    groups = {g: {"n": 0, "label_first": 0, "also_right": 0, "misses": []} for g in ("label", "other", "none")}
    for qid, first in firsts.items():
        names = named.get(qid) or []
        scores = {e: name_strength(names, p) for e, p in patterns.items()} if names else {}
        best = max(scores.values(), default=())
        top = {e for e, s in scores.items() if any(best) and s == best}
        group = "none" if not any(best) else "label" if top & set(labels.get(qid, ())) else "other"
        g = groups[group]
        g["n"] += 1
        g["label_first"] += first in labels.get(qid, ())
        g["also_right"] += bool(top & set(also.get(qid, ())))
        if first not in labels.get(qid, ()):
            g["misses"].append((qid, " | ".join(names), first))
    return groups


def _lines(path: Path) -> list[dict]:
    return [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines() if line.strip()]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("runs", nargs="+", help="set:recording:table-json")
    parser.add_argument("--row", default=DEFAULT_ROW)
    parser.add_argument("--misses", action="store_true")
    args = parser.parse_args()
    patterns = {e["id"]: e["pattern"] for e in _lines(ROOT / "data" / "grammar.jsonl")}
    for run in args.runs:
        name, recording, table = run.split(":", 2)
        folder = ROOT / SETS[name]
        data, (_, _, also) = load_beir(folder), kinds(str(folder))
        labels = {qid: list(docs) for qid, docs in data.qrels.items()}
        named = names_by_query(_lines(Path(recording)), data.queries)
        part = next(iter(json.loads(Path(table).read_text(encoding="utf-8")).values()))
        firsts = {qid: ranked[0] for key, rows in part.items() if key.endswith(":followup")
                  for qid, ranked in rows[args.row]["by_query"].items()}
        groups = split(patterns, labels, {q: sorted(a) for q, a in also.items()}, named, firsts)
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
