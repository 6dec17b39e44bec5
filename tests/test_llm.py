"""LLM backends: the embedded llama.cpp engine (SmolLM2 smoke test), provider choice, failures."""

from __future__ import annotations

import asyncio
import time
from pathlib import Path

import pytest

from hyde_tutor.config import HydeSettings, LLMSettings, Settings
from hyde_tutor.hyde.hypotheses import HypothesisGenerator, MemoryCache
from hyde_tutor.llm.backends import LLMUnavailableError, LocalLlamaServer, make_llm, resolve_provider
from hyde_tutor.llm.server import resolve_gguf, smollm2_path


async def test_llama_cpp_engine_smoke_with_smollm2(isolated_env: Path) -> None:
    settings = Settings(llm=LLMSettings(provider="local", local_model="smollm2-135m", max_tokens=24, temperature=0.0))
    backend = make_llm(settings)
    try:
        assert backend.kind == "local" and backend.name.startswith("local:SmolLM2")
        gen = HypothesisGenerator(backend.model, backend.name, "grammar", cache=MemoryCache(),
                                  hyde=HydeSettings(timeout_s=120, min_hangul_chars=0), llm=settings.llm, extra_settings=backend.extra_settings)
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
                                  hyde=HydeSettings(min_hangul_chars=0), extra_settings=backend.extra_settings,
                                  max_concurrency=1, stream=backend.stream)
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
