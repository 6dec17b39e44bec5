"""HyDE retrieval: the policy, the pipeline's stages and :class:`HydeRetriever`, which composes them."""

from .generators import BackendFailure, GeneratorFactory, GeneratorPool
from .pipeline import HydeRetriever, Plan
from .policy import (
    AGREEMENT_DEPTH,
    SCORE_FUSION_DEPTH,
    STRONG_MODEL_POLICY,
    WEAK_MODEL_POLICY,
    FusionMode,
    HydeLegs,
    HydePolicy,
)
from .result import QUESTIONS, RAW, FallbackReason, HydeResult, RetrievedDoc, StageTimings

__all__ = [
    "AGREEMENT_DEPTH",
    "QUESTIONS",
    "RAW",
    "SCORE_FUSION_DEPTH",
    "STRONG_MODEL_POLICY",
    "WEAK_MODEL_POLICY",
    "BackendFailure",
    "FallbackReason",
    "FusionMode",
    "GeneratorFactory",
    "GeneratorPool",
    "HydeLegs",
    "HydePolicy",
    "HydeResult",
    "HydeRetriever",
    "Plan",
    "RetrievedDoc",
    "StageTimings",
]
