"""The unseen follow-up sets' first entries judged blind: is the entry a right answer even where it is not the label?

Two judges (helpers under the recording protocol, ``data/recordings/README.md``) got only
``prompts/judge_entry.v1.md`` and the items of ``docs/recorded/judge_entry/items.jsonl``: every labelled entry and
every first entry of the generated and offline paths on ``fresh_followups2`` / ``fresh_followups3``, shuffled
under opaque keys (``keymap.json`` maps a key to its query and entry; the judges never saw it). This script
joins their answers with the replays' rankings (``docs/recorded/issue39.fresh{2,3}.rec*.json``) and prints, per
recording and kind, how often the first entry is the label, and how often it is the label or an entry both judges
call a right answer.

    .venv/bin/python scripts/entry_judgements.py
"""

from __future__ import annotations

import json
from pathlib import Path

from hyde_tutor.evaluation.beir import load_beir

ROOT = Path(__file__).resolve().parents[1]
JUDGED = ROOT / "docs" / "recorded" / "judge_entry"
SETS = {"fresh2": ("fresh_followups2", ("rec1", "rec2")), "fresh3": ("fresh_followups3", ("rec1", "rec2", "rec3"))}
PATHS = {"generated": "v2 hypothesis + conversation search, both leads (default)",
         "offline": "offline: conversation search (the `conversation` arm)"}


def answers(keymap: dict[str, list[str]], name: str) -> dict[tuple[str, str], bool]:
    rows = [json.loads(line) for line in (JUDGED / name).read_text(encoding="utf-8").splitlines() if line.strip()]
    return {(keymap[r["key"]][0], keymap[r["key"]][1]): r["answers"] == "y" for r in rows}


def main() -> None:
    keymap = json.loads((JUDGED / "keymap.json").read_text(encoding="utf-8"))
    one, two = answers(keymap, "judge1.jsonl"), answers(keymap, "judge2.jsonl")
    if one.keys() != two.keys():
        raise SystemExit("the two judges' files cover different items")
    both = {p: one[p] and two[p] for p in one}
    print(f"judges agree on {sum(one[p] == two[p] for p in one)} of {len(one)} items")
    print("| set | recording | kind | path | first entry is the label | the label or judged right by both |")
    print("|---|---|---|---|---|---|")
    for name, (folder, recordings) in SETS.items():
        rel = load_beir(ROOT / "data" / "eval" / folder).qrels
        labels = [(q, e) for q in rel for e in rel[q]]
        print(f"<!-- {name}: labels judged right by both judges: {sum(both[p] for p in labels)} of {len(labels)} -->")
        for rec in recordings:
            figures = json.loads((ROOT / "docs" / "recorded" / f"issue39.{name}.{rec}.json").read_text(
                encoding="utf-8"))[name]
            for kind in ("followup", "new"):
                for path, label in PATHS.items():
                    if path == "offline" and rec != recordings[0]:
                        continue  # the offline path does not read the recording
                    tops = {q: ranked[0] for q, ranked in figures[f"fresh:{kind}"][label]["by_query"].items()}
                    hit = sum(tops[q] in rel[q] for q in tops)
                    right = sum(tops[q] in rel[q] or both[(q, tops[q])] for q in tops)
                    n = len(tops)
                    print(f"| {name} | {rec if path == 'generated' else '–'} | {kind} | {path} | {hit}/{n} = "
                          f"{hit / n:.3f} | {right}/{n} = {right / n:.3f} |")


if __name__ == "__main__":
    main()
