"""What a HyDE search returns: built once, at the end of the pipeline, and never changed after."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Literal

from .hypotheses import Hypothesis, TokenUsage

FallbackReason = Literal[
    "llm_error", "timeout", "not_recorded", "empty_hypotheses", "off_topic", "no_results", "embed_error", "disabled",
    "search_error",
]
RAW = "raw"
QUESTIONS = "questions"


@dataclass(frozen=True, slots=True)
class RetrievedDoc:
    """One result: ORIGINAL document id, score, payload, and the channels that found it."""

    id: str
    score: float
    payload: dict[str, Any]
    channels: tuple[str, ...] = (RAW,)


@dataclass(frozen=True, slots=True)
class StageTimings:
    """Milliseconds per stage. ``raw`` overlaps ``generate`` (they run in parallel)."""

    raw_ms: float = 0.0
    generate_ms: float = 0.0
    embed_ms: float = 0.0
    search_ms: float = 0.0
    rerank_ms: float = 0.0
    total_ms: float = 0.0


@dataclass(frozen=True, slots=True)
class HydeResult:
    """One search's outcome: the results, whether HyDE shaped them (or why not), and what it cost."""

    query: str
    collection: str
    results: list[RetrievedDoc]
    used_hyde: bool
    fallback_reason: FallbackReason | None
    hypotheses: list[Hypothesis] = field(default_factory=list)
    timings: StageTimings = field(default_factory=StageTimings)
    usage: TokenUsage = field(default_factory=TokenUsage)
    effective_threshold: float | None = None
    errors: list[str] = field(default_factory=list)
    fusion: str = "rrf"
    used_questions: bool = False
    skipped: str | None = None
    """``confident``: the cascade searched raw first, found it sure and made no LLM call."""
    raw_margin: float | None = None
    """The raw ranking's relative top-1 margin (what the cascade decides on)."""

    @property
    def why(self) -> str | None:
        """Why HyDE did not shape the results, in words with the cause (None when it did)."""
        if self.used_hyde:
            return None
        if self.skipped == "confident":
            return "HyDE skipped: the raw ranking was sure (cascade)"
        if self.fallback_reason in (None, "disabled"):
            return "HyDE off"
        detail = self.errors[0] if self.errors else ""
        return f"HyDE fell back ({self.fallback_reason}{': ' + detail if detail else ''})"

    def status(self) -> str:
        """One line for people: ``HyDE, 1 hypothesis, 1 LLM call`` or the :attr:`why` of plain results."""
        if self.used_hyde:
            n = len(self.hypotheses)
            calls = self.usage.requests
            return (f"HyDE, {n} hypothes{'is' if n == 1 else 'es'}"
                    + (f", {calls} LLM call{'s' if calls != 1 else ''}" if calls else ", no LLM call"))
        return f"raw: {self.why}" if self.why != "HyDE off" else "raw (HyDE off)"

    @property
    def llm_calls(self) -> int:
        """LLM calls this search made (0 for plain search, the cascade's skips, cached or agent hypotheses)."""
        return self.usage.requests
