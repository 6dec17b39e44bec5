from __future__ import annotations

from hyde_tutor.llm.generation import CallOptions

import asyncio
import time
from pathlib import Path

import pytest
from pydantic_ai.messages import ModelResponse, TextPart
from pydantic_ai.models.function import FunctionModel

from hyde_tutor.config import HydeSettings
from hyde_tutor.llm.prompts import load_prompt
from hyde_tutor.hyde.hypotheses import HypothesisGenerator
from hyde_tutor.hyde.cache import DiskCache, MemoryCache, cache_key
from hyde_tutor.hyde.domains import normalise_length, strip_prompt_echo


def test_normalise_cuts_on_word_boundary() -> None:
    text = "один два три четыре"
    assert normalise_length(text, 11) == "один два"
    assert normalise_length(text, 12) == "один два три"  # exactly fits
    assert normalise_length("  a \n\n b  ", 10) == "a b"
    assert normalise_length("x" * 50, 10) == "x" * 10  # no space: hard cut
    assert all(len(normalise_length("слово " * 200, n)) <= n for n in (32, 100, 512))


def test_normalise_exact_mode_pads_to_length() -> None:
    assert normalise_length("short", 12, exact=True) == "short" + " " * 7
    out = normalise_length("слово " * 200, 100, exact=True)
    assert len(out) == 100 and out.rstrip() == normalise_length("слово " * 200, 100)


def _generator(fn, n: int = 3, cache=None, **hyde) -> HypothesisGenerator:
    hyde.setdefault("min_hangul_chars", 0)  # these fakes answer in plain Russian; the guard has its own test
    settings = HydeSettings(n_hypotheses=n, hypothesis_length=200, **hyde)
    return HypothesisGenerator(FunctionModel(fn), "fake-model", "grammar", cache=cache or MemoryCache(), hyde=settings)


def _prompt_of(messages) -> str:
    return str(messages[-1].parts[-1].content)


async def test_hypotheses_are_generated_concurrently_one_per_perspective() -> None:
    spans: list[tuple[float, float]] = []
    prompts: list[str] = []

    async def slow(messages, info):
        start = time.perf_counter()
        prompts.append(_prompt_of(messages))
        await asyncio.sleep(0.2)
        spans.append((start, time.perf_counter()))
        return ModelResponse(parts=[TextPart(f"Конструкция: -고 싶다 ({len(prompts)}) " + _prompt_of(messages)[-30:])])

    result = await _generator(slow, n=3).generate("Как сказать, что я хочу?")
    assert len(result.hypotheses) == 3
    assert len({h.perspective for h in result.hypotheses}) == 3
    latest_start = max(s for s, _ in spans)
    earliest_end = min(e for _, e in spans)
    assert latest_start < earliest_end  # all three were in flight at the same time
    assert all("Как сказать, что я хочу?" in p for p in prompts)


async def test_n_is_capped_at_eight() -> None:
    async def fn(messages, info):
        return ModelResponse(parts=[TextPart(_prompt_of(messages))])

    result = await _generator(fn, n=3).generate("вопрос", n=50)
    assert len(result.hypotheses) == 8


async def test_empty_and_duplicate_hypotheses_are_dropped() -> None:
    answers = iter(["Одинаковый текст", "  одинаковый   ТЕКСТ ", "   ", "Другой текст"])

    async def fn(messages, info):
        return ModelResponse(parts=[TextPart(next(answers))])

    result = await _generator(fn, n=4).generate("вопрос")
    assert [h.text for h in result.hypotheses] == ["Одинаковый текст", "Другой текст"]
    assert (result.duplicates, result.empty, result.failure_reason) == (1, 1, None)


async def test_cache_hits_cost_no_llm_calls(tmp_path: Path) -> None:
    calls = 0

    async def fn(messages, info):
        nonlocal calls
        calls += 1
        return ModelResponse(parts=[TextPart(f"гипотеза {_prompt_of(messages)[-20:]}")])

    disk = DiskCache(tmp_path / "h.sqlite")
    first = await _generator(fn, n=2, cache=disk).generate("вопрос")
    assert calls == 2 and first.usage.requests == 2 and not any(h.cached for h in first.hypotheses)
    # a new generator (new process, same disk cache) answers from the cache
    again = await _generator(fn, n=2, cache=DiskCache(tmp_path / "h.sqlite")).generate("вопрос")
    assert calls == 2 and all(h.cached for h in again.hypotheses)
    assert [h.text for h in again.hypotheses] == [h.text for h in first.hypotheses]
    await _generator(fn, n=2, cache=disk).generate("другой вопрос")
    assert calls == 4


def test_cache_key_covers_model_prompt_query_perspective() -> None:
    base = cache_key("m", "p@v1", "q", "rule")
    assert base == cache_key("m", "p@v1", " q ", "rule")
    assert len({base, cache_key("m2", "p@v1", "q", "rule"), cache_key("m", "p@v2", "q", "rule"),
                cache_key("m", "p@v1", "q2", "rule"), cache_key("m", "p@v1", "q", "mistake")}) == 5


@pytest.mark.parametrize(
    ("behaviour", "reason"),
    [("raise", "llm_error"), ("hang", "timeout"), ("empty", "empty_hypotheses")],
)
async def test_failure_reasons(behaviour: str, reason: str) -> None:
    async def fn(messages, info):
        if behaviour == "raise":
            raise ConnectionError("connection refused")
        if behaviour == "hang":
            await asyncio.sleep(30)
        return ModelResponse(parts=[TextPart("")])

    result = await _generator(fn, n=2, timeout_s=0.2).generate("вопрос")
    assert result.hypotheses == [] and result.failure_reason == reason
    if behaviour == "raise":
        assert "connection refused" in result.errors[0]
    if behaviour == "hang":
        assert result.timeouts == 2


async def test_partial_failure_keeps_the_good_hypotheses() -> None:
    async def fn(messages, info):
        if "типичную ошибку" in _prompt_of(messages):
            raise RuntimeError("boom")
        return ModelResponse(parts=[TextPart(_prompt_of(messages)[-40:])])

    result = await _generator(fn, n=3).generate("вопрос")
    assert len(result.hypotheses) == 2 and len(result.errors) == 1 and result.failure_reason is None


async def test_token_usage_is_recorded() -> None:
    async def fn(messages, info):
        return ModelResponse(parts=[TextPart("ответ " + _prompt_of(messages)[-10:])])

    result = await _generator(fn, n=2).generate("вопрос")
    assert result.usage.requests == 2 and result.usage.input_tokens > 0 and result.usage.output_tokens > 0


async def test_garbage_without_korean_is_rejected() -> None:
    answers = iter(["Стильерация определяет усложность находить", "Конструкция: -고 싶다. Пример: 가고 싶어요."])

    async def fn(messages, info):
        return ModelResponse(parts=[TextPart(next(answers))])

    result = await _generator(fn, n=2, min_hangul_chars=4).generate("вопрос")
    assert [h.text[:12] for h in result.hypotheses] == ["Конструкция:"]
    assert result.rejected == 1
    answers = iter(["только русский текст", "и этот тоже"])
    result = await _generator(fn, n=2, min_hangul_chars=4).generate("другой вопрос")
    assert result.hypotheses == [] and result.rejected == 2 and result.failure_reason == "empty_hypotheses"


def test_strip_prompt_echo_removes_copied_sentences_only() -> None:
    prompt = "Образец статьи:\nКонструкция: -지만\nПример: 한국어는 어렵지만 재미있어요. — Корейский трудный, но интересный."
    answer = ("Конструкция: -고 싶다\nПример: 한국어는 어렵지만 재미있어요. — Корейский трудный, но интересный.\n"
              "Пример: 영화를 보고 싶어요. — Я хочу посмотреть фильм.")
    text, dropped = strip_prompt_echo(answer, [prompt])
    assert dropped == 2  # the copied Korean example and its copied translation
    assert "어렵지만" not in text and "трудный" not in text
    assert "-고 싶다" in text and "보고 싶어요" in text
    assert strip_prompt_echo("Совсем новый текст про 가고 싶어요.", [prompt]) == ("Совсем новый текст про 가고 싶어요.", 0)
    # case, punctuation and spacing do not hide a copy; short labels are kept
    assert strip_prompt_echo("пример:   한국어는 어렵지만 재미있어요!!", [prompt])[1] == 1
    assert strip_prompt_echo("Пример:", [prompt]) == ("Пример:", 0)


async def test_a_copied_sample_entry_does_not_become_a_hypothesis() -> None:
    """The embedded 1.5B model often re-types the prompt's sample (-지만) instead of answering."""
    sample_lines = [line for line in load_prompt("hypothesis_grammar").text.splitlines() if line.startswith("Пример:")]
    assert sample_lines, "the grammar prompt is expected to carry a sample entry"
    copy = "\n".join(sample_lines)

    async def fn(messages, info):
        return ModelResponse(parts=[TextPart(copy)])

    result = await _generator(fn, n=1, min_hangul_chars=4).generate("Как сказать, что я хочу в кино?")
    assert result.hypotheses == [] and result.failure_reason == "empty_hypotheses"
    assert result.echoed_segments >= len(sample_lines)
    # the same text is kept when the guard is switched off
    kept = await _generator(fn, n=1, min_hangul_chars=4, strip_prompt_echo=False).generate("вопрос")
    assert len(kept.hypotheses) == 1 and kept.echoed_segments == 0


async def test_streamed_generation_returns_text_and_usage() -> None:
    async def stream(messages, info):
        for piece in ["Конструкция: -고 싶다. ", "Пример: 가고 싶어요."]:
            yield piece

    settings = HydeSettings(n_hypotheses=1, hypothesis_length=200, min_hangul_chars=0)
    gen = HypothesisGenerator(FunctionModel(stream_function=stream), "fake", "grammar", hyde=settings,
                              options=CallOptions(stream=True))
    result = await gen.generate("Как сказать, что я хочу?")
    assert [h.text for h in result.hypotheses] == ["Конструкция: -고 싶다. Пример: 가고 싶어요."]
    assert result.usage.requests == 1 and result.usage.output_tokens > 0


async def test_a_timeout_closes_the_stream_instead_of_leaving_it_running() -> None:
    """With a stream, giving up on a call closes it: a llama.cpp server then stops generating."""
    events: list[str] = []

    async def endless(messages, info):
        try:
            for i in range(10_000):
                events.append("token")
                yield f"слово{i} "
                await asyncio.sleep(0.01)
        finally:
            events.append("closed")

    settings = HydeSettings(n_hypotheses=1, hypothesis_length=200, min_hangul_chars=0)
    gen = HypothesisGenerator(FunctionModel(stream_function=endless), "fake", "grammar", hyde=settings,
                              options=CallOptions(stream=True))

    async def run() -> tuple:
        result = await gen.generate("вопрос", timeout_s=0.3)
        produced = events.count("token")
        await asyncio.sleep(0.3)  # a stream left running would keep producing tokens now
        return result, produced

    result, produced = await run()
    assert result.timeouts == 1 and result.failure_reason == "timeout"
    assert "closed" in events and events.count("token") == produced < 10_000
