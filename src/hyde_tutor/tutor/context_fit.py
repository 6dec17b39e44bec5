"""What a chat turn sends the model: only what fits its context window, and only what the turn needs.

A chat that sends its whole history overflows the embedded model's 2048-token window after a few turns
(``ModelContextWindowExceededError`` from the fourth of twelve questions) and keeps old topics in front of
the model. :class:`FitContext` is a pydantic-ai capability that shapes each model request, not the stored
conversation (:attr:`~hyde_tutor.tutor.chat.Turn.messages` keeps every turn):

1. earlier turns are cut to the last ``history_turns`` exchanges, each as the learner's message and the head
   of the tutor's reply (tool calls, tool returns with their entry texts, retry prompts left out: the embedded
   model, shown its whole previous explanation, copied it into the next answer);
2. the request is counted in tokens (the model's own vocabulary, ChatML as the embedded model reads it)
   against ``n_ctx`` less ``answer_tokens`` of headroom for the answer;
3. while it does not fit, the oldest kept message goes first, then the last found entries of the
   instructions (the entries are numbered, so dropping from the end keeps every number valid).

The learner's current message and the fixed instructions are never cut (the query length is validated
before the search).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, replace
from typing import Any

from pydantic_ai import RunContext
from pydantic_ai.capabilities import AbstractCapability
from pydantic_ai.messages import (ModelMessage, ModelRequest, ModelResponse, TextPart, ToolCallPart, ToolReturnPart,
                                  UserPromptPart)

from ..corpus.rendering import REFERENCE_CLOSE
from ..llm.tokens import TokenCounter

__all__ = ["FitContext", "bounded_history", "chatml_tokens", "drop_last_entry"]

CHARS_PER_TOKEN = 2.0
"""Without a tokenizer: a cautious estimate for Russian and Korean text (Qwen2.5 reads about 2.5 characters of
Russian, fewer of Hangul, per token)."""


def _text_of(message: ModelMessage) -> tuple[str, str] | None:
    """``(role, text)`` of a learner prompt or a tutor text reply; None for anything else."""
    if isinstance(message, ModelRequest):
        texts = [p.content for p in message.parts if isinstance(p, UserPromptPart) and isinstance(p.content, str)]
        return ("user", "\n".join(texts)) if texts else None
    if isinstance(message, ModelResponse):
        if any(isinstance(p, ToolCallPart) for p in message.parts):
            return None
        text = "".join(p.content for p in message.parts if isinstance(p, TextPart)).strip()
        return ("assistant", text) if text else None
    return None


def _current_start(messages: Sequence[ModelMessage]) -> int:
    """Where the current turn begins: the last request carrying the learner's prompt (its retries and tool
    rounds follow it)."""
    for i in range(len(messages) - 1, -1, -1):
        m = messages[i]
        if isinstance(m, ModelRequest) and any(isinstance(p, UserPromptPart) for p in m.parts):
            return i
    return 0


REPLY_LINES = 2
REPLY_CHARS = 200
"""An earlier reply as the model sees it: its first lines (the entry it taught and the Korean sentence), so a small
model neither copies its old explanation nor spends the window on it."""


def _short(text: str, lines: int = REPLY_LINES) -> str:
    head = "\n".join(text.splitlines()[:lines])
    return head if len(head) <= REPLY_CHARS else head[:REPLY_CHARS].rsplit(" ", 1)[0] + "…"


def bounded_history(messages: Sequence[ModelMessage], history_turns: int,
                    reply_lines: int = REPLY_LINES) -> list[ModelMessage]:
    """``messages`` with the earlier turns cut to their last ``history_turns`` exchanges of plain text (the
    learner's message, the head of the tutor's reply: its first ``reply_lines`` lines, at most
    :data:`REPLY_CHARS`); the current turn is kept whole."""
    start = _current_start(messages)
    earlier: list[ModelMessage] = []
    for message in messages[:start]:
        role_text = _text_of(message)
        if role_text is None:
            continue
        role, text = role_text
        if role == "user":
            earlier.append(ModelRequest(parts=[UserPromptPart(content=text)]))
        elif earlier and isinstance(earlier[-1], ModelRequest):  # a reply only after its question
            earlier.append(ModelResponse(parts=[TextPart(content=_short(text, reply_lines))]))
    exchanges: list[list[ModelMessage]] = []
    for message in earlier:
        if isinstance(message, ModelRequest):
            exchanges.append([message])
        else:
            exchanges[-1].append(message)
    kept = [m for exchange in exchanges[-history_turns:] for m in exchange] if history_turns > 0 else []
    return kept + list(messages[start:])


def _chatml(system: str, messages: Sequence[ModelMessage]) -> str:
    """The request as ChatML (the embedded Qwen2.5's template), tool parts included as their text."""
    rows = [f"<|im_start|>system\n{system}<|im_end|>"] if system else []
    for message in messages:
        role = "assistant" if isinstance(message, ModelResponse) else "user"
        parts = []
        for p in message.parts:
            content = getattr(p, "content", None)
            if isinstance(p, ToolCallPart):
                content = p.args_as_json_str()
            elif isinstance(p, ToolReturnPart):
                content = p.model_response_str()
            if isinstance(content, str) and content:
                parts.append(content)
        rows.append(f"<|im_start|>{role}\n" + "\n".join(parts) + "<|im_end|>")
    return "\n".join(rows) + "\n<|im_start|>assistant\n"


def chatml_tokens(system: str, messages: Sequence[ModelMessage], counter: TokenCounter | None) -> int:
    """Tokens of the request: counted with ``counter`` (the model's vocabulary), else estimated cautiously."""
    text = _chatml(system, messages)
    if counter is not None:
        return counter.count_text(text)
    return int(len(text) / CHARS_PER_TOKEN) + 1


def drop_last_entry(instructions: str) -> str | None:
    """The instructions with the last numbered found entry removed; None when none is left to remove."""
    head, sep, tail = instructions.rpartition("\n" + REFERENCE_CLOSE)
    if not sep:
        return None
    lines = head.split("\n")
    numbered = [i for i, line in enumerate(lines) if line[:1].isdigit() and ". " in line[:5]]
    if len(numbered) < 2:  # keep at least the first entry: the answer is written from it
        return None
    return "\n".join(lines[: numbered[-1]]) + sep + tail


@dataclass
class FitContext(AbstractCapability[Any]):
    """Send the model only what fits (see the module docstring). ``n_ctx`` None: history is bounded, nothing is
    counted (a hosted model's window is far larger than a bounded chat)."""

    history_turns: int = 1
    """Earlier exchanges the model sees (0: none)."""
    n_ctx: int | None = None
    answer_tokens: int = 256
    """Headroom kept for the answer (the answer's token cap, and a margin)."""
    reply_lines: int = REPLY_LINES
    """Lines of an earlier reply the model sees (1: a structured reply's headline, with no Korean sentence that
    a small model would repeat: issue 36)."""
    counter: TokenCounter | None = None
    """The model's tokenizer (:attr:`~hyde_tutor.llm.LLMBackend.token_counter`); None: a cautious estimate."""

    @classmethod
    def for_backend(cls, backend: Any, settings: dict[str, Any], history_turns: int = 1,
                    reply_lines: int = REPLY_LINES) -> FitContext:
        """The fitting for an :class:`~hyde_tutor.llm.LLMBackend` and the agent's model ``settings``: the embedded
        server's window and tokenizer, headroom for the answer's token cap; elsewhere bounded history only."""
        server = getattr(backend, "server", None)
        cap = (settings.get("extra_body") or {}).get("max_tokens") or settings.get("max_tokens") or 200
        return cls(history_turns=history_turns, n_ctx=getattr(server, "n_ctx", None), answer_tokens=int(cap) + 48,
                   reply_lines=reply_lines, counter=getattr(backend, "token_counter", None))

    async def before_model_request(self, ctx: RunContext[Any], request_context: Any) -> Any:
        messages = bounded_history(request_context.messages, self.history_turns, self.reply_lines)
        params = request_context.model_request_parameters
        parts = list(params.instruction_parts or [])
        tokens = self._count(parts, messages)
        if self.n_ctx is not None:
            budget = self.n_ctx - self.answer_tokens
            start = _current_start(messages)
            while tokens > budget and start > 0:  # the oldest exchange goes first
                messages, start = messages[1:], start - 1
                tokens = self._count(parts, messages)
            while tokens > budget:  # then the last found entries
                shorter = _without_last_entry(parts)
                if shorter is None:
                    break
                parts = shorter
                tokens = self._count(parts, messages)
            params = replace(params, instruction_parts=parts)
        _note_tokens(ctx.deps, tokens)
        return replace(request_context, messages=messages, model_request_parameters=params)

    def _count(self, parts: Sequence[Any], messages: Sequence[ModelMessage]) -> int:
        return chatml_tokens("\n\n".join(p.content for p in parts), messages, self.counter)


def _without_last_entry(parts: list[Any]) -> list[Any] | None:
    for i in range(len(parts) - 1, -1, -1):
        shorter = drop_last_entry(parts[i].content)
        if shorter is not None:
            return [*parts[:i], replace(parts[i], content=shorter), *parts[i + 1:]]
    return None


def _note_tokens(deps: Any, tokens: int) -> None:
    """The request's size, for the turn's record (deps without the field are left alone)."""
    if hasattr(deps, "prompt_tokens"):
        deps.prompt_tokens = tokens
