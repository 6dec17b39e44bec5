"""LLM backends: the embedded llama.cpp engine (SmolLM2 smoke test), provider choice, failures."""

from __future__ import annotations

import time
from pathlib import Path

import pytest

from hyde_tutor.config import HydeSettings, LLMSettings, Settings
from hyde_tutor.hyde.hypotheses import HypothesisGenerator, MemoryCache
from hyde_tutor.llm.backends import LLMUnavailableError, LocalLlamaServer, make_llm, resolve_provider
from hyde_tutor.llm.generation import CallOptions
from hyde_tutor.llm.server import LoopGates, resolve_gguf, smollm2_path


async def test_llama_cpp_engine_smoke_with_smollm2(isolated_env: Path) -> None:
    settings = Settings(llm=LLMSettings(provider="local", local_model="smollm2-135m", max_tokens=24, temperature=0.0))
    backend = make_llm(settings)
    try:
        assert backend.kind == "local" and backend.name.startswith("local:SmolLM2")
        gen = HypothesisGenerator(backend.model, backend.name, "grammar", cache=MemoryCache(),
                                  hyde=HydeSettings(timeout_s=120, min_hangul_chars=0), llm=settings.llm,
                                  options=CallOptions(backend.extra_settings))
        result = await gen.generate("Как сказать, что я хочу поехать в Пусан?", n=1)
        assert result.failure_reason is None, result.errors
        assert result.hypotheses[0].text.strip()
        assert 0 < result.usage.output_tokens <= 24  # max_tokens reaches llama.cpp
        assert result.usage.input_tokens > 50  # the prompt file went in as instructions
        assert backend.server is not None and backend.server.log_path and backend.server.log_path.exists()
    finally:
        backend.close()
    assert backend.server is not None and backend.server._proc is None  # stopped


async def test_a_timed_out_local_call_stops_the_server_generating(isolated_env: Path) -> None:
    """The embedded backend streams, so giving up on a call frees the single-slot server at once
    (measured: the next request waited 0.3 s instead of 13 s behind a plain request)."""
    settings = Settings(llm=LLMSettings(provider="local", local_model="smollm2-135m", max_tokens=600, threads=1))
    backend = make_llm(settings)
    try:
        assert backend.stream and backend.max_concurrency == 1
        gen = HypothesisGenerator(backend.model, backend.name, "grammar", cache=MemoryCache(), llm=settings.llm,
                                  hyde=HydeSettings(min_hangul_chars=0),
                                  options=CallOptions(backend.extra_settings, LoopGates(1), backend.stream))
        result = await gen.generate("Как сказать, что я хочу поехать в Пусан?", n=1, timeout_s=0.5)
        assert result.failure_reason == "timeout"
        assert backend.server is not None and backend.server.log_path is not None
        deadline = time.monotonic() + 60
        while "Disconnected from client" not in backend.server.log_path.read_text() and time.monotonic() < deadline:
            time.sleep(0.2)
        assert "Disconnected from client" in backend.server.log_path.read_text()  # generation was abandoned
    finally:
        backend.close()


def test_provider_resolution(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("OPENAI_API_KEY", raising=False)
    assert resolve_provider(LLMSettings()) == "local"
    assert resolve_provider(LLMSettings(base_url="http://127.0.0.1:11434/v1")) == "openai-compatible"
    keyed = Settings(openai={"api_key": "sk-x"})  # the one OpenAI key, HYDE_OPENAI__API_KEY
    assert resolve_provider(keyed) == "openai"
    monkeypatch.setenv("OPENAI_API_KEY", "sk-env")
    assert resolve_provider(LLMSettings()) == "openai"
    assert resolve_provider(LLMSettings(provider="local")) == "local"


def test_openai_and_compatible_backends_use_chat_completions(monkeypatch: pytest.MonkeyPatch) -> None:
    from pydantic_ai.models.openai import OpenAIChatModel

    monkeypatch.setenv("OPENAI_API_KEY", "sk-test")
    openai = make_llm(Settings(llm=LLMSettings(provider="openai")))
    assert isinstance(openai.model, OpenAIChatModel) and openai.name == "openai:gpt-4.1"
    compat = make_llm(Settings(llm=LLMSettings(base_url="http://127.0.0.1:9/v1", model="qwen2.5")))
    assert isinstance(compat.model, OpenAIChatModel) and compat.kind == "openai-compatible"
    assert compat.extra_settings == {"extra_body": {"max_tokens": 200}}
    monkeypatch.delenv("OPENAI_API_KEY")
    with pytest.raises(LLMUnavailableError, match="OPENAI_API_KEY"):
        make_llm(Settings(llm=LLMSettings(provider="openai")))


async def test_server_down_gives_llm_error_fallback_reason() -> None:
    backend = make_llm(Settings(llm=LLMSettings(base_url="http://127.0.0.1:9/v1", model="x")))  # connection refused
    gen = HypothesisGenerator(backend.model, backend.name, "docs", cache=MemoryCache(), hyde=HydeSettings(timeout_s=30))
    result = await gen.generate("вопрос", n=2)
    assert result.failure_reason == "llm_error" and len(result.errors) == 2


def test_local_model_errors_are_actionable(tmp_path: Path) -> None:
    with pytest.raises(LLMUnavailableError, match="smollm2-135m"):
        resolve_gguf("no-such-model", tmp_path)
    assert smollm2_path().suffix == ".gguf"
    broken = tmp_path / "broken.gguf"
    broken.write_bytes(b"not a model")
    with pytest.raises(LLMUnavailableError, match="exited"):
        LocalLlamaServer(broken, startup_timeout_s=60, log_path=tmp_path / "log.txt").start()


async def test_a_text_call_is_one_model_request_with_the_instructions_and_the_budget() -> None:
    """Hypotheses and questions go through pydantic-ai's direct API (one request, no agent run): the model
    sees the instructions, one user message, the call's settings, and a per-call token budget."""
    from pydantic_ai.messages import ModelResponse, TextPart
    from pydantic_ai.models.function import FunctionModel

    from hyde_tutor.llm.generation import generate_text, text_call

    seen: list[tuple[str | None, list[str], int | None]] = []

    def reply(messages, info):
        seen.append((info.instructions, [str(p.content) for m in messages for p in m.parts], (info.model_settings or {}).get("max_tokens")))
        return ModelResponse(parts=[TextPart("Конструкция: -고 싶다")])

    call = text_call(FunctionModel(reply), "Пиши статью справочника.", LLMSettings(), 180)
    out = await generate_text(call, "Как сказать «хочу»?", timeout_s=5)
    doubled = await generate_text(call, "Как сказать «могу»?", timeout_s=5, max_tokens=360)
    assert out.text == "Конструкция: -고 싶다" and out.failure is None and out.usage.requests == 1
    assert seen[0] == ("Пиши статью справочника.", ["Как сказать «хочу»?"], 180)
    assert seen[1][2] == 360 and doubled.text == out.text
    assert call.model_settings["max_tokens"] == 180  # the override did not leak into the call


async def test_a_streamed_text_call_joins_the_chunks_and_an_empty_reply_is_empty_text() -> None:
    from pydantic_ai.messages import ModelResponse
    from pydantic_ai.models.function import FunctionModel

    from hyde_tutor.llm.generation import generate_text, text_call

    async def stream(messages, info):
        for piece in ("Конструкция: ", "-고 ", "싶다"):
            yield piece

    streamed = await generate_text(text_call(FunctionModel(stream_function=stream), "", LLMSettings(), 50,
                                             CallOptions(stream=True)), "q", timeout_s=5)
    assert streamed.text == "Конструкция: -고 싶다" and streamed.usage.output_tokens > 0
    empty = await generate_text(text_call(FunctionModel(lambda m, i: ModelResponse(parts=[])), "", LLMSettings(), 50),
                                "q", timeout_s=5)
    assert empty.text == "" and empty.failure is None  # counted as an empty hypothesis, not an LLM error
