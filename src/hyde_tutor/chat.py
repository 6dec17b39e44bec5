"""The example tutoring agent and a terminal chat loop around it."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from pydantic_ai import Agent
from pydantic_ai.messages import ModelMessage, ToolCallPart
from pydantic_ai.usage import UsageLimits

from .monitor import Monitor
from .toolset import HydeSearchToolset, TutorDeps, tutor_instructions


def build_tutor_agent(model: Any, model_settings: dict[str, Any] | None = None) -> Agent[TutorDeps, str]:
    """A Russian-speaking Korean tutor wired with the HyDE search tools."""
    return Agent(model, deps_type=TutorDeps, instructions=tutor_instructions(), toolsets=[HydeSearchToolset()],
                 model_settings=model_settings or None)  # type: ignore[arg-type]


def chat_loop(agent: Agent[TutorDeps, str], deps: TutorDeps, read: Callable[[], str | None],
              write: Callable[[str], None], max_requests: int = 6) -> int:
    """Read a line, answer it, show the tool calls and HyDE use; stop at EOF or /exit. Returns turns taken.

    ``max_requests`` caps model requests per turn: small local models can loop on tool calls.
    """
    history: list[ModelMessage] = []
    turns = 0
    while True:
        line = read()
        if line is None or line.strip() in ("/exit", "/quit"):
            return turns
        if not line.strip():
            continue
        before = deps.monitor.total if deps.monitor else 0
        try:
            result = agent.run_sync(line, deps=deps, message_history=history,
                                    usage_limits=UsageLimits(request_limit=max_requests))
        except Exception as exc:  # noqa: BLE001 - the REPL must survive a failing model call
            write(f"[ошибка модели: {type(exc).__name__}: {exc}]")
            continue
        history = result.all_messages()
        for msg in result.new_messages():
            for part in getattr(msg, "parts", []):
                if isinstance(part, ToolCallPart):
                    write(f"  → {part.tool_name}({part.args_as_json_str()})")
        for rec in _new_records(deps.monitor, before):
            how = "HyDE" if rec.used_hyde else f"без HyDE ({rec.fallback_reason or rec.reason})"
            write(f"  ← {rec.tool}: {rec.results} результатов, {how}, arm={rec.arm}, {rec.total_ms:.0f} мс")
        write(result.output)
        turns += 1


def _new_records(monitor: Monitor | None, before: int) -> list[Any]:
    new = monitor.total - before if monitor else 0
    if monitor is None or new <= 0:
        return []
    return sorted(monitor.records(), key=lambda r: r.timestamp)[-new:]
