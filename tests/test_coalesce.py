"""A served reply's text deltas joined per window (``tutor/coalesce.py``): fewer events when the model writes
fast, token by token when it writes slower than the window, the first words never held, the run's own messages
untouched."""

from __future__ import annotations

import asyncio

import pytest
from pydantic_ai import Agent
from pydantic_ai.messages import ModelResponse, PartDeltaEvent, PartStartEvent, TextPart, TextPartDelta
from pydantic_ai.models.function import FunctionModel

from hyde_tutor.tutor.coalesce import CoalescedText

TOKENS = ["Скажите ", "так: ", "부산에 ", "가고 ", "싶어요. ", "Это ", "-고 ", "싶다."]


def _agent(gap_s: float) -> Agent:
    async def stream(messages, info):  # type: ignore[no-untyped-def]
        for token in TOKENS:
            if gap_s:
                await asyncio.sleep(gap_s)
            yield token

    return Agent(FunctionModel(lambda m, i: ModelResponse(parts=[TextPart("".join(TOKENS))]), stream_function=stream))


async def _texts(gap_s: float, capabilities: list) -> tuple[list, list, str]:
    events, messages, output = [], [], ""
    async with _agent(gap_s).run_stream_events("?", capabilities=capabilities) as stream:
        async for event in stream:
            if isinstance(event, (PartStartEvent, PartDeltaEvent)):
                events.append(event)
            elif hasattr(event, "result"):
                messages, output = event.result.all_messages(), event.result.output
    return events, messages, output


def _text_of(events: list) -> list[str]:
    return [e.part.content if isinstance(e, PartStartEvent) else e.delta.content_delta for e in events]


async def test_fast_tokens_are_joined_and_the_first_words_go_out_alone() -> None:
    plain, plain_messages, plain_output = await _texts(0, [])
    joined, messages, output = await _texts(0, [CoalescedText(window_s=0.5)])
    assert _text_of(plain) == TOKENS  # without it: one event a token
    assert _text_of(joined) == [TOKENS[0], "".join(TOKENS[1:])]  # the part's start at once, then the rest in one
    assert isinstance(joined[0], PartStartEvent) and isinstance(joined[1].delta, TextPartDelta)
    assert output == plain_output == "".join(TOKENS)
    assert [p.content for p in messages[-1].parts] == [p.content for p in plain_messages[-1].parts] == ["".join(TOKENS)]


async def test_a_model_slower_than_the_window_streams_token_by_token() -> None:
    events, _, output = await _texts(0.03, [CoalescedText(window_s=0.01)])
    assert _text_of(events) == TOKENS and output == "".join(TOKENS)


@pytest.mark.parametrize("window_s", [0.04, 0.1])
async def test_the_deltas_are_the_tokens_in_order_joined_never_split(window_s: float) -> None:
    """Tokens 20 ms apart: each delta is a run of whole consecutive tokens (what came since the last one sent)."""
    events, _, _ = await _texts(0.02, [CoalescedText(window_s=window_s)])
    texts, i = _text_of(events), 0
    for text in texts:
        n = next(n for n in range(1, len(TOKENS) - i + 1) if "".join(TOKENS[i:i + n]) == text)
        i += n
    assert i == len(TOKENS) and len(texts) <= len(TOKENS)


async def test_text_held_when_the_stream_fails_still_reaches_the_consumer() -> None:
    """A model error mid-reply: the deltas joined so far go out before the error, none twice."""
    from pydantic_ai.messages import PartStartEvent as Start

    async def failing():  # type: ignore[no-untyped-def]
        yield Start(index=0, part=TextPart("Скажите "))
        for token in ("так: ", "부산에 "):
            yield PartDeltaEvent(index=0, delta=TextPartDelta(token))
        raise RuntimeError("the model went away")

    seen = []
    with pytest.raises(RuntimeError, match="went away"):
        async for event in CoalescedText(window_s=10).wrap_run_event_stream(None, stream=failing()):
            seen.append(event)
    assert _text_of(seen) == ["Скажите ", "так: 부산에 "]
