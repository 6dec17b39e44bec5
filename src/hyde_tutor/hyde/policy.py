"""How far hypotheses may move the raw query's ranking: one frozen policy per kind of model."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

from ..config import HydeSettings
from .hypotheses import DEFAULT_HYPOTHESES

FusionMode = Literal["rrf", "max", "mean", "score"]
HydeLegs = Literal["both", "dense", "sparse"]
"""Which legs of the hybrid search a hypothesis replaces the query in (peer libraries: dense only)."""
AGREEMENT_DEPTH = 10
SCORE_FUSION_DEPTH = 30  # score fusion reads each channel this deep, so a missing document means "far down"


@dataclass(frozen=True, slots=True)
class HydePolicy:
    """How far hypotheses may move the raw query's ranking.

    A capable model (API, compatible server, or its replayed recordings) writes 4 hypotheses (rule,
    example, mistake, contrast), fused with the raw query by score: each channel's hybrid scores are
    summed, the raw query at weight 1 and the hypotheses sharing weight 6. Chosen on recorded
    capable-model hypotheses (README, "HyDE with a capable model"): it keeps ``max``'s gain on hard
    questions and ``rrf``'s on the easy sets, and the weight sits on a plateau (5.5 to 10 score the same).

    The embedded 1.5B model's hypotheses are mostly off-topic, so for it: write one hypothesis (each
    costs 10-19 s of CPU, and three scored below raw), drop it if it shares fewer than 3 of its top 10
    with the raw query's top 10, and fuse by score with the hypothesis at half the query's weight, so
    it reorders near-ties but cannot overtake a confident raw hit (README, "HyDE with the embedded model").
    And HyDE is off by default with it (``enabled``): measured, it costs 10-40 s per query and matches
    plain retrieval's quality; a call, the experiment or ``HYDE_HYDE__ENABLED=true`` can still turn it on.
    """

    n_hypotheses: int = DEFAULT_HYPOTHESES
    fusion: FusionMode = "rrf"
    hypothesis_weight: float = 1.0
    min_agreement: int = 0
    protect_top: int = 0
    raw_weight: float = 1.0
    rrf_k: int = 60
    legs: HydeLegs = "both"
    enabled: bool = True
    """Whether a search uses HyDE when neither the call nor an experiment decides."""

    @classmethod
    def resolve(cls, settings: HydeSettings, weak_model: bool = False) -> HydePolicy:
        """Settings that are set win; unset ones come from the default for this kind of model."""
        base = WEAK_MODEL_POLICY if weak_model else STRONG_MODEL_POLICY
        return cls(
            n_hypotheses=settings.n_hypotheses or base.n_hypotheses,
            fusion=settings.fusion or base.fusion,
            hypothesis_weight=base.hypothesis_weight if settings.hypothesis_weight is None else settings.hypothesis_weight,
            min_agreement=base.min_agreement if settings.min_agreement is None else settings.min_agreement,
            protect_top=settings.protect_top,
            raw_weight=base.raw_weight if settings.raw_weight is None else settings.raw_weight,
            rrf_k=settings.rrf_k or base.rrf_k,
            legs=settings.legs or base.legs,
            enabled=base.enabled if settings.enabled is None else settings.enabled,
        )


STRONG_MODEL_POLICY = HydePolicy(n_hypotheses=4, fusion="score", hypothesis_weight=6.0)
WEAK_MODEL_POLICY = HydePolicy(n_hypotheses=1, fusion="score", hypothesis_weight=0.5, min_agreement=3, enabled=False)
