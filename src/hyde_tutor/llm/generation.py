"""One LLM call for text, shared by the hypothesis and the question generators.

Both follow the same path: a text-output pydantic-ai agent, a concurrency gate (the single-slot
embedded server), a timeout, and every failure turned into a :class:`Generation` with its reason,
never an exception. Caching stays with each generator (their keys and stored values differ).
"""

from __future__ import annotations

import asyncio
import contextlib
from dataclasses import dataclass, field
from typing import Any, Literal

from pydantic_ai.exceptions import UnexpectedModelBehavior

from ..config import LLMSettings
from .backends import agent_model_settings
from .recordings import NotRecordedError
from .tokens import TokenCounter

GenerationFailure = Literal["timeout", "not_recorded", "llm_error"]


@dataclass(slots=True)
class TokenUsage:
    """Requests and tokens spent, summed over calls."""

    requests: int = 0
    input_tokens: int = 0
    output_tokens: int = 0
    source: str = ""
    """How the tokens were counted: ``reported`` (the model's responses), ``counted:<tokenizer>`` (an
    offline tokenizer: replay and the embedded model), ``estimated`` (pydantic-ai's word-count guess),
    ``agent`` (tokens an agent wrote into its own tool call); several joined by ``+``; empty: no call."""

    def add(self, other: TokenUsage) -> None:
        self.requests += other.requests
        self.input_tokens += other.input_tokens
        self.output_tokens += other.output_tokens
        if other.source and other.source not in self.source.split("+"):
            self.source = "+".join(filter(None, (self.source, other.source)))

    @property
    def total_tokens(self) -> int:
        return self.input_tokens + self.output_tokens


@dataclass(frozen=True, slots=True)
class Generation:
    """One call's outcome: the text (``""`` for an empty completion), or why there is none."""

    text: str | None = None
    failure: GenerationFailure | None = None
    error: str | None = None
    """``Type: message`` of the exception behind ``llm_error``."""
    usage: TokenUsage = field(default_factory=TokenUsage)


def text_agent(model: Any, instructions: str, llm: LLMSettings, max_tokens: int,
               extra_settings: dict[str, Any] | None = None) -> Any:
    """A pydantic-ai agent that answers ``instructions`` + one user message with plain text, no retries."""
    from pydantic_ai import Agent
    from pydantic_ai.settings import ModelSettings

    settings = agent_model_settings(llm, max_tokens, extra_settings)
    return Agent(model, instructions=instructions, output_type=str, retries=0,
                 model_settings=ModelSettings(**settings))  # type: ignore[typeddict-item]


async def generate_text(agent: Any, user: str, *, timeout_s: float, stream: bool = False,
                        gate: Any = None, counter: TokenCounter | None = None, system: str = "",
                        max_tokens: int | None = None) -> Generation:
    """Run ``agent`` on ``user`` once inside ``gate`` (a semaphore, or none) and ``timeout_s``.

    ``stream`` lets a timeout stop the embedded server's generation (see :func:`~hyde_tutor.llm.run_text`).
    ``counter`` (with the agent's ``system`` prompt) counts the call's tokens offline instead of trusting
    the response's figures (replay, the embedded server). ``max_tokens`` overrides the agent's budget.
    """
    settings = None if max_tokens is None else _budget(agent, max_tokens)
    try:
        async with gate if gate is not None else contextlib.nullcontext():
            run = await asyncio.wait_for(run_text(agent, user, stream=stream, model_settings=settings), timeout_s)
    except (asyncio.TimeoutError, TimeoutError):
        return Generation(failure="timeout")
    except UnexpectedModelBehavior:  # e.g. an empty completion: no usable text came back
        return Generation(text="")
    except NotRecordedError:  # the replay provider: counted apart from real LLM failures
        return Generation(failure="not_recorded")
    except Exception as exc:  # noqa: BLE001 - any backend failure becomes a recorded reason
        return Generation(failure="llm_error", error=f"{type(exc).__name__}: {exc}"[:300])
    return Generation(run.text, usage=_usage(run, counter, system, user))


def _usage(run: TextRun, counter: TokenCounter | None, system: str, user: str) -> TokenUsage:
    if counter is not None:
        try:
            return TokenUsage(run.requests or 1, counter.count_request(system, user), counter.count_text(run.text),
                              f"counted:{counter.name}")
        except Exception:  # noqa: BLE001 - a tokenizer failure must not lose the generation
            pass
    return TokenUsage(run.requests, run.input_tokens, run.output_tokens, "reported")


def _budget(agent: Any, max_tokens: int) -> dict[str, Any]:
    """The agent's model settings with another token budget (the compatible servers' body too)."""
    settings = dict(getattr(agent, "model_settings", None) or {})
    settings["max_tokens"] = max_tokens
    if "extra_body" in settings:
        settings["extra_body"] = {**settings["extra_body"], "max_tokens": max_tokens}
    return settings


@dataclass(frozen=True, slots=True)
class TextRun:
    """The text an agent returned and what it cost."""

    text: str
    requests: int = 0
    input_tokens: int = 0
    output_tokens: int = 0


async def run_text(agent: Any, prompt: str, *, stream: bool = False,
                   model_settings: dict[str, Any] | None = None) -> TextRun:
    """Run a text-output agent once.

    With ``stream=True`` the answer is read as a stream. Cancelling the call (a timeout) then
    closes the connection, and ``llama_cpp.server`` stops generating at the next token. A plain
    request keeps running on the server after the client gave up, and the single-slot embedded
    model makes every later request wait behind it.
    """
    if not stream:
        run = await agent.run(prompt, model_settings=model_settings)
        usage = run.usage
        return TextRun(str(run.output or ""), usage.requests, usage.input_tokens or 0, usage.output_tokens or 0)
    pieces = 0
    async with agent.run_stream(prompt, model_settings=model_settings) as streamed:
        async for _ in streamed.stream_text(delta=True, debounce_by=None):
            pieces += 1
        output = await streamed.get_output()
        usage = streamed.usage
    # llama_cpp.server sends no usage on a stream; it sends one token per chunk, so count the chunks.
    # The prompt's token count is not reported there (input_tokens stays 0).
    return TextRun(str(output or ""), usage.requests, usage.input_tokens or 0, usage.output_tokens or pieces)
