"""What one search will do and what its stages hand each other: the plan (the request with every default
filled in), the hypotheses to search, the ranking before rerank; and the error list of the result."""

from __future__ import annotations

from dataclasses import dataclass

from ..llm.generation import TokenUsage
from .conversation_rank import FollowUp
from .hypotheses import Domain, GenerationResult, Hypothesis
from .policy import FusionMode, HydePolicy
from .request import SearchRequest
from .result import FallbackReason, RetrievedDoc


@dataclass(frozen=True, slots=True, kw_only=True)
class Plan:
    """What one search will do, decided before anything runs (the request with every default filled in)."""

    request: SearchRequest
    text: str
    search_text: str
    """What the raw channel searches: the query without its question frame, or for a follow-up the previous
    question and the query."""
    queries: tuple[tuple[str, float], ...] = ()
    """Several searches fused (weighted RRF) into the raw channel: a follow-up alone and with its context
    (:func:`~hyde_tutor.hyde.conversation.conversation_queries`); empty: ``search_text`` alone."""
    top_k: int
    depth: int
    candidates: int
    fusion: FusionMode
    use_hyde: bool
    n_hypotheses: int
    domain: Domain
    want_questions: bool
    has_questions: bool
    policy: HydePolicy
    followup: bool = False
    """Whether the raw channel searches the conversation (the message was read as a follow-up)."""
    follow_up: FollowUp | None = None
    """A follow-up whose three conversation searches the learned ranker orders
    (:mod:`~hyde_tutor.hyde.conversation_rank`); None: they are fused by RRF alone."""

    @property
    def collection(self) -> str:
        return self.request.collection

    @property
    def include_raw(self) -> bool:
        return self.request.include_raw

    @property
    def one_call(self) -> bool:
        return (self.request.generation or self.policy.generation) == "one_call"

    @property
    def lead(self) -> int:
        """How many of the hypotheses' top entries lead the fused ranking: the policy's ``followup_lead`` for a
        follow-up, else none."""
        return self.policy.followup_lead if self.followup else 0

    @property
    def cascade_margin(self) -> float:
        return self.policy.cascade_margin if self.request.cascade_margin is None else self.request.cascade_margin


@dataclass(frozen=True, slots=True)
class Hypotheses:
    """What the search has to search with: generated (or agent-written) hypotheses, or none and why."""

    generated: GenerationResult | None
    skipped: str | None = None
    """``confident``: the cascade skipped generation because the raw ranking was sure."""
    notes: tuple[str, ...] = ()


@dataclass(frozen=True, slots=True)
class Ranked:
    """The ranking the HyDE stage produced (or the raw fallback), before rerank and threshold."""

    docs: list[RetrievedDoc]
    used_hyde: bool
    reason: FallbackReason | None
    notes: tuple[str, ...] = ()
    embed_ms: float = 0.0
    search_ms: float = 0.0


def agent_usage(agent: Hypothesis) -> TokenUsage:
    """An agent-written hypothesis costs no LLM call here: its tokens are part of the agent's own response
    and counted in that run's usage, so the search adds none (labelled ``agent``)."""
    return TokenUsage(0, 0, 0, "agent")


def result_errors(gen: GenerationResult, ranked: Ranked, missing: list[str]) -> list[str]:
    """What went wrong, for ``HydeResult.errors``: an embedding failure first (it decided the fallback),
    then the generation's errors and timeouts, the gate's notes, a missing questions index."""
    timeouts = [f"timeout x{gen.timeouts}"] if gen.timeouts else []
    if ranked.reason == "embed_error":
        return [*ranked.notes, *gen.errors, *timeouts, *missing]
    return [*gen.errors, *timeouts, *ranked.notes, *missing]
