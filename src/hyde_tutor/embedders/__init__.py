"""Dense embedders behind one protocol, and a factory that reads settings."""

from __future__ import annotations

import os

from ..config import Settings
from .base import DenseEmbedder, embed_in_batches, l2_normalise
from .openai import DEFAULT_OPENAI_EMBEDDING_MODEL, OpenAIEmbedder
from .sentence_transformers import SentenceTransformerEmbedder
from .use import UseEmbedder

__all__ = [
    "DenseEmbedder",
    "OpenAIEmbedder",
    "SentenceTransformerEmbedder",
    "UseEmbedder",
    "embed_in_batches",
    "l2_normalise",
    "make_dense_embedder",
]


def make_dense_embedder(settings: Settings) -> DenseEmbedder:
    """Build the dense embedder the settings ask for."""
    dense = settings.dense
    if dense.provider == "use":
        return UseEmbedder(threads=dense.threads)
    if dense.provider == "sentence-transformers":
        return SentenceTransformerEmbedder(dense.model)
    key = settings.openai.api_key.get_secret_value() if settings.openai.api_key else os.environ.get("OPENAI_API_KEY")
    return OpenAIEmbedder(
        api_key=key,
        model=dense.model or DEFAULT_OPENAI_EMBEDDING_MODEL,
        base_url=settings.openai.base_url,
        timeout_s=settings.openai.timeout_s,
    )
