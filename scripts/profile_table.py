"""A py-spy profile of the server (raw collapsed stacks, ``scripts/serve_drill.py --py-spy``) as a table: where the
server's CPU goes per turn, by part of the stack, and the functions that spend it.

    python scripts/profile_table.py /tmp/server.txt --turns 400 [--rate 100] [--markdown]

A sample is the thread holding the GIL (py-spy --gil: the drill profiles that way, since one server process runs
Python one thread at a time), so samples / rate is the seconds the GIL was busy. Each sample
goes to the deepest part of its stack that the table knows (a SQLAlchemy call made by the event log is the event
log's; the embedder called by the search is the embedder's).
"""

from __future__ import annotations

import argparse
import re
from collections import Counter
from pathlib import Path

# (part, patterns in a frame's file): the deepest frame that matches any part decides the sample's part
PARTS: list[tuple[str, tuple[str, ...]]] = [
    ("HTTP (uvicorn, starlette, h11/httptools)", ("uvicorn/", "starlette/", "h11/", "httptools")),
    ("UI adapter (events to Vercel AI chunks, SSE encoding)", ("pydantic_ai/ui/",)),
    ("agent run (pydantic-ai graph, messages, tool calls)", ("pydantic_ai/", "pydantic_graph/", "genai_prices/")),
    ("stub model (the drill's FunctionModel)", ("serve_drill.py",)),
    ("served turn (tutor/, server/)", ("hyde_tutor/tutor/", "hyde_tutor/server/")),
    ("conversation store (SQL)", ("experiment/sqlconversations", "pydantic_ai/conversation_store")),
    ("event log and experiment reads (SQL)", ("experiment/sqlstore", "experiment/events", "experiment/operations")),
    ("search: toolset and HyDE pipeline", ("hyde_tutor/plugin/", "hyde_tutor/hyde/", "retrieval/retriever",
                                           "retrieval/worker")),
    ("search: embedder (TensorFlow USE)", ("tensorflow", "retrieval/embedders", "tf_keras")),
    ("search: Korean analysis and BM25", ("kiwipiepy", "retrieval/analysis", "retrieval/sparse", "fastembed")),
    ("search: vector store (qdrant-edge)", ("qdrant_edge", "retrieval/store")),
]
FRAME = re.compile(r"^(?P<func>.*) \((?P<file>[^():]*)(?::\d+)?\)$")


def part_of(frames: list[str]) -> str:
    found = "other (event loop, threads, logging)"
    for frame in frames:
        match = FRAME.match(frame.strip())
        file = match.group("file") if match else frame
        for name, patterns in PARTS:
            if any(p in file for p in patterns):
                found = name
                break
    return found


def read(path: Path) -> tuple[Counter[str], Counter[str], int]:
    parts: Counter[str] = Counter()
    leaves: Counter[str] = Counter()
    total = 0
    for line in path.read_text(encoding="utf-8", errors="replace").splitlines():
        stack, _, count = line.rpartition(" ")
        if not stack or not count.isdigit():
            continue
        frames = [f for f in stack.split(";") if not f.startswith(("thread (", "process "))]
        n = int(count)
        total += n
        parts[part_of(frames)] += n
        if frames:
            match = FRAME.match(frames[-1].strip())
            leaf = f"{match.group('func')} ({Path(match.group('file')).name})" if match else frames[-1]
            leaves[leaf] += n
    return parts, leaves, total


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("profile", type=Path)
    parser.add_argument("--turns", type=int, required=True, help="turns the drill served while profiled")
    parser.add_argument("--rate", type=float, default=100.0, help="py-spy's samples per second (its --rate)")
    parser.add_argument("--top", type=int, default=12, help="functions listed by own time")
    args = parser.parse_args()
    parts, leaves, total = read(args.profile)
    per_turn = 1000 / args.rate / args.turns
    print(f"| part of the server | CPU ms per turn | share |\n|---|---:|---:|")
    for name, n in parts.most_common():
        print(f"| {name} | {n * per_turn:.1f} | {n / total:.0%} |")
    print(f"| **all** | **{total * per_turn:.1f}** | 100% |\n")
    print(f"| function (own time) | CPU ms per turn | share |\n|---|---:|---:|")
    for name, n in leaves.most_common(args.top):
        print(f"| `{name}` | {n * per_turn:.1f} | {n / total:.0%} |")


if __name__ == "__main__":
    main()
