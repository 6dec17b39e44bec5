"""Recorded agent tool calls, replayed through the real tools path.

A capable tutor agent can write the hypothesis itself, in the same response as its tool call (the
tools' ``hypothesis`` argument). To measure that offline, a stand-in for a capable model was given
only what such a request carries (the tutor's instructions, the tool names, descriptions and JSON
schemas, and the learner's message) and wrote its first response: the tool calls. Each is stored as::

    {"kind": "tool_call", "query": "<learner message>", "calls": [{"tool": "grammar_search",
     "args": {"query": "...", "hypothesis": "..."}}], "model": "frontier-llm-stand-in",
     "prompt_refs": ["tutor@v2"], "request_sha256": "...", "created": "..."}

:func:`AgentReplayModel` is a pydantic-ai ``FunctionModel`` that answers a run's first request with
those calls, so pydantic-ai validates the arguments and runs the real toolset, and ends the turn after
the tool results with a fixed line. A request whose instructions or tool definitions differ from the
recorded ones (``request_sha256``) is not served: the recording would not answer it.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ..errors import HydeTutorError
from ..llm.recordings import NotRecordedError, RecordingFormatError

END_OF_TURN = "(the recorded turn ends after its tool calls)"


@dataclass(frozen=True, slots=True)
class AgentCall:
    tool: str
    args: dict[str, Any]


@dataclass(frozen=True, slots=True)
class AgentTurn:
    """One recorded first response of the agent: its tool calls for one learner message."""

    query: str
    calls: tuple[AgentCall, ...]
    model: str
    prompt_refs: tuple[str, ...]
    request_sha256: str
    created: str = ""
    history: tuple[tuple[str, str], ...] = ()
    """Earlier turns the request carried (a follow-up), oldest first: ``(role, content)``."""

    @property
    def key(self) -> str:
        """The learner's message and the conversation before it: what identifies the request's content."""
        return json.dumps([list(self.history), self.query.strip()], ensure_ascii=False)

    def to_json(self) -> str:
        return json.dumps({"kind": "tool_call", "query": self.query,
                           "history": [{"role": r, "content": c} for r, c in self.history],
                           "calls": [{"tool": c.tool, "args": c.args} for c in self.calls], "model": self.model,
                           "prompt_refs": list(self.prompt_refs), "request_sha256": self.request_sha256,
                           "created": self.created}, ensure_ascii=False)


def request_fingerprint(instructions: str, tools: Sequence[Any]) -> str:
    """Hash of what the agent's request carries besides the learner's message: its instructions and every
    tool's name, description and argument schema (pydantic-ai ``ToolDefinition`` or plain dicts)."""
    defs = []
    for t in tools:
        if isinstance(t, dict):
            defs.append({"name": t["name"], "description": t.get("description") or "",
                         "parameters": t.get("parameters") or t.get("parameters_json_schema")})
        else:
            defs.append({"name": t.name, "description": t.description or "", "parameters": t.parameters_json_schema})
    blob = json.dumps({"instructions": instructions.strip(), "tools": sorted(defs, key=lambda d: d["name"])},
                      ensure_ascii=False, sort_keys=True)
    return hashlib.sha256(blob.encode()).hexdigest()


def load_agent_turns(paths: Iterable[str | Path]) -> dict[str, AgentTurn]:
    """Recorded turns by learner message (later files win). A bad line raises
    :class:`~hyde_tutor.llm.recordings.RecordingFormatError` naming the file and line."""
    turns: dict[str, AgentTurn] = {}
    for path in paths:
        for no, line in enumerate(Path(path).read_text(encoding="utf-8").splitlines(), start=1):
            if not line.strip():
                continue
            try:
                obj = json.loads(line)
                calls = tuple(AgentCall(str(c["tool"]), dict(c["args"])) for c in obj["calls"])
                history = tuple((str(m["role"]), str(m["content"])) for m in obj.get("history") or [])
                turn = AgentTurn(str(obj["query"]).strip(), calls, str(obj["model"]), tuple(obj["prompt_refs"]),
                                 str(obj["request_sha256"]), str(obj.get("created", "")), history)
            except (KeyError, TypeError, ValueError) as exc:
                raise RecordingFormatError(f"{path}:{no}: not a recorded tool call ({exc}).") from exc
            turns[turn.key] = turn
    if not turns:
        raise HydeTutorError(f"No recorded tool calls in {', '.join(map(str, paths))}.")
    return turns


@dataclass
class ReplayStats:
    """What the replay served: turns, and calls renamed to the tool under evaluation."""

    served: int = 0
    not_recorded: int = 0
    stale: int = 0
    rerouted: int = 0
    dropped_calls: int = 0
    seen: list[str] = field(default_factory=list)


def AgentReplayModel(turns: dict[str, AgentTurn], *, only_tool: str | None = None,  # noqa: N802 - a model factory
                     stats: ReplayStats | None = None) -> Any:
    """A ``FunctionModel`` that answers a run's first request with the recorded tool calls.

    ``only_tool`` keeps ONE call per turn for that tool (an eval of one collection): the first call to it,
    else the first call renamed to it (counted in ``stats.rerouted``); its arguments that the tool lacks
    are dropped. Without it every recorded call is made.
    """
    from pydantic_ai.messages import ModelRequest, ModelResponse, TextPart, ToolCallPart, ToolReturnPart
    from pydantic_ai.models.function import FunctionModel

    stats = stats if stats is not None else ReplayStats()

    def answer(messages: list[Any], info: Any) -> Any:
        if any(isinstance(p, ToolReturnPart) for m in messages if isinstance(m, ModelRequest) for p in m.parts):
            return ModelResponse(parts=[TextPart(END_OF_TURN)])
        from ..plugin.capabilities import conversation

        history = list(conversation(messages))
        user = history.pop()[1] if history and history[-1][0] == "user" else ""
        turn = turns.get(json.dumps([[list(t) for t in history], user.strip()], ensure_ascii=False))
        if turn is None:
            stats.not_recorded += 1
            raise NotRecordedError(f"No recorded tool call for this learner message: {user[:60]!r}")
        if turn.request_sha256 != request_fingerprint(info.instructions or "", info.function_tools):
            stats.stale += 1
            raise NotRecordedError("The recorded tool call answered other instructions or tool definitions "
                                   "(a prompt or a tool description changed since): record it again.")
        stats.served += 1
        stats.seen.append(turn.query)
        calls = list(turn.calls)
        if only_tool is not None:
            calls, rerouted = _one_call_for(calls, only_tool, info.function_tools)
            stats.rerouted += rerouted
            stats.dropped_calls += len(turn.calls) - len(calls)
        return ModelResponse(parts=[ToolCallPart(c.tool, c.args, tool_call_id=f"call-{i}") for i, c in enumerate(calls)])

    return FunctionModel(answer, model_name="agent-replay")


def _one_call_for(calls: list[AgentCall], tool: str, tools: Sequence[Any]) -> tuple[list[AgentCall], int]:
    for call in calls:
        if call.tool == tool:
            return [call], 0
    if not calls:
        return [], 0
    accepted = next((set(t.parameters_json_schema.get("properties", {})) for t in tools if t.name == tool), set())
    first = calls[0]
    return [AgentCall(tool, {k: v for k, v in first.args.items() if k in accepted})], 1
