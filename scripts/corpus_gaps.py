"""Constructions capable hypotheses name that no grammar entry covers: where the corpus should grow.

A capable model's hypothesis names its construction in its first line («Конструкция: -는 길에»). When no entry's
pattern even partly matches that name (:func:`covers`: morphemes by the Korean analyser, so spelling and spacing
do not matter), the search can only find a neighbour, and the named lead has nothing to lead with.
This script reads hypotheses from recordings (``kind: hypothesis`` records, and the ``hypothesis`` argument of
recorded agent tool calls), groups the names no entry matches, and prints them by how often they were named, each
with one message that asked for it:

    .venv/bin/python scripts/corpus_gaps.py data/recordings/fresh_followups*.jsonl data/recordings/agent/*.jsonl
    .venv/bin/python scripts/corpus_gaps.py --corpus data/grammar.jsonl new_entries.jsonl -- <recordings>

``--corpus`` takes several files (e.g. the corpus and pending entries, to see which gaps they would close). Names
are grouped by their Korean morphemes, so «-는 길에» and «-는 길에 (по дороге)» count as one. Blocking: the Korean
analyser reads every name.
"""

from __future__ import annotations

import argparse
import itertools
import json
import re
import sys
from collections.abc import Iterable, Iterator
from pathlib import Path

from hyde_tutor.hyde.domains import DOMAINS
from hyde_tutor.hyde.named import named_construction
from hyde_tutor.retrieval.patterns import pattern_sequences

HEADER = DOMAINS["grammar"].name_header or ""


def hypotheses(paths: Iterable[Path]) -> Iterator[tuple[str, str]]:
    """(learner message, hypothesis text) of every recorded hypothesis and agent tool call in ``paths``."""
    for path in paths:
        for line in path.read_text(encoding="utf-8").splitlines():
            if not line.strip():
                continue
            row = json.loads(line)
            if row.get("kind") in ("hypothesis", "hypotheses") and row.get("text"):
                yield str(row.get("query", "")), str(row["text"])
            for call in row.get("calls") or ():
                text = (call.get("args") or {}).get("hypothesis")
                if text:
                    yield str(row.get("query", "")), str(text)


_OPTIONAL = re.compile(r"(?<=[가-힣])\(([가-힣]+)\)")
_BETWEEN = re.compile(r"\s+(?:и|или|vs\.?|в сравнении с|против)\s+|\s*↔\s*|\s*[;,]\s*")
"""What joins two constructions in one name («은/는 и 이/가», «-(이)나 ↔ 밖에»): each is looked up on its own."""


def parts(name: str) -> list[str]:
    """The constructions one name holds (a contrast question's hypothesis names two)."""
    return [p for p in _BETWEEN.split(name) if p.strip()]


def variants(name: str) -> list[str]:
    """``name`` with each optional ending written in brackets after a syllable both kept and left out
    (``-느라(고)`` → ``-느라고``, ``-느라``: the analyser reads the bracketed form as neither), with and without a
    leading hyphen (``-(이)라도`` and the corpus's ``(이)라도``)."""
    pieces = _OPTIONAL.split(name)  # text, optional, text, optional, …
    choices = [(p,) if i % 2 == 0 else (p, "") for i, p in enumerate(pieces)]
    out = ["".join(c) for c in itertools.product(*choices)]
    return out + [v[1:] if v.startswith("-") else f"-{v}" for v in out]


def _runs(seq: tuple, n: int) -> set[tuple]:
    return {seq[i:i + n] for i in range(len(seq) - n + 1)}


def covers(notation: str, name: str) -> bool:
    """Whether an entry's ``notation`` teaches at least part of the construction ``name``: one of its morpheme
    sequences and one of the name's share two morphemes in a row (``-(으)ㄴ 적이 있다/없다`` covers ``-아/어 본 적이
    없다``; ``-(으)ㄴ/는 대신에`` covers ``-는 대신(에)``), the whole name is in the entry (``-(으)ㄹ수록`` in
    ``-(으)면 -(으)ㄹ수록``), or the entry is one content word the name contains (``안`` in ``아직 안 -았/었어요``).
    Looser than the named lead's :func:`~hyde_tutor.retrieval.naming.name_match`: a gap here is a construction no
    entry even partly teaches."""
    names = [s for v in variants(name) for s in pattern_sequences(v)]
    for t in pattern_sequences(notation):
        for s in names:
            if s in _runs(t, len(s)):  # the whole name inside the entry (-(으)ㄹ수록 in -(으)면 -(으)ㄹ수록)
                return True
            if len(t) == 1 and t[0][1] not in ("E", "J") and t[0] in s:
                return True
            if _runs(t, 2) & _runs(s, 2):
                return True
    return False


def gaps(named: Iterable[tuple[str, str]], patterns: list[str]) -> list[tuple[str, int, str]]:
    """The names no pattern covers: (name as first written, times named, one message that asked), most named first.
    A name that joins two constructions («은/는 и 이/가») counts each; a name with no Korean morphemes to compare
    (a Russian-only header) is skipped."""
    groups: dict[frozenset, list[tuple[str, str]]] = {}
    covered: dict[frozenset, bool] = {}
    for message, text in named:
        for name in parts(named_construction(text, HEADER) or ""):
            key = frozenset(pattern_sequences(name))
            if not key:
                continue
            if key not in covered:
                covered[key] = any(covers(p, name) for p in patterns)
            if not covered[key]:
                groups.setdefault(key, []).append((name, message))
    out = [(rows[0][0], len(rows), rows[0][1]) for rows in groups.values()]
    return sorted(out, key=lambda r: (-r[1], r[0]))


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--corpus", nargs="+", type=Path, default=[Path("data/grammar.jsonl")],
                    help="grammar entries (JSON Lines with `pattern`); several files are joined")
    ap.add_argument("recordings", nargs="+", type=Path)
    args = ap.parse_args()
    patterns = [str(json.loads(line)["pattern"]) for path in args.corpus
                for line in path.read_text(encoding="utf-8").splitlines() if line.strip()]
    missing = [p for p in args.recordings if not p.is_file()]
    if missing:
        sys.exit(f"not found: {', '.join(map(str, missing))}")
    rows = gaps(hypotheses(args.recordings), patterns)
    print(f"{len(patterns)} entries; {sum(n for _, n, _ in rows)} hypotheses name a construction none of them has "
          f"({len(rows)} constructions)\n")
    print("| construction named | times | e.g. the message |")
    print("|---|---:|---|")
    for name, n, message in rows:
        print(f"| {name} | {n} | {message[:80]} |")


if __name__ == "__main__":
    main()
