"""OpenAI embeddings (``text-embedding-3-small`` by default) through pydantic-ai's ``OpenAIEmbeddingModel``.

Works with api.openai.com or any OpenAI-compatible ``/v1/embeddings`` endpoint. The async HTTP
client is injectable, so tests can point it at a local stub or a mock transport.
"""

from __future__ import annotations

import json
from functools import cached_property
from typing import Any

import httpx
import httpx2
from openai import APIConnectionError, APIResponseValidationError, AsyncOpenAI
from openai.resources.embeddings import AsyncEmbeddings
from pydantic import ValidationError
from pydantic_ai.embeddings import Embedder
from pydantic_ai.embeddings.openai import OpenAIEmbeddingModel
from pydantic_ai.exceptions import ModelAPIError, ModelConnectionError, ModelHTTPError
from pydantic_ai.providers.openai import OpenAIProvider

from ...config import redact_url

from ...errors import EmbedderError
from .adapter import PydanticAIEmbedder

DEFAULT_OPENAI_EMBEDDING_MODEL = "text-embedding-3-small"
OPENAI_DIMENSIONS = {"text-embedding-3-small": 1536, "text-embedding-3-large": 3072, "text-embedding-ada-002": 1536}
_PARSE_ERRORS = (AttributeError, KeyError, TypeError, ValueError, ValidationError, APIResponseValidationError)


class _IndexOrderedEmbeddings(AsyncEmbeddings):
    """``embeddings.create`` that puts the vectors back in input order (by ``index``), as servers may not."""

    async def create(self, *args: Any, **kwargs: Any) -> Any:
        response = await super().create(*args, **kwargs)
        data = getattr(response, "data", None)
        if isinstance(data, list) and all(isinstance(getattr(item, "index", None), int) for item in data):
            data.sort(key=lambda item: item.index)
        return response


class _AsyncOpenAI(AsyncOpenAI):
    @cached_property
    def embeddings(self) -> AsyncEmbeddings:  # type: ignore[override]
        return _IndexOrderedEmbeddings(self)


class OpenAIEmbedder(PydanticAIEmbedder):
    """Dense embedder calling an OpenAI-compatible embeddings endpoint via pydantic-ai.

    The SDK's retries are off (``max_retries``, default 0): a dead endpoint fails fast and the
    caller (ingest, the HyDE fallback) decides what to do. ``name`` is ``openai:<model>`` for
    every base URL, as collections built earlier recorded it.
    """

    def __init__(
        self,
        api_key: str | None,
        model: str = DEFAULT_OPENAI_EMBEDDING_MODEL,
        base_url: str | None = None,
        dimensions: int | None = None,
        timeout_s: float = 30.0,
        http_client: httpx.AsyncClient | httpx2.AsyncClient | None = None,
        max_retries: int = 0,
    ) -> None:
        if not api_key:
            raise EmbedderError(
                "OpenAI embeddings need an API key: set OPENAI_API_KEY or HYDE_OPENAI__API_KEY."
            )
        self.model = model
        self.base_url = (base_url or "https://api.openai.com/v1").rstrip("/")
        # OpenAI 3 accepts a legacy httpx.AsyncClient at runtime as well as an httpx2 one.
        self._client = _AsyncOpenAI(api_key=api_key, base_url=self.base_url, timeout=timeout_s,
                                    max_retries=max_retries, http_client=http_client)  # type: ignore[arg-type]
        sent = dimensions if dimensions is not None and model.startswith("text-embedding-3") else None
        embedding_model = OpenAIEmbeddingModel(model, provider=OpenAIProvider(openai_client=self._client))
        super().__init__(Embedder(embedding_model), name=f"openai:{model}",
                         dim=dimensions or OPENAI_DIMENSIONS.get(model), dimensions=sent)

    def __repr__(self) -> str:
        return f"OpenAIEmbedder(model={self.model!r}, base_url={redact_url(self.base_url)!r})"

    async def _aclose(self) -> None:
        await self._client.close()

    def _describe(self, exc: BaseException) -> str | None:
        if isinstance(exc, ModelHTTPError):
            body = exc.body if isinstance(exc.body, str) else json.dumps(exc.body, default=str)
            return f"OpenAI embeddings failed with HTTP {exc.status_code}: {body[:300]}"
        if isinstance(exc, ModelConnectionError | APIConnectionError):
            return f"OpenAI embeddings endpoint {redact_url(self.base_url)} unreachable: {exc}"
        if isinstance(exc, _PARSE_ERRORS) or (isinstance(exc, ModelAPIError) and "decode" in str(exc)):
            return (
                f"The embeddings endpoint {redact_url(self.base_url)} answered HTTP 200 with something that is not an "
                f"embeddings response ({type(exc).__name__}: {str(exc)[:120]}). "
                "Check HYDE_OPENAI__BASE_URL points at an OpenAI-compatible /v1."
            )
        return None

    def _malformed(self, detail: str) -> EmbedderError:
        return EmbedderError(
            f"The embeddings endpoint {redact_url(self.base_url)} answered with something that is not an embeddings "
            f"response ({detail}). Check HYDE_OPENAI__BASE_URL points at an OpenAI-compatible /v1."
        )
