"""Dense embedders behind one protocol, and a factory that reads settings.

Every built-in embedder is a pydantic-ai ``Embedder`` behind ``PydanticAIEmbedder`` (our sync
``DenseEmbedder``); wrap your own ``Embedder``/``EmbeddingModel`` the same way.
"""

from __future__ import annotations

from pydantic_ai.embeddings import Embedder
from pydantic_ai.exceptions import UserError

from ...config import Settings
from ...errors import EmbedderError
from .adapter import PydanticAIEmbedder
from .base import DenseEmbedder, embed_in_batches, l2_normalise
from .openai import DEFAULT_OPENAI_EMBEDDING_MODEL, OpenAIEmbedder
from .sentence_transformers import SentenceTransformerEmbedder
from .use import USE_DIM, USE_NAME, UseEmbedder, UseEmbeddingModel

__all__ = [
    "DenseEmbedder",
    "OpenAIEmbedder",
    "PydanticAIEmbedder",
    "SentenceTransformerEmbedder",
    "UseEmbedder",
    "UseEmbeddingModel",
    "embed_in_batches",
    "hosted_embedder",
    "l2_normalise",
    "make_dense_embedder",
]

HOSTED_KEYS = {"cohere": "CO_API_KEY", "voyageai": "VOYAGE_API_KEY"}


def hosted_embedder(provider: str, model: str | None) -> PydanticAIEmbedder:
    """``Embedder("<provider>:<model>")`` for cohere or voyageai, named ``<provider>:<model>``.

    The provider's SDK reads its key from the environment (``CO_API_KEY``, ``VOYAGE_API_KEY``).
    """
    if not model:
        raise EmbedderError(f"dense.provider={provider} needs a model: set HYDE_DENSE__MODEL "
                            f"(e.g. {'embed-multilingual-v3.0' if provider == 'cohere' else 'voyage-3.5'}).")
    name = f"{provider}:{model}"
    try:
        embedder = Embedder(name, defer_model_check=False)  # imports the SDK and builds the client now
    except ImportError as exc:
        raise EmbedderError(f'dense.provider={provider} needs its SDK: pip install "pydantic-ai-slim[{provider}]"') \
            from exc
    except UserError as exc:  # no API key
        raise EmbedderError(f"dense.provider={provider}: {exc} (env {HOSTED_KEYS.get(provider, '')})") from exc
    return PydanticAIEmbedder(embedder, name=name)


def make_dense_embedder(settings: Settings) -> DenseEmbedder:
    """Build the dense embedder the settings ask for."""
    dense = settings.dense
    if dense.provider == "use":
        if dense.process:
            from ..worker import ProcessEmbedder

            return ProcessEmbedder("use", name=USE_NAME, dim=USE_DIM, call_timeout_s=dense.embed_timeout_s,
                                   threads=dense.threads)
        return UseEmbedder(threads=dense.threads)
    if dense.provider == "sentence-transformers":
        return SentenceTransformerEmbedder(dense.model)
    if dense.provider in HOSTED_KEYS:
        return hosted_embedder(dense.provider, dense.model)
    return OpenAIEmbedder(
        api_key=settings.openai.key(),  # the same key the LLM uses
        model=dense.model or DEFAULT_OPENAI_EMBEDDING_MODEL,
        base_url=settings.openai.base_url,
        timeout_s=settings.openai.timeout_s,
    )
