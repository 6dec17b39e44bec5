"""Follow-up questions are searched with the conversation in view.

«А в прошедшем?» searched on its own words finds the right entry at rank 1 one time in six. Two ways in:
the raw channel searches the previous question and the follow-up together (:func:`context_query`), and a
hypothesis is written from the recent conversation (:func:`render_conversation` in the follow-up request
template), so it answers the follow-up in context.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from ..config import LLMSettings
from ..llm.generation import CallOptions, PromptedGenerator, TokenUsage, generate_text
from ..llm.prompts import load_prompt
from .requests import render_condense_request

Message = tuple[str, str]
"""``(role, content)``: role ``user`` or ``assistant``."""

RECENT_TURNS = 4
"""How many earlier messages a hypothesis request shows."""


def context_query(history: Sequence[Message], text: str, max_chars: int = 1000) -> str:
    """The follow-up searched with the learner's previous question in front of it (the question is what
    names the topic; the tutor's reply adds its own words and, measured, dilutes the search)."""
    previous = next((content for role, content in reversed(history) if role == "user"), "")
    joined = f"{previous.strip()} {text.strip()}".strip()
    return joined[-max_chars:] if len(joined) > max_chars else joined


def render_conversation(history: Sequence[Message], turns: int = RECENT_TURNS) -> str:
    """The recent conversation as lines ``Ученик: …`` / ``Репетитор: …`` (each message capped)."""
    names = {"user": "Ученик", "assistant": "Репетитор"}
    return "\n".join(f"{names.get(role, role)}: {' '.join(content.split())[:400]}"
                     for role, content in list(history)[-turns:])


class Condenser(PromptedGenerator):
    """Rewrites a follow-up into a standalone question with the LLM (``prompts/condense.v<N>.md``), for search:
    «А в прошедшем?» after a question about wanting to go to Korea becomes a question that names both.

    One text request per follow-up through the backend's model (its gate, streaming and settings); a failed or
    empty reply gives ``None``, and the caller searches the previous question with the follow-up instead.
    """

    def __init__(self, model: Any, model_name: str, *, llm: LLMSettings | None = None,
                 options: CallOptions | None = None, max_tokens: int = 96) -> None:
        super().__init__(model, model_name, load_prompt("condense"), load_prompt("condense_request"), llm=llm,
                         max_tokens=max_tokens, options=options)

    @classmethod
    def for_backend(cls, backend: Any, llm: LLMSettings) -> Condenser:
        return cls(backend.model, backend.name, llm=llm, options=backend.call_options)

    @property
    def prompt_refs(self) -> tuple[str, str]:
        return (self.prompt.ref, self.request.ref)

    def user_prompt(self, history: Sequence[Message], text: str) -> str:
        return render_condense_request(self.request, render_conversation(history), text)

    async def condense(self, history: Sequence[Message], text: str, timeout_s: float = 30.0) -> Condensed:
        """The standalone question (None: no history, a failed call, an empty or runaway reply) and its cost."""
        if not history:
            return Condensed(None)
        out = await generate_text(self.call, self.user_prompt(history, text), timeout_s=timeout_s)
        return Condensed(standalone_question(out.text or ""), out.usage, out.failure or out.error)


@dataclass(frozen=True, slots=True)
class Condensed:
    """A condense call's outcome."""

    question: str | None
    usage: TokenUsage = field(default_factory=TokenUsage)
    failure: str | None = None


def standalone_question(reply: str, max_chars: int = 300) -> str | None:
    """The question in a condense reply: its first non-empty line without a label or quotes; None if empty or
    longer than ``max_chars`` (a model that started answering instead)."""
    for line in reply.splitlines():
        line = line.strip().strip("«»\"'").strip()
        if line.lower().startswith("самостоятельный вопрос:"):
            line = line.split(":", 1)[1].strip().strip("«»\"'").strip()
        if line:
            return line if len(line) <= max_chars else None
    return None
