"""Dynamic batching in front of a dense embedder, as inference servers do.

Under load, many searches each embed one or two short texts at the same time. An embedder answers a
batch of 8 texts in about 2.5x the time of one (USE-multilingual-v3 on 2 cores: 4.7 ms for one, 11.7 ms
for eight), but searches arriving one by one pay the whole per-call cost each, queued behind a lock.
:class:`BatchingEmbedder` puts every call on one queue; a single worker thread takes what is waiting
(up to ``max_batch`` texts), embeds it in ONE call and hands each caller its rows. A lone call is
embedded at once: nothing waits for a batch to fill.

No caller waits without a bound: ``timeout_s`` (per 64 texts) bounds :meth:`embed` and :meth:`wait`, and a
caller that gives up gets :class:`~hyde_tutor.errors.EmbedderError` (its texts are dropped from the queue if
they were not embedded yet).
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import queue
import threading
import time
from collections.abc import Sequence
from typing import Any

import numpy as np

from ...errors import EmbedderError
from .base import DenseEmbedder, call_bound_s

_STOP = object()


class BatchingEmbedder:
    """A :class:`DenseEmbedder` that coalesces concurrent :meth:`embed` calls into batches of the inner one.

    Args:
        inner: the embedder that embeds each batch.
        max_batch: texts per inner call, at most (one larger call is embedded alone).
        timeout_s: how long a caller of up to 64 texts waits for its rows (more texts: this per 64; an inner
            embedder that must start first adds its ``start_allowance_s``); None
            takes the inner embedder's ``call_timeout_s`` when it has one, else callers wait without a bound.

    Thread-safe; :meth:`close` stops the worker (calls still queued end with :class:`EmbedderError`) and
    closes the inner embedder.
    """

    def __init__(self, inner: DenseEmbedder, max_batch: int = 32, timeout_s: float | None = None) -> None:
        self.inner = inner
        self.name = inner.name
        self.dim = inner.dim
        self.max_batch = max_batch
        self.timeout_s = timeout_s if timeout_s is not None else getattr(inner, "call_timeout_s", None)
        self.batches = 0
        """Inner calls made (fewer than calls received when batching happened)."""
        self._queue: queue.SimpleQueue[Any] = queue.SimpleQueue()
        self._lock = threading.Lock()
        self._worker: threading.Thread | None = None
        self._closed = False

    def embed(self, texts: Sequence[str]) -> np.ndarray:
        texts = list(texts)
        future = self.submit(texts)
        try:
            return future.result(self.wait_s(len(texts)))
        except concurrent.futures.TimeoutError:
            raise self._gave_up(future, len(texts)) from None

    def wait_s(self, n_texts: int) -> float | None:
        """How long a caller of ``n_texts`` waits for its rows (None: no bound); an inner embedder that has
        to start first (a child process) adds its ``start_allowance_s``."""
        if self.timeout_s is None:
            return None
        return call_bound_s(self.timeout_s, n_texts) + float(getattr(self.inner, "start_allowance_s", 0.0))

    async def wait(self, future: concurrent.futures.Future[np.ndarray], n_texts: int,
                   started: float | None = None) -> np.ndarray:
        """Await a :meth:`submit` future for at most :meth:`wait_s` (counted from ``started``, a
        ``time.monotonic()`` taken before the submit); :class:`EmbedderError` when it runs out."""
        bound = self.wait_s(n_texts)
        left = None if bound is None else max(0.0, bound - (time.monotonic() - started if started else 0.0))
        try:
            return await asyncio.wait_for(asyncio.wrap_future(future), left)
        except TimeoutError:
            raise self._gave_up(future, n_texts) from None

    def _gave_up(self, future: concurrent.futures.Future[np.ndarray], n_texts: int) -> EmbedderError:
        future.cancel()  # still queued: the worker skips it
        return EmbedderError(f"The {self.name} embedder did not return the vectors within {self.wait_s(n_texts):g} s "
                             "(HYDE_DENSE__EMBED_TIMEOUT_S sets the bound); try again.")

    def submit(self, texts: Sequence[str]) -> concurrent.futures.Future[np.ndarray]:
        """Queue ``texts`` and return at once; the future holds their rows. Async code awaits it
        (``asyncio.wrap_future``) instead of holding a worker thread while the batch is embedded."""
        texts = list(texts)
        future: concurrent.futures.Future[np.ndarray] = concurrent.futures.Future()
        if not texts:
            future.set_result(np.zeros((0, self.dim), dtype=np.float32))
            return future
        with self._lock:
            if self._closed:
                raise EmbedderError(f"The embedder {self.name} is closed.")
            self._queue.put((texts, future))
            if self._worker is None:
                self._worker = threading.Thread(target=self._run, name=f"embed-batcher-{self.name}", daemon=True)
                self._worker.start()
        return future

    def _run(self) -> None:
        while True:
            item = self._queue.get()
            if item is _STOP:
                return
            batch = [item]
            size = len(item[0])
            while size < self.max_batch:
                try:
                    more = self._queue.get_nowait()
                except queue.Empty:
                    break
                if more is _STOP:
                    self._queue.put(_STOP)  # finish this batch, then stop
                    break
                batch.append(more)
                size += len(more[0])
            self._embed(batch)

    def _embed(self, batch: list[tuple[list[str], concurrent.futures.Future[np.ndarray]]]) -> None:
        # a caller that gave up (a cancelled search) is dropped; the others can no longer be cancelled
        batch = [(chunk, future) for chunk, future in batch if future.set_running_or_notify_cancel()]
        if not batch:
            return
        texts = [t for chunk, _ in batch for t in chunk]
        try:
            vectors = np.asarray(self.inner.embed(texts), dtype=np.float32)
            self.batches += 1
        except BaseException as exc:  # noqa: BLE001 - every caller of the batch gets the failure
            for _, future in batch:
                future.set_exception(exc)
            return
        start = 0
        for chunk, future in batch:
            future.set_result(vectors[start:start + len(chunk)])
            start += len(chunk)

    def close(self) -> None:
        with self._lock:
            if self._closed:
                return
            self._closed = True
            worker = self._worker
        if worker is not None:
            self._queue.put(_STOP)
            worker.join(timeout=self.wait_s(1) or 30)
            if worker.is_alive():  # a batch in flight that does not end: closing the inner embedder ends it
                self._close_inner()
                worker.join(timeout=5)
        while True:  # anything left behind the stop: fail it rather than leave a caller waiting
            try:
                item = self._queue.get_nowait()
            except queue.Empty:
                break
            if item is not _STOP and item[1].set_running_or_notify_cancel():
                item[1].set_exception(EmbedderError(f"The embedder {self.name} was closed."))
        self._close_inner()

    def _close_inner(self) -> None:
        close = getattr(self.inner, "close", None)
        if callable(close):
            close()
