"""Time the same conversation through the product's two paths: a running `hyde-tutor serve` (over HTTP, as the
page does) and `hyde-tutor chat` (a subprocess fed one question per line). Per turn: time to the entries, to
the first words of the reply, to the whole reply; then median and max. Times are the client's, from sending
the question (served) or from the chat echoing it (CLI). The load average is printed before and after: on a
shared machine it moves the figures more than anything measured.

    HYDE_DATA_DIR=.hyde hyde-tutor serve --port 8765 &
    python scripts/turn_timing.py served --url http://127.0.0.1:8765
    HYDE_DATA_DIR=.hyde python scripts/turn_timing.py cli
    python scripts/turn_timing.py both --url http://127.0.0.1:8765 --cli-data-dir .hyde/cli   # turn by turn

The questions: the README's first one, the two follow-ups of issue 36, then grammar_holdout questions, in one
conversation (one chat id, one chat process).
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import time
import uuid
from pathlib import Path

QUESTIONS = ["Как сказать, что я хочу поехать в Пусан?", "А в прошедшем времени?",
             "Как сказать, что я чуть не опоздал на поезд?"]


def questions(n: int) -> list[str]:
    """The README's question, issue 36's two follow-ups, then holdout questions: ``n`` in all."""
    extra = [json.loads(line)["text"] for line in Path("data/eval/grammar_holdout/queries.jsonl").read_text().splitlines()
             if line.strip()]
    return (QUESTIONS + extra)[:n]


def load() -> str:
    return " ".join(os.getloadavg().__repr__().strip("()").split(", ")[:3])


class Served:
    """One chat through ``POST /api/chat`` (the cookie kept between turns), a turn at a time."""

    def __init__(self, url: str) -> None:
        import httpx

        self.client = httpx.Client(base_url=url, timeout=1200)
        self.client.get("/")  # the page sets the learner's cookie
        self.chat_id = uuid.uuid4().hex[:16]

    def turn(self, text: str) -> dict[str, float | None]:
        client, chat_id = self.client, self.chat_id
        body = {"id": chat_id, "trigger": "submit-message",
                "messages": [{"id": uuid.uuid4().hex, "role": "user", "parts": [{"type": "text", "text": text}]}]}
        start, row = time.perf_counter(), {"entries": None, "words": None, "reply": None}
        with client.stream("POST", "/api/chat", json=body) as response:
            response.raise_for_status()
            for line in response.iter_lines():
                if not line.startswith("data: ") or line == "data: [DONE]":
                    continue
                chunk, now = json.loads(line[6:]), time.perf_counter() - start
                kind = chunk.get("type")
                if kind == "data-entries" and row["entries"] is None:
                    row["entries"] = now
                elif kind == "text-delta" and chunk.get("delta") and row["words"] is None:
                    row["words"] = now
                elif kind == "data-reply":
                    row["reply"] = now
                    row["failed"] = float(bool(chunk["data"].get("failed")))
        return row


class Cli:
    """`hyde-tutor chat` with the questions on standard input; each line of its output timed as it comes."""

    def __init__(self, data_dir: Path | None = None) -> None:
        env = {**os.environ, "PYTHONUNBUFFERED": "1", **({"HYDE_DATA_DIR": str(data_dir)} if data_dir else {})}
        self.proc = subprocess.Popen([sys.executable, "-m", "hyde_tutor.cli", "chat"], stdin=subprocess.PIPE,
                                     stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True, env=env)

    def turn(self, text: str) -> dict[str, float | None]:
        proc = self.proc
        assert proc.stdin is not None and proc.stdout is not None
        proc.stdin.write(text + "\n")
        proc.stdin.flush()
        start, row = None, {"entries": None, "words": None, "reply": None}
        for line in proc.stdout:
            now = time.perf_counter()
            if line.startswith("вы> "):
                start = now
            elif start is None:
                continue
            elif line.lstrip().startswith("найдено:") and row["entries"] is None:
                row["entries"] = now - start
            elif line.lstrip().startswith("(модель") or line.lstrip().startswith("←"):
                continue
            elif line.strip().startswith("(") and " с" in line:  # the chat's own time line ends the turn
                row["cli_seconds"] = float(line.strip().strip("()").split(" ")[0].replace(",", "."))
                break
            elif line.strip() and row["words"] is None:
                row["words"] = row["reply"] = now - start  # a structured reply is written whole
            elif line.strip():
                row["reply"] = now - start
        return row

    def close(self) -> None:
        assert self.proc.stdin is not None
        self.proc.stdin.close()
        self.proc.wait(120)


def _fmt(row: dict[str, float | None]) -> str:
    unit = {"failed": "", "load": ""}
    return ", ".join(f"{k} {v:.1f}{unit.get(k, ' s')}" if isinstance(v, float) else f"{k} -" for k, v in row.items())


def summary(rows: list[dict[str, float | None]]) -> dict[str, str]:
    """``median / max`` of each time, over the turns that have it."""
    out = {}
    for key in ("entries", "words", "reply"):
        values = [r[key] for r in rows if isinstance(r.get(key), float)]
        out[key] = f"{statistics.median(values):.1f} / {max(values):.1f}" if values else "-"
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("path", choices=("served", "cli", "both"),
                        help="both: the two paths turn by turn (served, then the CLI, same question), so that a "
                             "shared machine's changing load falls on both alike")
    parser.add_argument("--url", default="http://127.0.0.1:8765")
    parser.add_argument("--turns", type=int, default=10)
    parser.add_argument("--json", type=Path)
    parser.add_argument("--cli-data-dir", type=Path,
                        help="the chat's data dir when a server runs beside it: a copy of the server's collections "
                             "(the embedded store opens in one process only; on the server's own dir every chat "
                             "search fails and the chat answers without entries)")
    args = parser.parse_args()
    asked = questions(args.turns)
    paths = {"served": Served(args.url)} if args.path in ("served", "both") else {}
    if args.path in ("cli", "both"):
        paths["cli"] = Cli(args.cli_data_dir)
    rows: dict[str, list[dict[str, float | None]]] = {name: [] for name in paths}
    before = load()
    for i, text in enumerate(asked, 1):
        for name, path in paths.items():
            row = path.turn(text)
            row["load"] = os.getloadavg()[0]
            rows[name].append(row)
            print(f"  {name} {i}: {_fmt(row)}", flush=True)
        result = {"turns": i, "load before": before, "load now": load(),
                  "median / max (s)": {name: summary(r) for name, r in rows.items()}, "rows": rows}
        if args.json:  # after every turn: a run cut short keeps what it measured
            args.json.write_text(json.dumps(result, ensure_ascii=False, indent=1))
    if "cli" in paths:
        paths["cli"].close()  # type: ignore[attr-defined]
    print(json.dumps({k: v for k, v in result.items() if k != "rows"}, ensure_ascii=False))


if __name__ == "__main__":
    main()
