"""The dense-embedder seam: anything with a name, a dimension and ``embed``."""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Protocol, runtime_checkable

import numpy as np


@runtime_checkable
class DenseEmbedder(Protocol):
    """Turns texts into L2-normalised float32 vectors of shape ``(len(texts), dim)``."""

    @property
    def name(self) -> str: ...

    @property
    def dim(self) -> int: ...

    def embed(self, texts: Sequence[str]) -> np.ndarray: ...


TEXTS_PER_BOUND = 64
"""An embed call's time bound covers this many texts; a larger call gets one more bound per started block."""


def call_bound_s(timeout_s: float, n_texts: int) -> float:
    """How long a call of ``n_texts`` may take when ``timeout_s`` bounds a call of up to 64 texts."""
    return timeout_s * max(1, math.ceil(n_texts / TEXTS_PER_BOUND))


def l2_normalise(matrix: np.ndarray) -> np.ndarray:
    """Row-wise L2 normalisation; zero rows stay zero."""
    matrix = np.asarray(matrix, dtype=np.float32)
    if matrix.ndim == 1:
        matrix = matrix[None, :]
    norms = np.linalg.norm(matrix, axis=1, keepdims=True)
    return matrix / np.where(norms == 0, 1.0, norms)


def embed_in_batches(embedder: DenseEmbedder, texts: Sequence[str], batch_size: int) -> np.ndarray:
    """Embed ``texts`` ``batch_size`` at a time and stack the results."""
    if not texts:
        return np.zeros((0, embedder.dim), dtype=np.float32)
    parts = [embedder.embed(texts[i : i + batch_size]) for i in range(0, len(texts), batch_size)]
    return np.vstack(parts)
