"""One typed settings object for the whole package.

Values come from (highest first): keyword arguments, environment variables with
the ``HYDE_`` prefix (nested keys joined with ``__``, e.g. ``HYDE_QDRANT__URL``),
a ``.env`` file in the working directory, then the defaults below.
``.env.example`` documents every key.
"""

from __future__ import annotations

import os
import re
from pathlib import Path
from typing import Annotated, Any, Literal

from pydantic import AfterValidator, BaseModel, Field, SecretStr, model_validator
from pydantic_settings import BaseSettings, SettingsConfigDict

from ..errors import CollectionNameError
from .serving import JudgeSettings, ServerSettings

_COLLECTION_NAME = re.compile(r"[A-Za-z0-9_][A-Za-z0-9_.-]{0,127}")


def validate_collection_name(name: Any) -> str:
    """A collection name: letters, digits, ``_``, ``-`` and ``.`` (not first), at most 128 characters, no
    ``..``. Names become folder names of the embedded store, so ``../x`` or ``/tmp/x`` must never pass."""
    if not isinstance(name, str) or not _COLLECTION_NAME.fullmatch(name) or ".." in name:
        raise CollectionNameError(
            f"Bad collection name {name!r}: use letters, digits, '_', '-' and '.' (not first, no '..'), "
            "at most 128 characters, e.g. 'grammar' or 'my_faq'."
        )
    return name


CollectionName = Annotated[str, AfterValidator(validate_collection_name)]
"""A collection name in settings: checked when the settings load, not when it first reaches a store."""


class SchemaSettings(BaseModel):
    """One collection's schema, as settings (``HYDE_SCHEMAS`` is a JSON object of these)."""

    dense_vector: str = Field("dense", description="Name of the dense vector in the collection.")
    sparse_vector: str | None = Field("sparse", description="Name of the sparse vector; null = dense only.")
    sparse_encoder: Literal["kiwi", "fastembed"] = Field(
        "kiwi", description="How query sparse vectors are made: kiwi (hyde-tutor's analyser) or fastembed "
        "(Qdrant/bm25, as SparseTextEmbedding makes them).",
    )
    fastembed_language: str = Field("english", description="fastembed BM25 stemmer language (english, russian, ...).")
    id_field: str | None = Field(None, description="Payload field with the document id; null = the point id.")
    title_fields: list[str] = Field(default_factory=list, description="Payload fields that name a result.")
    text_fields: list[str] = Field(default_factory=list, description="Payload fields with the result's text.")


class QdrantSettings(BaseModel):
    """Where vectors live. No URL and ``local=False`` means the embedded qdrant-edge engine."""

    url: str | None = Field(None, description="Qdrant server/cluster URL; switches to qdrant-client.")
    api_key: SecretStr | None = Field(None, description="API key for the Qdrant server.")
    local: bool = Field(False, description="Use qdrant-client's local (in-process) mode under data_dir.")
    timeout_s: float = Field(10.0, gt=0, description="Request timeout for a Qdrant server.")


class DenseSettings(BaseModel):
    """Dense embedding model."""

    provider: Literal["use", "sentence-transformers", "openai", "cohere", "voyageai"] = Field(
        "use", description="use = USE-multilingual-v3 (offline, ko+ru); cohere/voyageai need their SDK extra "
        "and CO_API_KEY / VOYAGE_API_KEY.",
    )
    model: str | None = Field(
        None, description="Model name or path (sentence-transformers / openai / cohere / voyageai); None = provider "
        "default (cohere and voyageai have none).",
    )
    batch_size: int = Field(64, ge=1, le=4096, description="Texts per embedding call.")
    threads: int = Field(1, ge=1, le=64, description="BLAS threads for the USE encoder (1: under concurrent searches "
                         "the other core is the search process's; more speed up large ingest batches).")
    process: bool = Field(
        True, description="Run the USE encoder in a child process, so its CPU work does not wait for this "
        "process's GIL under concurrent searches (false: in this process, one process fewer).",
    )
    embed_timeout_s: float = Field(
        10.0, gt=0, le=600, description="The longest a search waits for its query's vectors (per 64 texts); an "
        "embedder process that does not answer within it is killed and replaced, and the search fails cleanly.",
    )


class OpenAISettings(BaseModel):
    """OpenAI or any OpenAI-compatible server: the one key for the LLM and for embeddings."""

    api_key: SecretStr | None = Field(
        None, description="The OpenAI key, for the LLM and for embeddings (falls back to OPENAI_API_KEY)."
    )
    base_url: str | None = Field(None, description="Base URL of an OpenAI-compatible embeddings server.")
    timeout_s: float = Field(30.0, gt=0, description="Request timeout (seconds) of the OpenAI embeddings client.")

    def key(self) -> str | None:
        """The key in use: ``api_key``, else the ``OPENAI_API_KEY`` environment variable."""
        return self.api_key.get_secret_value() if self.api_key else os.environ.get("OPENAI_API_KEY") or None


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


_SECRET_PARAMS = ("key", "token", "secret", "password", "auth", "sig")


def redact_url(url: str | None) -> str:
    """``url`` safe to print or log: a password in it and secret-looking query values become ``***``
    (``http://user:pw@host/v1?api_key=x`` -> ``http://user:***@host/v1?api_key=***``)."""
    if not url:
        return ""
    from urllib.parse import parse_qsl, urlencode, urlsplit, urlunsplit

    try:
        parts = urlsplit(url)
    except ValueError:
        return "<unparseable URL>"
    netloc = parts.netloc
    if "@" in netloc:
        userinfo, host = netloc.rsplit("@", 1)
        user = userinfo.split(":", 1)[0]
        netloc = f"{user}:***@{host}" if ":" in userinfo else f"***@{host}"
    query = urlencode([(k, "***" if any(s in k.lower() for s in _SECRET_PARAMS) else v)
                       for k, v in parse_qsl(parts.query, keep_blank_values=True)], safe="*")
    return urlunsplit((parts.scheme, netloc, parts.path, query, parts.fragment))


class LLMSettings(BaseModel):
    """Which LLM writes hypotheses (and drives the chat agent)."""

    provider: Literal["auto", "openai", "openai-compatible", "local", "replay"] = Field(
        "auto", description="auto: base_url set -> openai-compatible; OpenAI key -> openai; else local. "
        "replay serves recorded generations (`hyde-tutor record`) and is never chosen by auto.",
    )
    recordings: str | None = Field(
        None, description="replay provider: comma-separated JSONL files or folders; unset = data/recordings/*.jsonl.",
    )
    model: str = Field("gpt-4.1", description="Model name for OpenAI / the compatible server.")
    base_url: str | None = Field(None, description="OpenAI-compatible server (Ollama, vLLM, llama.cpp server).")
    local_model: str = Field(
        "qwen2.5-1.5b", description="Embedded GGUF: qwen2.5-1.5b | smollm2-135m | path to a .gguf file."
    )
    temperature: float = Field(0.7, ge=0, le=2, description="Sampling temperature for hypotheses.")
    seed: int | None = Field(0, description="Sampling seed (None = random).")
    max_tokens: int = Field(200, ge=8, le=4096, description="Token cap per hypothesis.")
    n_ctx: int = Field(2048, ge=256, description="Context window of the embedded model.")
    threads: int = Field(2, ge=1, le=64, description="CPU threads of the embedded model.")
    chat_format: str | None = Field(
        "chatml-function-calling", description="llama.cpp chat format (this one lets the embedded model call tools)."
    )
    startup_timeout_s: float = Field(120.0, gt=0, description="Wait this long for the embedded server to load.")

    @model_validator(mode="before")
    @classmethod
    def _no_separate_llm_key(cls, data: Any) -> Any:
        if isinstance(data, dict) and "api_key" in data:
            data["api_key"] = "**********"  # the error shows its input: never echo the refused key
            raise ValueError(
                "HYDE_LLM__API_KEY (llm.api_key) was replaced by HYDE_OPENAI__API_KEY (openai.api_key): one key "
                "for the LLM and for embeddings. Rename it in your environment or .env."
            )
        return data


class HydeSettings(BaseModel):
    """The HyDE pipeline."""

    enabled: bool | None = Field(
        None, description="Default for use_hyde when neither the call nor an experiment decides; unset = on with a "
        "capable model (API, compatible server, replay), off with the embedded local model (slow, no gain).",
    )
    n_hypotheses: int | None = Field(
        None, ge=1, le=8, description="Hypotheses per query, each from another perspective; unset = the policy's "
        "(HydePolicy: 1, for capable and embedded models alike; chosen for quality per LLM call).",
    )
    hypothesis_length: int = Field(512, ge=32, le=8192, description="Characters per hypothesis after normalisation.")
    exact_length: bool = Field(False, description="Pad hypotheses to exactly hypothesis_length.")
    fusion: Literal["rrf", "max", "mean", "score"] | None = Field(
        None, description="How raw and hypothesis channels are fused; unset = the policy's (score).",
    )
    rrf_k: int | None = Field(None, ge=1, description="RRF k across channels; unset = the policy's.")
    raw_weight: float | None = Field(
        None, ge=0, description="Weight of the raw-query channel (rrf and score fusion); unset = the policy's.")
    legs: Literal["both", "dense", "sparse"] | None = Field(
        None, description="Which hybrid legs a hypothesis searches with (the query keeps the other); unset = both.")
    hypothesis_weight: float | None = Field(
        None, ge=0, description="Weight of the hypothesis channels (each gets weight/N in score fusion); unset = the "
        "policy's: 3 for the Korean corpora and 1 for other collections with capable models, 0.5 embedded.",
    )
    min_agreement: int | None = Field(
        None, ge=0, le=10, description="Use a hypothesis only when at least this many of its top 10 are also in "
        "the raw query's top 10 (drops off-topic ones); unset = 3 with the embedded local model, 0 with API models.",
    )
    protect_top: int = Field(
        0, ge=0, le=100, description="Keep the raw query's top N on top of fused HyDE results (0 = off).",
    )
    followup_lead: int | None = Field(
        None, ge=0, le=10, description="A message read as a follow-up: the hypotheses' top N lead the fused results "
        "(the elliptical message cannot outvote them); unset = the policy's: 1 capable, 0 embedded.")
    named_lead: int | None = Field(
        None, ge=0, le=100, description="A message read as a follow-up: the entry whose pattern the hypothesis names "
        "in its header (grammar: «Конструкция: …») goes first when it is in the fused top N (0 = off; a reranker "
        "runs after it); unset = the policy's: 10 capable, 0 embedded.")
    named_lead_new: int | None = Field(
        None, ge=0, le=100, description="The same for a message read as a new question (0 = off); unset = the "
        "policy's: 10 capable, 0 embedded.")
    timeout_s: float = Field(60.0, gt=0, description="Per-call timeout of hypothesis generation.")
    generation: Literal["separate", "one_call"] | None = Field(
        None, description="separate = one LLM call per hypothesis (concurrent); one_call = ONE call returns all N "
        "(the system prompt sent once); unset = the policy's.",
    )
    cascade_margin: float | None = Field(
        None, ge=0, le=1, description="Cascade: skip generation when the raw search is sure, i.e. its top-1 score "
        "leads the second by at least this share of the top-1 score (0 = always generate); unset = the policy's.",
    )
    agent_hypothesis: Literal["replace", "add"] = Field(
        "replace", description="A hypothesis the calling agent wrote in its tool call: replace = no generation "
        "call; add = generated hypotheses are searched too.",
    )
    min_hangul_chars: int | None = Field(
        None, ge=0, description="Drop hypotheses with fewer Hangul characters (0 = off); unset = the collection's "
        "domain decides: 4 for grammar and docs (Korean corpora), 0 for passage.",
    )
    domains: dict[CollectionName, Literal["grammar", "docs", "passage"]] = Field(
        default_factory=lambda: {"grammar": "grammar", "docs": "docs"},
        description="Collection -> hypothesis domain (prompt, perspectives, guard), as JSON: "
        '\'{"grammar": "grammar", "my_faq": "passage"}\'.',
    )
    default_domain: Literal["grammar", "docs", "passage"] = Field(
        "passage", description="Domain of a collection not named in domains: passage = the paper's generic prompt.",
    )
    strip_prompt_echo: bool = Field(
        True, description="Remove sentences a hypothesis copied from the prompt (small models copy its sample entry)."
    )
    cache: Literal["memory", "disk", "off"] = Field("memory", description="Hypothesis cache; disk = under data_dir.")
    rerank: bool = Field(False, description="Rerank fused results with a CrossEncoder against the original query.")
    reranker_model: str | None = Field(None, description="Local CrossEncoder folder (no weights ship offline).")
    rerank_candidates: int = Field(20, ge=1, le=200, description="How many fused results the reranker sees.")
    threshold_start: float = Field(0.0, ge=0, le=1, description="Relative score threshold to start from (0 = off).")
    threshold_step: float = Field(0.1, gt=0, le=1, description="Step down by this much until enough results.")
    threshold_floor: float = Field(0.0, ge=0, le=1, description="Never go below this relative threshold.")
    threshold_min_results: int = Field(3, ge=1, description="Step the threshold down until this many results pass.")
    followup_request_version: int | None = Field(
        None, ge=1, description="Version of the follow-up request template (prompts/hypothesis_followup_request.v<N>"
        ".md); unset = the newest. 1 = the template the older follow-up recordings answered.",
    )


class QuestionSettings(BaseModel):
    """Write-time HyDE: learner questions generated per document at ingest, searched as a channel."""

    enabled: bool = Field(False, description="Default for use_questions (needs `ingest --questions K` first).")
    k: int = Field(3, ge=1, le=10, description="Questions per document written by `ingest --questions`.")
    max_tokens: int = Field(100, ge=16, le=2048, description="Token budget of one question-generation call.")
    max_document_chars: int = Field(600, ge=100, le=20000, description="Document characters shown to the LLM.")
    timeout_s: float = Field(120.0, gt=0, description="Per-document timeout of question generation.")
    concurrency: int = Field(4, ge=1, le=64, description="Concurrent generation calls (the embedded model runs 1).")
    weight: float = Field(1.0, ge=0, description="RRF weight of the questions channel.")


class ExperimentSettings(BaseModel):
    """The HyDE vs raw A/B experiment."""

    enabled: bool = Field(False, description="Route subjects to arms (an operator starts an experiment: set true); "
                          "false = everyone gets hyde.enabled.")
    name: str = Field("hyde-vs-raw", description="Experiment name (part of the assignment hash).")
    hyde_share: float = Field(0.5, ge=0, le=1, description="Share of subjects in the HyDE arm (0.9 = 90/10).")
    salt: str = Field("", description="Change to reshuffle assignments without renaming the experiment.")
    explicit_wins: bool = Field(
        False, description="Debugging: a caller's explicit use_hyde beats an enrolled subject's arm (recorded as an "
        "override). Off: the arm decides and the request is only recorded.",
    )
    arms: str = Field(
        "raw,hyde",
        description="Comma-separated arms from raw, hyde, questions, hyde+questions. Two arms raw,hyde split by "
        "hyde_share; any other list splits evenly.",
    )


class MonitorSettings(BaseModel):
    """Per-retrieval metrics."""

    jsonl: bool = Field(True, description="Append one JSON line per retrieval to data_dir/metrics.jsonl.")
    window: int = Field(1000, ge=10, description="Rolling window (records per arm) for aggregates.")
    logfire_token: SecretStr | None = Field(None, description="Send spans to Logfire when set; offline otherwise.")


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
    log_level: Literal["DEBUG", "INFO", "WARNING", "ERROR"] = Field(
        "WARNING", description="hyde_tutor's log level on stderr (the CLI's --verbose sets INFO).")
    qdrant: QdrantSettings = Field(default_factory=QdrantSettings)
    dense: DenseSettings = Field(default_factory=DenseSettings)
    openai: OpenAISettings = Field(default_factory=OpenAISettings)
    sparse: SparseSettings = Field(default_factory=SparseSettings)
    retrieval: RetrievalSettings = Field(default_factory=RetrievalSettings)
    index: IndexSettings = Field(default_factory=IndexSettings)
    llm: LLMSettings = Field(default_factory=LLMSettings)
    hyde: HydeSettings = Field(default_factory=HydeSettings)
    questions: QuestionSettings = Field(default_factory=QuestionSettings)
    experiment: ExperimentSettings = Field(default_factory=ExperimentSettings)
    monitor: MonitorSettings = Field(default_factory=MonitorSettings)
    judge: JudgeSettings = Field(default_factory=JudgeSettings)
    schemas: dict[CollectionName, SchemaSettings] = Field(
        default_factory=dict, description="Collections hyde-tutor did not build: vector names, sparse encoder, "
        "payload fields (JSON object: collection -> schema).",
    )
    server: ServerSettings = Field(default_factory=ServerSettings)
