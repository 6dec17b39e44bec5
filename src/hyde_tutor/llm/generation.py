"""One LLM call for text, shared by every generator (hypotheses, write-time questions, the condenser).

Each is a :class:`PromptedGenerator`: a system prompt and a request template (versioned files) and one
:class:`TextCall` (a pydantic-ai direct model request) made with the backend's :class:`CallOptions`: its
concurrency gate (the single-slot embedded server), streaming and token counting. :func:`generate_text` adds
the timeout and turns every failure into a :class:`Generation` with its reason, never an exception. Caching
stays with each generator (their keys and stored values differ).
"""

from __future__ import annotations

import asyncio
import contextlib
from dataclasses import dataclass, field
from typing import Any, Literal

from ..config import LLMSettings
from .prompts import Prompt
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
    ``agent`` (tokens an agent wrote into its own tool call); several joined by ``+``; empty: no call.
    ``output-unknown`` joins them when a call failed or timed out before its reply was read: its output
    tokens (0 here) are unknown, not zero."""

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


def agent_model_settings(llm: LLMSettings, max_tokens: int, extra: dict[str, Any] | None = None) -> dict[str, Any]:
    """Model settings for a generator agent: temperature, seed, ``max_tokens`` and the backend's extras.

    A compatible server reads the token budget from the request body (``_compat_settings``), so the
    body's ``max_tokens`` follows ``max_tokens`` too.
    """
    settings: dict[str, Any] = {"temperature": llm.temperature, "max_tokens": max_tokens}
    if llm.seed is not None:
        settings["seed"] = llm.seed
    settings.update(extra or {})
    if "extra_body" in settings:
        settings["extra_body"] = {**settings["extra_body"], "max_tokens": max_tokens}
    return settings



@dataclass(frozen=True, slots=True)
class TextCall:
    """One text request to a model: fixed instructions and one user message in, plain text out.

    No tools, no output validation, no retries, so no agent graph: the request goes through pydantic-ai's
    direct API (:func:`pydantic_ai.direct.model_request`), instrumented like an agent's request when
    ``Agent.instrument_all()`` or logfire's ``instrument_pydantic_ai()`` is on. An ``Agent.run`` adds
    about 1.5 ms of event-loop CPU per call (run graph, capabilities, cancel scopes), which is a tenth of a
    whole search under load; a hypothesis is one request and needs none of it.
    """

    model: Any
    instructions: str
    model_settings: dict[str, Any]
    options: CallOptions = field(default_factory=lambda: CallOptions())

    async def run(self, prompt: str, *, max_tokens: int | None = None, received: list[int] | None = None) -> TextRun:
        """Send ``prompt``; ``max_tokens`` overrides the budget for this call (see :func:`run_text`)."""
        settings = self.model_settings if max_tokens is None else _budget(self.model_settings, max_tokens)
        return await run_text(self, prompt, stream=self.options.stream, model_settings=settings, received=received)


@dataclass(frozen=True, slots=True)
class CallOptions:
    """How calls to one backend are made, the same for every generator on it (hypotheses, questions, the
    condenser): :attr:`LLMBackend.call_options <hyde_tutor.llm.LLMBackend.call_options>` gives a backend's."""

    extra_settings: dict[str, Any] | None = None
    """Model settings the backend needs (a compatible server's token budget in the body)."""
    gates: Any = None
    """A :class:`~hyde_tutor.llm.server.LoopGates`: the single-slot embedded server's one gate; None: no gate."""
    stream: bool = False
    """Read answers as a stream, so a timed-out call stops the embedded server's generation."""
    counter: TokenCounter | None = None
    """Counts tokens offline where responses' figures are missing or estimates (replay, the embedded model)."""

    def gate(self) -> Any:
        """This event loop's gate, or None."""
        return self.gates.get() if self.gates is not None else None


def text_call(model: Any, instructions: str, llm: LLMSettings, max_tokens: int,
              options: CallOptions | None = None) -> TextCall:
    """A :class:`TextCall` that answers ``instructions`` + one user message with plain text."""
    from pydantic_ai.models import infer_model

    options = options or CallOptions()
    return TextCall(infer_model(model), instructions, agent_model_settings(llm, max_tokens, options.extra_settings),
                    options)


class PromptedGenerator:
    """The front every generator stands on: a model under a name, a system prompt and a request template, and
    one :class:`TextCall` on the backend's :class:`CallOptions` (so all of them queue at the same gate)."""

    def __init__(self, model: Any, model_name: str, prompt: Prompt, request: Prompt, *, llm: LLMSettings | None,
                 max_tokens: int, options: CallOptions | None) -> None:
        self.model_name = model_name
        self.prompt = prompt
        self.request = request
        self.call = text_call(model, prompt.text, llm or LLMSettings(), max_tokens, options)

    @property
    def prompt_ref(self) -> str:
        """Both prompt files and their versions (``system@vN+request@vM``): part of every cache key."""
        return f"{self.prompt.ref}+{self.request.ref}"

    @property
    def gate_size(self) -> int | None:
        """Calls in flight at once on this backend (its gate's size), or None (no gate)."""
        gates = self.call.options.gates
        return gates.size if gates is not None else None


async def generate_text(call: TextCall, user: str, *, timeout_s: float, gate: Any = None,
                        max_tokens: int | None = None) -> Generation:
    """Send ``user`` through ``call`` once, after waiting at the call's gate (or ``gate``, when given) and
    within ``timeout_s`` (the wait at the gate does not count: the timeout measures the model's work).

    A streamed call (``call.options.stream``) lets a timeout stop the embedded server's generation (see
    :func:`run_text`). The call's ``counter`` counts its tokens offline (the instructions + ``user``, and the
    reply) instead of trusting the response's figures. ``max_tokens`` overrides the call's budget.

    A call that failed or timed out still cost what was sent: it counts as a request with its input tokens
    (counted, or estimated), and the output tokens streamed before it ended (else marked ``output-unknown``);
    only a call the server never received (the connection refused) counts nothing.
    """
    gate = gate if gate is not None else call.options.gate()
    counter = call.options.counter
    received = [0]  # chunks of a streamed reply read so far
    try:
        async with gate if gate is not None else contextlib.nullcontext():
            run = await asyncio.wait_for(call.run(user, max_tokens=max_tokens, received=received), timeout_s)
    except (asyncio.TimeoutError, TimeoutError):
        return Generation(failure="timeout", usage=_spent(call, user, received[0]))
    except NotRecordedError:  # the replay provider: counted apart from real LLM failures
        return Generation(failure="not_recorded")
    except Exception as exc:  # noqa: BLE001 - any backend failure becomes a recorded reason
        usage = TokenUsage() if _never_sent(exc) else _spent(call, user, received[0])
        return Generation(failure="llm_error", error=f"{type(exc).__name__}: {exc}"[:300], usage=usage)
    return Generation(run.text, usage=_usage(run, counter, call.instructions, user))


def estimate_tokens(text: str) -> int:
    """A rough token count without a tokenizer: one per 4 UTF-8 bytes (labelled ``estimated``)."""
    return -(-len(text.encode("utf-8", "surrogatepass")) // 4)


def _spent(call: TextCall, user: str, chunks: int) -> TokenUsage:
    """What a failed or timed-out call cost: one request, its input tokens, the streamed chunks read so far
    (the embedded server sends one token per chunk), or ``output-unknown`` when the reply was not streamed."""
    counter = call.options.counter
    try:
        tokens_in, source = (counter.count_request(call.instructions, user), f"counted:{counter.name}") \
            if counter is not None else (estimate_tokens(call.instructions) + estimate_tokens(user), "estimated")
    except Exception:  # noqa: BLE001 - a tokenizer failure must not lose the count
        tokens_in, source = estimate_tokens(call.instructions) + estimate_tokens(user), "estimated"
    return TokenUsage(1, tokens_in, chunks, source if call.options.stream else f"{source}+output-unknown")


def _never_sent(exc: BaseException) -> bool:
    """Whether the request never reached the server (refused at connect), so it cost nothing."""
    seen: BaseException | None = exc
    for _ in range(8):  # the cause chain: pydantic-ai's error, the SDK's, the HTTP client's
        if seen is None:
            return False
        if isinstance(seen, ConnectionRefusedError) or type(seen).__name__ == "ConnectError":
            return True
        seen = seen.__cause__ or seen.__context__
    return False


def _usage(run: TextRun, counter: TokenCounter | None, system: str, user: str) -> TokenUsage:
    if counter is not None:
        try:
            return TokenUsage(run.requests or 1, counter.count_request(system, user), counter.count_text(run.text),
                              f"counted:{counter.name}")
        except Exception:  # noqa: BLE001 - a tokenizer failure must not lose the generation
            pass
    return TokenUsage(run.requests, run.input_tokens, run.output_tokens, "reported")


def _budget(model_settings: dict[str, Any], max_tokens: int) -> dict[str, Any]:
    """``model_settings`` with another token budget (the compatible servers' body too)."""
    settings = dict(model_settings)
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


async def run_text(call: TextCall, prompt: str, *, stream: bool = False,
                   model_settings: dict[str, Any] | None = None, received: list[int] | None = None) -> TextRun:
    """One request: ``call``'s instructions and ``prompt`` as the user message.

    With ``stream=True`` the answer is read as a stream. Cancelling the call (a timeout) then
    closes the connection, and ``llama_cpp.server`` stops generating at the next token. A plain
    request keeps running on the server after the client gave up, and the single-slot embedded
    model makes every later request wait behind it. ``received[0]`` counts the chunks read so far (what a
    call that is cut off cost).
    """
    from pydantic_ai.direct import model_request, model_request_stream
    from pydantic_ai.messages import ModelRequest, PartDeltaEvent, PartStartEvent, UserPromptPart

    messages = [ModelRequest(parts=[UserPromptPart(prompt)], instructions=call.instructions or None)]
    settings: Any = model_settings if model_settings is not None else call.model_settings
    if not stream:
        response = await model_request(call.model, messages, model_settings=settings)
        return TextRun(response.text or "", 1, response.usage.input_tokens or 0, response.usage.output_tokens or 0)
    chunks = 0
    async with model_request_stream(call.model, messages, model_settings=settings) as streamed:
        async for event in streamed:
            chunks += isinstance(event, PartStartEvent | PartDeltaEvent)  # one per chunk the server sent
            if received is not None:
                received[0] = chunks
        response = streamed.get()
    # llama_cpp.server sends no usage on a stream; it sends one token per chunk, so count the chunks.
    # The prompt's token count is not reported there (input_tokens stays 0).
    return TextRun(response.text or "", 1, response.usage.input_tokens or 0, response.usage.output_tokens or chunks)
