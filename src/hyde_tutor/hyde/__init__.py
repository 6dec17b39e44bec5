"""HyDE retrieval: the policy, the pipeline's stages and :class:`HydeRetriever`, which composes them."""

from .cache import DiskCache, HypothesisCache, MemoryCache, NoCache, make_cache
from .domains import DOMAINS, Domain
from .generators import BackendFailure, GeneratorFactory, GeneratorPool
from .hypotheses import GenerationResult, Hypothesis, HypothesisGenerator
from .pipeline import HydeRetriever, Plan
from .request import SearchRequest
from .policy import (
    AGREEMENT_DEPTH,
    SCORE_FUSION_DEPTH,
    STRONG_MODEL_POLICY,
    WEAK_MODEL_POLICY,
    FusionMode,
    HydeLegs,
    HydePolicy,
)
from .rerank import CrossEncoderReranker, Reranker
from .result import QUESTIONS, RAW, FallbackReason, HydeResult, RetrievedDoc, StageTimings

__all__ = [
    "AGREEMENT_DEPTH",
    "DOMAINS",
    "QUESTIONS",
    "RAW",
    "SCORE_FUSION_DEPTH",
    "STRONG_MODEL_POLICY",
    "WEAK_MODEL_POLICY",
    "BackendFailure",
    "CrossEncoderReranker",
    "DiskCache",
    "Domain",
    "FallbackReason",
    "FusionMode",
    "GeneratorFactory",
    "GenerationResult",
    "GeneratorPool",
    "HydeLegs",
    "HydePolicy",
    "HydeResult",
    "HydeRetriever",
    "Hypothesis",
    "HypothesisCache",
    "HypothesisGenerator",
    "MemoryCache",
    "NoCache",
    "Plan",
    "Reranker",
    "RetrievedDoc",
    "SearchRequest",
    "StageTimings",
    "make_cache",
]
