"""A failed or timed-out LLM call costs what was sent: it counts as a request with its input tokens, and the
output as far as it was read (or marked unknown). Only a request the server never received costs nothing."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator

from pydantic_ai.messages import ModelResponse, TextPart
from pydantic_ai.models.function import AgentInfo, DeltaToolCalls, FunctionModel

from hyde_tutor.config import HydeSettings, LLMSettings
from hyde_tutor.hyde.cache import NoCache
from hyde_tutor.hyde.hypotheses import HypothesisGenerator
from hyde_tutor.llm.generation import CallOptions, estimate_tokens, generate_text, text_call

INSTRUCTIONS = "Напиши статью справочника."
USER = "Как сказать, что я хочу поехать в Пусан?"


async def _slow(messages, info: AgentInfo) -> ModelResponse:  # type: ignore[no-untyped-def]
    await asyncio.sleep(5)
    return ModelResponse(parts=[TextPart("поздно")])


async def test_a_timed_out_call_counts_as_a_request_with_the_tokens_sent() -> None:
    out = await generate_text(text_call(FunctionModel(_slow), INSTRUCTIONS, LLMSettings(), 50), USER, timeout_s=0.2)
    assert out.failure == "timeout"
    assert out.usage.requests == 1
    assert out.usage.input_tokens == estimate_tokens(INSTRUCTIONS) + estimate_tokens(USER) > 0
    assert out.usage.output_tokens == 0 and out.usage.source == "estimated+output-unknown"


async def test_a_failed_call_counts_but_a_refused_connection_does_not() -> None:
    def broken(messages, info):  # type: ignore[no-untyped-def]
        raise RuntimeError("500 from the server")

    failed = await generate_text(text_call(FunctionModel(broken), INSTRUCTIONS, LLMSettings(), 50), USER, timeout_s=5)
    assert failed.failure == "llm_error" and failed.usage.requests == 1 and failed.usage.input_tokens > 0

    from hyde_tutor.config import Settings
    from hyde_tutor.llm.backends import make_llm

    backend = make_llm(Settings(llm=LLMSettings(base_url="http://127.0.0.1:9/v1", model="x")))  # refused
    refused = await generate_text(text_call(backend.model, INSTRUCTIONS, LLMSettings(), 50), USER, timeout_s=30)
    assert refused.failure == "llm_error" and refused.usage.requests == 0 and refused.usage.input_tokens == 0


async def test_a_streamed_call_cut_off_counts_the_chunks_it_read() -> None:
    class Counter:
        name = "test-vocab"

        def count_request(self, system: str, user: str) -> int:
            return 40

        def count_text(self, text: str) -> int:
            return len(text.split())

    async def stream(messages, info) -> AsyncIterator[str | DeltaToolCalls]:  # type: ignore[no-untyped-def]
        for word in ("가고 ", "싶어요 ", "부산에 "):
            yield word
        await asyncio.sleep(5)  # the model stalls mid-reply
        yield "늦음"

    call = text_call(FunctionModel(stream_function=stream), INSTRUCTIONS, LLMSettings(), 50,
                     CallOptions(stream=True, counter=Counter()))  # type: ignore[arg-type]
    out = await generate_text(call, USER, timeout_s=0.5)
    assert out.failure == "timeout"
    assert (out.usage.requests, out.usage.input_tokens, out.usage.output_tokens) == (1, 40, 3)
    assert out.usage.source == "counted:test-vocab"


async def test_two_slow_hypothesis_calls_are_two_requests_not_zero() -> None:
    """The A/B report's cost: an arm whose calls time out must not look cheapest."""
    gen = HypothesisGenerator(FunctionModel(_slow), "slow", "grammar", cache=NoCache(),
                              hyde=HydeSettings(timeout_s=0.2, min_hangul_chars=0))
    result = await gen.generate(USER, n=2)
    assert result.failure_reason == "timeout"
    assert result.usage.requests == 2 and result.usage.input_tokens > 2 * estimate_tokens(USER)
    assert "output-unknown" in result.usage.source
