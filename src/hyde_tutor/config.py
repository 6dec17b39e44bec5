"""One typed settings object for the whole package.

Values come from (highest first): keyword arguments, environment variables with
the ``HYDE_`` prefix (nested keys joined with ``__``, e.g. ``HYDE_QDRANT__URL``),
a ``.env`` file in the working directory, then the defaults below.
``.env.example`` documents every key.
"""

from __future__ import annotations

from pathlib import Path
from typing import Literal

from pydantic import BaseModel, Field, SecretStr
from pydantic_settings import BaseSettings, SettingsConfigDict


class QdrantSettings(BaseModel):
    """Where vectors live. No URL and ``local=False`` means the embedded qdrant-edge engine."""

    url: str | None = Field(None, description="Qdrant server/cluster URL; switches to qdrant-client.")
    api_key: SecretStr | None = Field(None, description="API key for the Qdrant server.")
    local: bool = Field(False, description="Use qdrant-client's local (in-process) mode under data_dir.")
    timeout_s: float = Field(10.0, gt=0, description="Request timeout for a Qdrant server.")


class DenseSettings(BaseModel):
    """Dense embedding model."""

    provider: Literal["use", "sentence-transformers", "openai"] = Field(
        "use", description="use = USE-multilingual-v3 (offline, ko+ru)."
    )
    model: str | None = Field(
        None, description="Model name or path (sentence-transformers / openai); None = provider default."
    )
    batch_size: int = Field(64, ge=1, le=4096, description="Texts per embedding call.")
    threads: int = Field(2, ge=1, le=64, description="CPU threads for the USE encoder.")


class OpenAISettings(BaseModel):
    """OpenAI or any OpenAI-compatible server."""

    api_key: SecretStr | None = Field(None, description="API key (falls back to OPENAI_API_KEY).")
    base_url: str | None = Field(None, description="Base URL of an OpenAI-compatible server.")
    timeout_s: float = Field(30.0, gt=0)


class SparseSettings(BaseModel):
    """BM25 term weighting (IDF is applied by Qdrant)."""

    k1: float = Field(1.2, ge=0, description="Term-frequency saturation.")
    b: float = Field(0.75, ge=0, le=1, description="Length normalisation.")


class RetrievalSettings(BaseModel):
    """Hybrid search knobs."""

    top_k: int = Field(5, ge=1, le=100, description="Results returned per query.")
    prefetch_limit: int = Field(100, ge=1, le=1000, description="Candidates per channel before fusion.")
    fusion: Literal["rrf", "dbsf"] = Field(
        "dbsf", description="How Qdrant fuses the dense and sparse prefetches (dbsf measured best here)."
    )
    rrf_k: int = Field(10, ge=1, description="RRF k when fusion=rrf (always sent explicitly).")
    dense_weight: float = Field(1.0, ge=0, description="RRF weight of the dense channel.")
    sparse_weight: float = Field(1.0, ge=0, description="RRF weight of the sparse channel.")
    max_query_chars: int = Field(1000, ge=1, description="Longer queries are rejected.")
    hnsw_ef: int = Field(128, ge=1, description="HNSW search breadth.")


class IndexSettings(BaseModel):
    """How collections are built."""

    batch_size: int = Field(64, ge=1, le=10_000, description="Documents per ingest batch.")
    hnsw_m: int = Field(16, ge=4, description="HNSW edges per node.")
    hnsw_ef_construct: int = Field(100, ge=4, description="HNSW build breadth.")
    indexing_threshold_kb: int = Field(10_000, ge=0, description="Segments above this size get an HNSW index.")


class Settings(BaseSettings):
    """All hyde-tutor settings. Create with ``Settings()`` to read env and ``.env``."""

    model_config = SettingsConfigDict(
        env_prefix="HYDE_",
        env_nested_delimiter="__",
        env_file=".env",
        env_file_encoding="utf-8",
        extra="ignore",
    )

    data_dir: Path = Field(Path(".hyde"), description="Embedded store, caches and metrics live here.")
    qdrant: QdrantSettings = Field(default_factory=QdrantSettings)
    dense: DenseSettings = Field(default_factory=DenseSettings)
    openai: OpenAISettings = Field(default_factory=OpenAISettings)
    sparse: SparseSettings = Field(default_factory=SparseSettings)
    retrieval: RetrievalSettings = Field(default_factory=RetrievalSettings)
    index: IndexSettings = Field(default_factory=IndexSettings)
