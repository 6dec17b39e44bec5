"""Turn a stand-in tutor agent's tool calls into recordings (see data/recordings/README.md).

The writer (a capable LLM acting as the tutor agent) was given only the agent's instructions
(``instructions.md``), the tool definitions as the API sends them (``tools.json``) and the learner's
messages (``messages.jsonl``: id, message); it saved its first response per message as
{"id", "calls": [{"tool", "args"}]}. This script checks that the instructions and tools the writer saw
are the ones the toolset sends today, and writes one ``tool_call`` record per message with the hash of
that request, the honest model label and the time.

    python scripts/agent_calls_to_recordings.py --out data/recordings/agent/tutor_v2.jsonl /tmp/rec/agent_1 /tmp/rec/agent_2
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

from pydantic_ai import Agent
from pydantic_ai.messages import ModelResponse, TextPart
from pydantic_ai.models.function import FunctionModel

from hyde_tutor.evaluation.agent_replay import AgentCall, AgentTurn, request_fingerprint
from hyde_tutor.llm.prompts import load_prompt
from hyde_tutor.llm.recordings import utc_now
from hyde_tutor.plugin.toolset import HydeSearchToolset, TutorDeps, tutor_instructions

MODEL_LABEL = "frontier-llm-stand-in"


def live_fingerprint() -> str:
    """The fingerprint of the request the tutor agent sends today (instructions + tool definitions)."""
    seen: dict[str, str] = {}

    def capture(messages: list, info: object) -> ModelResponse:
        seen["sha"] = request_fingerprint(info.instructions or "", info.function_tools)  # type: ignore[attr-defined]
        return ModelResponse(parts=[TextPart("ok")])

    agent = Agent(FunctionModel(capture), deps_type=TutorDeps, toolsets=[HydeSearchToolset()],
                  instructions=tutor_instructions())
    agent.run_sync("?", deps=TutorDeps(retriever=None))  # type: ignore[arg-type]
    return seen["sha"]


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", required=True, type=Path)
    ap.add_argument("folders", nargs="+", type=Path, help="writer folders: instructions.md, tools.json, "
                    "messages.jsonl, calls.jsonl")
    args = ap.parse_args()
    live = live_fingerprint()
    ref = load_prompt("tutor").ref
    args.out.parent.mkdir(parents=True, exist_ok=True)
    written = 0
    with args.out.open("w", encoding="utf-8") as out:
        for folder in args.folders:
            seen = request_fingerprint((folder / "instructions.md").read_text(encoding="utf-8"),
                                       json.loads((folder / "tools.json").read_text(encoding="utf-8")))
            if seen != live:
                sys.exit(f"{folder}: the writer saw other instructions or tools than the toolset sends today")
            source = folder / "messages.jsonl"
            if not source.is_file():  # follow-ups: {"id", "history": [{role, content}], "message"}
                source = folder / "conversations.jsonl"
            rows = [json.loads(l) for l in source.read_text(encoding="utf-8").splitlines() if l.strip()]
            messages = {r["id"]: r["message"] for r in rows}
            histories = {r["id"]: tuple((m["role"], m["content"]) for m in r.get("history") or []) for r in rows}
            for line in (folder / "calls.jsonl").read_text(encoding="utf-8").splitlines():
                if not line.strip():
                    continue
                row = json.loads(line)
                calls = tuple(AgentCall(c["tool"], c["args"]) for c in row["calls"])
                turn = AgentTurn(messages[row["id"]].strip(), calls, MODEL_LABEL, (ref,), live, utc_now(),
                                 histories[row["id"]])
                out.write(turn.to_json() + "\n")
                written += 1
    print(f"{args.out}: {written} recorded turns")


if __name__ == "__main__":
    main()
