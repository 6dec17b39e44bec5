"""``PydanticAIEmbedder``: any pydantic-ai embedder as our sync ``DenseEmbedder``, from any thread.

Also: the hosted providers (cohere, voyageai) fail clearly, and one OpenAI key drives both the LLM
and the OpenAI embedder.
"""

from __future__ import annotations

import asyncio
import threading
import time
from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import numpy as np
import pytest
from pydantic_ai import Agent
from pydantic_ai.embeddings import Embedder, EmbeddingModel, EmbeddingResult, EmbeddingSettings
from pydantic_ai.embeddings.result import EmbedInputType

import hyde_tutor
from hyde_tutor import EmbedderError, PydanticAIEmbedder, Settings
from hyde_tutor.retrieval.embedders import DenseEmbedder, hosted_embedder, make_dense_embedder
from hyde_tutor.llm.backends import make_llm

from .test_embedders import _Stub, openai_stub  # noqa: F401 - the embeddings stub fixture
from .test_secrets import capturing_llm


class TinyModel(EmbeddingModel):
    """Vectors ``[len(text), 1, 0]``; records the loops, input types and settings it saw."""

    def __init__(self, delay: float = 0.0, vectors: Any = None) -> None:
        super().__init__()
        self.delay, self.vectors = delay, vectors
        self.loops: set[int] = set()
        self.input_types: set[str] = set()
        self.seen_settings: list[EmbeddingSettings] = []

    @property
    def model_name(self) -> str:
        return "tiny-model"

    @property
    def system(self) -> str:
        return "tiny"

    async def embed(self, inputs: str | Sequence[str], *, input_type: EmbedInputType,
                    settings: EmbeddingSettings | None = None) -> EmbeddingResult:
        texts, merged = self.prepare_embed(inputs, settings)
        self.loops.add(id(asyncio.get_running_loop()))
        self.input_types.add(input_type)
        self.seen_settings.append(merged)
        await asyncio.sleep(self.delay)
        vectors = self.vectors if self.vectors is not None else [[float(len(t)), 1.0, 0.0] for t in texts]
        return EmbeddingResult(vectors, inputs=texts, input_type=input_type, model_name=self.model_name,
                               provider_name=self.system)


def _expected(texts: Sequence[str]) -> np.ndarray:
    v = np.array([[len(t), 1.0, 0.0] for t in texts], dtype=np.float32)
    return v / np.linalg.norm(v, axis=1, keepdims=True)


def test_public_and_a_dense_embedder() -> None:
    model = TinyModel()
    emb = PydanticAIEmbedder(model)
    assert hyde_tutor.PydanticAIEmbedder is PydanticAIEmbedder and isinstance(emb, DenseEmbedder)
    assert emb.name == "tiny:tiny-model" and emb.dim == 3  # the size is probed once
    v = emb.embed(["a", "bbb"])
    assert v.dtype == np.float32 and np.allclose(v, _expected(["a", "bbb"]))
    assert model.input_types == {"document"}  # HyDE compares documents with documents
    assert emb.embed([]).shape == (0, 3)
    emb.close()


async def test_embed_works_from_a_thread_whose_event_loop_is_running() -> None:
    model = TinyModel()
    emb = PydanticAIEmbedder(Embedder(model), name="tiny", dim=3)
    v = emb.embed(["a", "bbb"])  # synchronous call inside a running loop
    assert np.allclose(v, _expected(["a", "bbb"]))
    assert model.loops and id(asyncio.get_running_loop()) not in model.loops  # ran on the adapter's own loop
    emb.close()


def test_embed_from_many_threads_runs_on_one_loop_concurrently() -> None:
    model = TinyModel(delay=0.1)
    emb = PydanticAIEmbedder(model, name="tiny", dim=3)
    batches = [[f"text {i}", "x" * (i + 1)] for i in range(40)]
    started = time.perf_counter()
    with ThreadPoolExecutor(8) as pool:
        got = list(pool.map(emb.embed, batches))
    elapsed = time.perf_counter() - started
    for batch, vectors in zip(batches, got, strict=True):
        assert np.allclose(vectors, _expected(batch))  # no batch got another's vectors
    assert len(model.loops) == 1  # one loop, so an async HTTP client stays bound to it
    assert elapsed < 2.5, elapsed  # 40 x 0.1 s would take 4 s one at a time
    emb.close()


def test_dimensions_travel_in_the_embedding_settings() -> None:
    model = TinyModel()
    emb = PydanticAIEmbedder(model, name="tiny", dimensions=3)
    assert emb.dim == 3 and not model.seen_settings  # known without a probe
    emb.embed(["a"])
    assert model.seen_settings[-1]["dimensions"] == 3


@pytest.mark.parametrize(("vectors", "match"), [([[1.0, 0.0]], "1 vectors for 2 texts"),
                                                 ([None, None], "not an embeddings response"),
                                                 ([[1.0], [1.0, 2.0]], "not an embeddings response")])
def test_wrong_results_are_typed_errors(vectors: Any, match: str) -> None:
    with pytest.raises(EmbedderError, match=match):
        PydanticAIEmbedder(TinyModel(vectors=vectors), dim=2).embed(["a", "b"])


def test_model_failures_and_use_after_close_are_typed_errors() -> None:
    class Broken(TinyModel):
        async def embed(self, *args: Any, **kwargs: Any) -> EmbeddingResult:
            raise RuntimeError("boom")

    with pytest.raises(EmbedderError, match="boom"):
        PydanticAIEmbedder(Broken(), dim=3).embed(["a"])
    emb = PydanticAIEmbedder(TinyModel(), dim=3)
    emb.embed(["a"])
    thread = emb._thread
    emb.close()
    emb.close()  # idempotent
    assert thread is not None and not thread.is_alive()
    with pytest.raises(EmbedderError, match="closed"):
        emb.embed(["a"])


def test_closing_during_a_call_ends_the_call_with_a_typed_error() -> None:
    emb = PydanticAIEmbedder(TinyModel(delay=30.0), dim=3)  # a call that would take 30 s
    with ThreadPoolExecutor(1) as pool:
        call = pool.submit(emb.embed, ["a"])
        time.sleep(0.3)  # the call is now waiting on the embedder's loop
        started = time.perf_counter()
        emb.close()
        with pytest.raises(EmbedderError, match="closed while this call was running"):
            call.result(timeout=10)
    assert time.perf_counter() - started < 10


def test_embedder_instrumentation_nests_under_the_callers_span(capfire) -> None:
    import logfire

    emb = PydanticAIEmbedder(TinyModel(), name="tiny", dim=3)  # instrument=None: instrument_all decides
    Embedder.instrument_all(True)
    try:
        with logfire.span("caller"):
            emb.embed(["a"])
    finally:
        Embedder.instrument_all(False)
        emb.close()
    spans = {s["name"]: s for s in capfire.exporter.exported_spans_as_dict()}
    assert "embeddings tiny-model" in spans
    assert spans["embeddings tiny-model"]["parent"]["span_id"] == spans["caller"]["context"]["span_id"]


@pytest.mark.parametrize("provider", ["cohere", "voyageai"])
def test_hosted_providers_fail_clearly(isolated_env, monkeypatch: pytest.MonkeyPatch, provider: str) -> None:
    monkeypatch.setenv("HYDE_DENSE__PROVIDER", provider)
    with pytest.raises(EmbedderError, match="HYDE_DENSE__MODEL"):
        make_dense_embedder(Settings())
    try:
        __import__(provider)
    except ImportError:
        with pytest.raises(EmbedderError, match=rf'pip install "pydantic-ai-slim\[{provider}\]"'):
            hosted_embedder(provider, "some-model")
    else:  # SDK installed: the model name path, with a dummy key and no network call
        monkeypatch.setenv({"cohere": "CO_API_KEY", "voyageai": "VOYAGE_API_KEY"}[provider], "dummy")
        assert hosted_embedder(provider, "some-model").name == f"{provider}:some-model"


def test_one_openai_key_drives_the_llm_and_the_embedder(isolated_env, monkeypatch, openai_stub: str) -> None:  # noqa: F811
    monkeypatch.setenv("HYDE_OPENAI__API_KEY", "sk-one")
    monkeypatch.setenv("HYDE_OPENAI__BASE_URL", openai_stub)
    monkeypatch.setenv("HYDE_DENSE__PROVIDER", "openai")
    monkeypatch.setenv("HYDE_LLM__PROVIDER", "openai-compatible")
    with capturing_llm() as (llm_url, authorizations):
        monkeypatch.setenv("HYDE_LLM__BASE_URL", llm_url)
        settings = Settings()
        backend = make_llm(settings)
        Agent(backend.model).run_sync("привет")
        embedder = make_dense_embedder(settings)
        embedder.embed(["x"])
        embedder.close()  # type: ignore[attr-defined]
    assert authorizations == ["Bearer sk-one"]
    assert _Stub.requests[-1]["auth"] == "Bearer sk-one"


def test_embed_is_not_confused_by_callers_on_their_own_threads() -> None:
    emb = PydanticAIEmbedder(TinyModel(), dim=3)
    errors: list[BaseException] = []

    def worker() -> None:
        async def inner() -> None:
            emb.embed(["a"])  # a worker thread with its own running loop

        try:
            asyncio.run(inner())
        except BaseException as exc:  # noqa: BLE001
            errors.append(exc)

    threads = [threading.Thread(target=worker) for _ in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not errors
    emb.close()
