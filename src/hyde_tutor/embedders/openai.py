"""OpenAI embeddings (``text-embedding-3-small`` by default) over plain HTTP.

Works with api.openai.com or any OpenAI-compatible ``/v1/embeddings`` endpoint.
The HTTP client is injectable, so tests can point it at a local stub.
"""

from __future__ import annotations

from collections.abc import Sequence

import httpx
import numpy as np

from ..errors import EmbedderError
from .base import l2_normalise

DEFAULT_OPENAI_EMBEDDING_MODEL = "text-embedding-3-small"
OPENAI_DIMENSIONS = {"text-embedding-3-small": 1536, "text-embedding-3-large": 3072, "text-embedding-ada-002": 1536}


class OpenAIEmbedder:
    """Dense embedder calling an OpenAI-compatible embeddings endpoint."""

    def __init__(
        self,
        api_key: str | None,
        model: str = DEFAULT_OPENAI_EMBEDDING_MODEL,
        base_url: str | None = None,
        dimensions: int | None = None,
        timeout_s: float = 30.0,
        client: httpx.Client | None = None,
    ) -> None:
        if not api_key:
            raise EmbedderError(
                "OpenAI embeddings need an API key: set OPENAI_API_KEY or HYDE_OPENAI__API_KEY."
            )
        self.model = model
        self.base_url = (base_url or "https://api.openai.com/v1").rstrip("/")
        self._dimensions = dimensions
        self._client = client or httpx.Client(timeout=timeout_s)
        self._headers = {"Authorization": f"Bearer {api_key}"}

    @property
    def name(self) -> str:
        return f"openai:{self.model}"

    @property
    def dim(self) -> int:
        if self._dimensions is None:
            self._dimensions = OPENAI_DIMENSIONS.get(self.model) or int(self.embed(["probe"]).shape[1])
        return self._dimensions

    def embed(self, texts: Sequence[str]) -> np.ndarray:
        if not texts:
            return np.zeros((0, self.dim), dtype=np.float32)
        body: dict[str, object] = {"model": self.model, "input": list(texts)}
        if self._dimensions is not None and self.model.startswith("text-embedding-3"):
            body["dimensions"] = self._dimensions
        try:
            response = self._client.post(f"{self.base_url}/embeddings", json=body, headers=self._headers)
        except httpx.HTTPError as exc:
            raise EmbedderError(f"OpenAI embeddings endpoint {self.base_url} unreachable: {exc}") from exc
        if response.status_code != 200:
            raise EmbedderError(
                f"OpenAI embeddings failed with HTTP {response.status_code}: {response.text[:300]}"
            )
        try:
            data = sorted(response.json()["data"], key=lambda item: item["index"])
            vectors = np.array([item["embedding"] for item in data], dtype=np.float32)
        except (ValueError, KeyError, TypeError) as exc:  # not JSON, or not an embeddings response
            raise EmbedderError(
                f"The embeddings endpoint {self.base_url} answered HTTP 200 with something that is not an "
                f"embeddings response ({type(exc).__name__}: {str(exc)[:120]}; body starts {response.text[:80]!r}). "
                "Check HYDE_OPENAI__BASE_URL points at an OpenAI-compatible /v1."
            ) from exc
        if vectors.ndim != 2 or len(vectors) != len(texts):
            raise EmbedderError(
                f"The embeddings endpoint {self.base_url} returned {len(vectors)} vectors for {len(texts)} texts."
            )
        return l2_normalise(vectors)
