"""Any pydantic-ai ``Embedder`` (or ``EmbeddingModel``) as our synchronous ``DenseEmbedder``.

pydantic-ai embedders are async. The adapter runs their coroutines on one background event loop
that it owns (a daemon thread, started on first use), so an async HTTP client stays bound to a
single loop, and ``embed`` works from any thread: the main thread, worker threads, or a thread
whose own event loop is running. The caller's OpenTelemetry context travels with each call, so
the ``embeddings`` spans pydantic-ai records (``Embedder.instrument_all()`` or logfire's
``instrument_pydantic_ai()``) nest under the caller's span.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import contextlib
import threading
import weakref
from collections.abc import Coroutine, Sequence
from typing import Any, TypeVar

import numpy as np
from opentelemetry import context as otel_context
from pydantic_ai.embeddings import Embedder, EmbeddingModel, EmbeddingSettings
from pydantic_ai.exceptions import ModelAPIError, ModelConnectionError, ModelHTTPError, UserError

from ...errors import EmbedderError
from .base import l2_normalise

T = TypeVar("T")


def _stop_loop(loop: asyncio.AbstractEventLoop, thread: threading.Thread) -> None:
    """Stop the background loop, wait for its thread, close it (also run when the adapter is collected)."""
    if loop.is_closed():
        return
    loop.call_soon_threadsafe(loop.stop)
    if thread is not threading.current_thread():
        thread.join(timeout=5)
    if not loop.is_running():
        loop.close()


class PydanticAIEmbedder:
    """A dense embedder backed by a pydantic-ai ``Embedder``.

    Texts are embedded with ``embed_documents``: HyDE compares hypothetical *documents* with
    stored documents, so queries and hypotheses are embedded as documents too, in the same
    space as the corpus. Rows come back float32 and L2-normalised.

    Args:
        embedder: an ``Embedder``, an ``EmbeddingModel``, or a model string such as
            ``"openai:text-embedding-3-small"`` (models are wrapped in an ``Embedder`` with
            ``instrument=None``, so ``Embedder.instrument_all()`` applies).
        name: the name collections record; default ``<system>:<model name>``.
        dim: the vector size; default ``dimensions`` when given, else probed once.
        dimensions: ask the model for vectors of this size (``EmbeddingSettings.dimensions``).
        serialise: let one call at a time through (for local models that are not thread-safe).
    """

    def __init__(
        self,
        embedder: Embedder | EmbeddingModel | str,
        *,
        name: str | None = None,
        dim: int | None = None,
        dimensions: int | None = None,
        serialise: bool = False,
    ) -> None:
        self.embedder = embedder if isinstance(embedder, Embedder) else Embedder(embedder)
        self._name = name or _default_name(self.embedder.model)
        self._dim = dim if dim is not None else dimensions
        self._settings: EmbeddingSettings | None = {"dimensions": dimensions} if dimensions else None
        self._call_lock = threading.Lock() if serialise else None
        self._loop_lock = threading.Lock()
        self._loop: asyncio.AbstractEventLoop | None = None
        self._thread: threading.Thread | None = None
        self._closed = False
        self._inflight: set[concurrent.futures.Future[Any]] = set()

    def __repr__(self) -> str:
        return f"{type(self).__name__}(name={self.name!r})"

    @property
    def name(self) -> str:
        return self._name

    @property
    def dim(self) -> int:
        if self._dim is None:
            self._dim = int(self.embed(["probe"]).shape[1])
        return self._dim

    def embed(self, texts: Sequence[str]) -> np.ndarray:
        """Embed ``texts`` as documents; returns ``(len(texts), dim)`` float32 unit rows."""
        if not texts:
            return np.zeros((0, self.dim), dtype=np.float32)
        texts = list(texts)
        with self._call_lock or contextlib.nullcontext():
            result = self._run(self.embedder.embed_documents(texts, settings=self._settings))
        try:
            vectors = np.asarray(result.embeddings, dtype=np.float32)
        except (TypeError, ValueError) as exc:  # ragged rows, non-numbers
            raise self._malformed(f"{type(exc).__name__}: {str(exc)[:120]}") from exc
        if vectors.ndim != 2 or vectors.shape[1] == 0 or not np.isfinite(vectors).all():
            raise self._malformed(f"vectors of shape {vectors.shape}, or not all finite numbers")
        if len(vectors) != len(texts):
            raise EmbedderError(f"{self.name} returned {len(vectors)} vectors for {len(texts)} texts.")
        return l2_normalise(vectors)

    def close(self) -> None:
        """Release what the model holds (subclasses) and stop the background loop; idempotent."""
        with self._loop_lock:
            if self._closed:
                return
            self._closed = True
            loop, thread = self._loop, self._thread
            inflight = list(self._inflight)
        for future in inflight:  # a call still running ends with an EmbedderError instead of waiting forever
            future.cancel()
        if loop is None or thread is None:
            return
        with contextlib.suppress(Exception):  # closing must not fail the caller
            asyncio.run_coroutine_threadsafe(self._aclose(), loop).result(timeout=10)
        _stop_loop(loop, thread)

    async def _aclose(self) -> None:
        """Close async resources on the adapter's loop (an HTTP client a subclass owns)."""

    def _describe(self, exc: BaseException) -> str | None:
        """A subclass's message for ``exc``, or None for the generic one."""
        return None

    def _malformed(self, detail: str) -> EmbedderError:
        return EmbedderError(f"{self.name} returned something that is not an embeddings response ({detail}).")

    def _run(self, coro: Coroutine[Any, Any, T]) -> T:
        loop = self._event_loop(coro)
        captured = otel_context.get_current()

        async def in_caller_context() -> T:
            token = otel_context.attach(captured)
            try:
                return await coro
            finally:
                otel_context.detach(token)

        pending = in_caller_context()
        try:
            future = asyncio.run_coroutine_threadsafe(pending, loop)
        except RuntimeError as exc:  # the loop was closed under us by close()
            pending.close()
            coro.close()
            raise EmbedderError(f"{self.name}: the embedder was closed while this call was starting.") from exc
        with self._loop_lock:
            if self._closed:  # close() ran between finding the loop and here: it never saw this call
                future.cancel()
                raise EmbedderError(f"{self.name}: the embedder was closed while this call was starting.")
            self._inflight.add(future)
        try:
            return future.result()
        except EmbedderError:
            raise
        except concurrent.futures.CancelledError as exc:
            raise EmbedderError(f"{self.name}: the embedder was closed while this call was running.") from exc
        except Exception as exc:  # noqa: BLE001 - every failure becomes one typed error
            raise self._error(exc) from exc
        except BaseException:  # KeyboardInterrupt, SystemExit: stop the call on the loop too
            future.cancel()
            raise
        finally:
            with self._loop_lock:
                self._inflight.discard(future)

    def _event_loop(self, coro: Coroutine[Any, Any, Any]) -> asyncio.AbstractEventLoop:
        with self._loop_lock:
            if self._closed or threading.current_thread() is self._thread:
                coro.close()
                raise EmbedderError(f"{self.name}: embedder is closed, or was called from its own event loop.")
            if self._loop is None:
                self._loop = asyncio.new_event_loop()
                self._thread = threading.Thread(target=self._loop.run_forever, daemon=True,
                                                name=f"embedder-loop[{self.name}]")
                self._thread.start()
                weakref.finalize(self, _stop_loop, self._loop, self._thread)
            return self._loop

    def _error(self, exc: Exception) -> EmbedderError:
        message = self._describe(exc)
        if message is not None:
            return EmbedderError(message)
        if isinstance(exc, ModelHTTPError):
            return EmbedderError(f"{self.name}: embeddings request failed with HTTP {exc.status_code}: "
                                 f"{str(exc.body)[:300]}")
        if isinstance(exc, ModelConnectionError):
            return EmbedderError(f"{self.name}: embeddings endpoint unreachable: {exc.message}")
        if isinstance(exc, ModelAPIError | UserError):
            return EmbedderError(f"{self.name}: {exc}")
        return EmbedderError(f"{self.name}: embedding failed ({type(exc).__name__}: {str(exc)[:200]}).")


def _default_name(model: EmbeddingModel | str) -> str:
    if isinstance(model, str):
        return model
    return f"{model.system}:{model.model_name}"
