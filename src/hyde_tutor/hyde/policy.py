"""How far hypotheses may move the raw query's ranking: one frozen policy per kind of model."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

from ..config import HydeSettings
from .hypotheses import DEFAULT_HYPOTHESES

FusionMode = Literal["rrf", "max", "mean", "score"]
HydeLegs = Literal["both", "dense", "sparse"]
GenerationMode = Literal["separate", "one_call"]
"""``separate``: one LLM call per hypothesis, concurrent; ``one_call``: one call returns all N."""
AgentHypothesisMode = Literal["replace", "add"]
"""Which legs of the hybrid search a hypothesis replaces the query in (peer libraries: dense only)."""
AGREEMENT_DEPTH = 10
SCORE_FUSION_DEPTH = 30  # score fusion reads each channel this deep, so a missing document means "far down"


@dataclass(frozen=True, slots=True)
class HydePolicy:
    """How far hypotheses may move the raw query's ranking.

    A capable model (API, compatible server, or its replayed recordings) writes ONE hypothesis per search,
    fused with the raw query by score (each channel's hybrid scores summed, the raw query at weight 1, the
    hypotheses sharing ``hypothesis_weight``): weight 3 on the Korean corpora, 1 on other collections
    (:data:`DOMAIN_POLICIES`). Chosen on recorded capable-model generations for quality per LLM call
    (README, "HyDE: quality per cost"): N=4 separate calls scored at most 0.006 nDCG@10 higher for four
    times the calls. ``generation="one_call"`` (N hypotheses in one call) and the cascade
    (``cascade_margin``) are there, measured, and off by default: neither beat one hypothesis per call.

    The embedded 1.5B model's hypotheses are mostly off-topic, so for it: write one hypothesis (each
    costs 10-19 s of CPU, and three scored below raw), drop it if it shares fewer than 3 of its top 10
    with the raw query's top 10, and fuse by score with the hypothesis at half the query's weight, so
    it reorders near-ties but cannot overtake a confident raw hit (docs/MEASUREMENTS.md, "HyDE with the embedded local models").
    And HyDE is off by default with it (``enabled``): measured, it costs 10-40 s per query and matches
    plain retrieval's quality; a call, the experiment or ``HYDE_HYDE__ENABLED=true`` can still turn it on.
    """

    n_hypotheses: int = DEFAULT_HYPOTHESES
    fusion: FusionMode = "score"
    hypothesis_weight: float = 3.0
    min_agreement: int = 0
    protect_top: int = 0
    raw_weight: float = 1.0
    rrf_k: int = 60
    legs: HydeLegs = "both"
    enabled: bool = True
    """Whether a search uses HyDE when neither the call nor an experiment decides."""
    generation: GenerationMode = "separate"
    cascade_margin: float = 0.0
    """Skip generation when the raw ranking's relative top-1 margin is at least this (0 = always generate)."""
    agent_hypothesis: AgentHypothesisMode = "replace"
    """An agent-written hypothesis replaces generation, or is searched beside generated ones (``add``)."""
    followup_lead: int = 1
    """For a message read as a follow-up, the hypotheses' top N lead the fused ranking: a hypothesis written from
    the conversation names what the elliptical message cannot, and the message's own search (or the conversation's)
    must not outvote it (issue 39; chosen on the tuning half of the conversation sets)."""
    named_lead: int = 10
    """For a message read as a follow-up, the entry whose pattern a hypothesis names in its header (the domain's
    ``name_header``, e.g. «Конструкция: -고 싶어 하다») goes first when the fused ranking has it in its top N: the
    hypothesis said which construction the message needs, and a lexically nearer entry must not win on its words
    (issue 39; on the tuning half of the conversation sets it put the right entry first in 4 more follow-ups and
    1 fewer at N = 5; N = 10 since 2026-11-29: 5 more follow-ups right over every dev set and recording, none lost,
    where N = 20 lost one of the held-out half; new questions have their own depth, ``named_lead_new``). 0 = off."""
    named_lead_new: int = 10
    """The same for a message read as a new question (the hypothesis is then written from the message alone and
    names its construction as surely). Chosen on the dev sets of issue 39 (the tuning half of the conversation
    sets and the three outside sets, all used for corpus or policy choices by then): one more new question right
    in both recordings of one set, none lost in 130 searches, the held-out half unchanged; on the two sets written
    afterwards (``data/eval/fresh_followups4``, ``fresh_followups5``) it changed nothing. 10 since 2026-11-29, with
    ``named_lead`` (no new question of any set changed at 10 or 20). 0 = off."""

    @classmethod
    def resolve(cls, settings: HydeSettings, weak_model: bool = False, domain: str | None = None) -> HydePolicy:
        """Settings that are set win; unset ones come from the default for this kind of model and, for a
        capable model, this domain (:data:`DOMAIN_POLICIES`)."""
        base = WEAK_MODEL_POLICY if weak_model else DOMAIN_POLICIES.get(domain or "", STRONG_MODEL_POLICY)
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
            generation=settings.generation or base.generation,
            cascade_margin=base.cascade_margin if settings.cascade_margin is None else settings.cascade_margin,
            agent_hypothesis=settings.agent_hypothesis,
            followup_lead=base.followup_lead if settings.followup_lead is None else settings.followup_lead,
            named_lead=base.named_lead if settings.named_lead is None else settings.named_lead,
            named_lead_new=base.named_lead_new if settings.named_lead_new is None else settings.named_lead_new,
        )


STRONG_MODEL_POLICY = HydePolicy()
"""A capable model on the Korean tutor's corpora (grammar, docs): ONE hypothesis, fused by score at weight 3.
Chosen on recorded capable-model generations as the cheapest policy near the old default (N=4 separate
calls, weight 6): 1 LLM call and 25 % of its tokens per search, nDCG@10 0.984 / 0.998 / 0.973 on grammar,
docs and the hold-out against 0.990 / 0.999 / 0.978 (README, "HyDE: quality per cost")."""
PASSAGE_POLICY = HydePolicy(n_hypotheses=1, fusion="score", hypothesis_weight=1.0)
"""A capable model on any other collection (the paper's generic passage prompt): ONE hypothesis at the
query's weight. On a SQuAD sample (data/eval/passage_en) it lifts nDCG@10 from 0.932 (raw) to 0.958, where the
Korean default (weight 6, N=4) fell below raw (0.923): the hypotheses must not outvote the query there."""
DOMAIN_POLICIES: dict[str, HydePolicy] = {"grammar": STRONG_MODEL_POLICY, "docs": STRONG_MODEL_POLICY,
                                          "passage": PASSAGE_POLICY}
WEAK_MODEL_POLICY = HydePolicy(n_hypotheses=1, fusion="score", hypothesis_weight=0.5, min_agreement=3, enabled=False,
                               followup_lead=0, named_lead=0, named_lead_new=0)
