"""The HyDE retrieval pipeline: :class:`HydeRetriever` composes the stages of ``stages.py``.

1. validate the query and plan the search (HyDE on/off: the call, else the policy; depth; fusion);
2. the raw-query channel and the hypothesis generation run IN PARALLEL;
3. all hypotheses embedded in one batch, all their hybrid searches in one batched store call;
4. off-topic hypotheses dropped (agreement with the raw channel), channels fused (rrf | max | mean | score);
5. optional rerank against the original query, adaptive threshold;
6. any HyDE failure falls back to the raw results with a recorded reason; the result is built once.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from ..config import HydeSettings, QuestionSettings, Settings
from ..errors import CollectionNotFoundError
from .hypotheses import Domain, GenerationResult, HypothesisGenerator
from .cache import make_cache
from ..telemetry import logfire
from ..corpus.rendering import payload_text
from .rerank import CrossEncoderReranker, Reranker
from ..retrieval.retriever import Retriever
from ..retrieval.store import Hit, questions_collection
from ..retrieval.validation import validate_query, validate_top_k
from . import stages
from .generators import GeneratorFactory, GeneratorPool
from .policy import AGREEMENT_DEPTH, SCORE_FUSION_DEPTH, FusionMode, HydePolicy
from .result import RAW, FallbackReason, HydeResult, RetrievedDoc, StageTimings

_log = logging.getLogger("hyde_tutor")


@dataclass(frozen=True, slots=True)
class Plan:
    """What one search will do, decided before anything runs."""

    collection: str
    text: str
    top_k: int
    depth: int
    candidates: int
    fusion: FusionMode
    use_hyde: bool
    n_hypotheses: int
    domain: Domain
    include_raw: bool
    want_questions: bool
    has_questions: bool


@dataclass(frozen=True, slots=True)
class Ranked:
    """The ranking the HyDE stage produced (or the raw fallback), before rerank and threshold."""

    docs: list[RetrievedDoc]
    used_hyde: bool
    reason: FallbackReason | None
    notes: tuple[str, ...] = ()
    embed_ms: float = 0.0
    search_ms: float = 0.0


class HydeRetriever:
    """HyDE on top of a :class:`Retriever`. Generators are created lazily, so plain searches never load an LLM."""

    def __init__(
        self,
        retriever: Retriever,
        generator_factory: GeneratorFactory,
        settings: HydeSettings | None = None,
        *,
        reranker: Reranker | None = None,
        domains: Mapping[str, Domain] | None = None,
        questions: QuestionSettings | None = None,
        weak_model: bool = False,
    ) -> None:
        self.retriever = retriever
        self.settings = settings or HydeSettings()
        self.questions = questions or QuestionSettings()
        self.policy = HydePolicy.resolve(self.settings, weak_model)
        self.reranker = reranker
        self.domains: dict[str, Domain] = dict(self.settings.domains if domains is None else domains)
        self.generators = GeneratorPool(generator_factory)

    @property
    def weights(self) -> stages.Weights:
        """Channel weights, read from the policy and question settings in force."""
        return stages.Weights.of(self.policy, self.questions.weight)

    @classmethod
    def from_settings(cls, settings: Settings, retriever: Retriever | None = None) -> HydeRetriever:
        """Wire everything from settings; the LLM backend starts on the first HyDE search."""
        from ..llm.backends import describe_backend, make_llm, resolve_provider

        cache = make_cache(settings.hyde.cache, settings.data_dir)
        backends: list[Any] = []

        def factory(domain: Domain) -> HypothesisGenerator:
            if not backends:
                backends.append(make_llm(settings))
                instance.closers.append(backends[0].close)
            return HypothesisGenerator.for_backend(backends[0], domain, hyde=settings.hyde, llm=settings.llm, cache=cache)

        hyde = settings.hyde
        reranker = CrossEncoderReranker(hyde.reranker_model) if hyde.rerank and hyde.reranker_model else None
        _log.info("hyde-tutor LLM backend for HyDE: %s", describe_backend(settings))
        instance = cls(retriever or Retriever.from_settings(settings), factory, hyde, reranker=reranker,
                       questions=settings.questions, weak_model=resolve_provider(settings) == "local")
        return instance

    @property
    def closers(self) -> list[Callable[[], None]]:
        """Closers of what the generators started (the LLM backend)."""
        return self.generators.closers

    def close(self) -> None:
        self.generators.close()
        self.retriever.close()

    def __enter__(self) -> HydeRetriever:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def domain_of(self, collection: str, domain: Domain | None = None) -> Domain:
        """The hypothesis domain for a search: the caller's (a tool knows it searches grammar), else the
        collection's in ``HYDE_HYDE__DOMAINS``, else ``default_domain``."""
        return domain or self.domains.get(collection, self.settings.default_domain)

    def generator(self, collection: str, domain: Domain | None = None) -> HypothesisGenerator:
        """The collection's hypothesis generator, built on first use (this may start the LLM backend and
        block for seconds; see :class:`GeneratorPool`)."""
        return self.generators.get(self.domain_of(collection, domain))

    def _fuse(self, channels: Mapping[str, list[Hit]], fusion: FusionMode) -> list[RetrievedDoc]:
        return stages.fuse(channels, fusion, self.weights)

    async def search(
        self,
        collection: str,
        query: Any,
        *,
        top_k: int | None = None,
        use_hyde: bool | None = None,
        n_hypotheses: int | None = None,
        fusion: FusionMode | None = None,
        include_raw: bool = True,
        rerank_candidates: int | None = None,
        use_questions: bool | None = None,
        domain: Domain | None = None,
    ) -> HydeResult:
        """Run the pipeline for one query. Raises only for bad input or a failing store, never for HyDE.

        ``rerank_candidates`` overrides how many fused results the reranker (if configured) scores.
        ``use_questions`` adds the write-time questions channel (``ingest --questions K``); a collection
        without questions simply skips it (noted in ``errors``). ``domain`` picks the hypothesis domain
        (the tools pass ``grammar`` / ``docs``); unset, the collection's (:meth:`domain_of`).
        """
        with logfire.span("hyde.search {collection}", collection=collection) as span:
            started = time.perf_counter()
            plan = await self._plan(collection, query, top_k, use_hyde, n_hypotheses, fusion, include_raw,
                                    rerank_candidates, use_questions, domain)
            result = await self._run(plan, started)
            span.set_attributes({"used_hyde": result.used_hyde, "fallback_reason": result.fallback_reason or "",
                                 "n_hypotheses": len(result.hypotheses), "results": len(result.results),
                                 "used_questions": result.used_questions})
            return result

    async def search_many(self, collection: str, texts: Sequence[str], *, concurrency: int = 4,
                          **kwargs: Any) -> list[HydeResult]:
        """:meth:`search` for each text, ``concurrency`` at a time; results in the order of ``texts``."""
        gate = asyncio.Semaphore(concurrency)

        async def one(text: str) -> HydeResult:
            async with gate:
                return await self.search(collection, text, **kwargs)

        return list(await asyncio.gather(*(one(t) for t in texts)))

    async def _plan(
        self, collection: str, query: Any, top_k: int | None, use_hyde: bool | None, n_hypotheses: int | None,
        fusion: FusionMode | None, include_raw: bool, rerank_candidates: int | None, use_questions: bool | None,
        domain: Domain | None,
    ) -> Plan:
        text = validate_query(query, self.retriever.settings.max_query_chars)
        top_k = validate_top_k(top_k if top_k is not None else self.retriever.settings.top_k)
        fusion = fusion or self.policy.fusion
        if not self.retriever.is_checked(collection):  # the first time reads the collection's files: off the loop
            await asyncio.to_thread(self.retriever.check_collection, collection)
        candidates = rerank_candidates or self.settings.rerank_candidates
        depth = max(top_k, candidates if self.reranker else top_k, AGREEMENT_DEPTH)
        if fusion == "score":
            depth = max(depth, SCORE_FUSION_DEPTH)
        want_questions = self.questions.enabled if use_questions is None else bool(use_questions)
        return Plan(collection, text, top_k, depth, candidates, fusion,
                    use_hyde=self.policy.enabled if use_hyde is None else bool(use_hyde),
                    n_hypotheses=n_hypotheses or self.policy.n_hypotheses, domain=self.domain_of(collection, domain),
                    include_raw=include_raw, want_questions=want_questions,
                    has_questions=want_questions and self._has_questions(collection))

    async def _run(self, plan: Plan, started: float) -> HydeResult:
        """The stages in order; reads like the diagram in ``stages.py``."""
        raw_task = asyncio.create_task(asyncio.to_thread(
            stages.search_raw, self.retriever, plan.collection, plan.text, plan.depth, plan.has_questions))
        generated = (await self.generators.generate(plan.domain, plan.text, plan.n_hypotheses, self.settings.timeout_s)
                     if plan.use_hyde else None)
        raw = await raw_task
        ranked = await self._rank(plan, raw, generated)
        docs, rerank_ms = await self._rerank(plan, ranked.docs)
        kept = stages.threshold(docs, plan.top_k, self.settings)
        gen = generated or GenerationResult()
        missing = ([f"no questions for {plan.collection!r} (run `hyde-tutor ingest --questions K`)"]
                   if plan.want_questions and not plan.has_questions else [])
        return HydeResult(
            plan.text, plan.collection, kept.docs, ranked.used_hyde, ranked.reason,
            hypotheses=list(gen.hypotheses), usage=gen.usage, effective_threshold=kept.threshold,
            errors=_errors(gen, ranked, missing),
            timings=StageTimings(raw.ms, gen.seconds * 1000, ranked.embed_ms, ranked.search_ms, rerank_ms,
                                 (time.perf_counter() - started) * 1000),
            fusion=plan.fusion, used_questions=plan.has_questions,
        )

    async def _rank(self, plan: Plan, raw: stages.RawChannel, generated: GenerationResult | None) -> Ranked:
        """Hypothesis channels → gate → fusion; the raw ranking with a reason when any step leaves nothing."""
        if generated is None:
            return self._fallback(raw, "disabled")
        if generated.failure_reason is not None:
            return self._fallback(raw, generated.failure_reason)  # type: ignore[arg-type]
        found = await asyncio.to_thread(stages.search_hypotheses, self.retriever, plan.collection,
                                        generated.hypotheses, raw.encoding, self.policy, plan.fusion, plan.depth)
        if found.error is not None:
            return self._fallback(raw, "embed_error", (found.error,))
        gated = stages.gate(found.channels, raw.channels[RAW], self.policy.min_agreement)
        if not gated.channels:
            return self._fallback(raw, "off_topic", gated.notes, found)
        fused = stages.fuse_hyde(raw.channels, gated.channels, plan.fusion, self.weights, plan.include_raw,
                                 self.policy.protect_top)
        if not fused:
            return self._fallback(raw, "no_results", gated.notes, found)
        return Ranked(fused, True, None, gated.notes, found.embed_ms, found.search_ms)

    def _fallback(self, raw: stages.RawChannel, reason: FallbackReason, notes: Sequence[str] = (),
                  found: stages.HypothesisChannels | None = None) -> Ranked:
        timing = (found.embed_ms, found.search_ms) if found is not None else (0.0, 0.0)
        return Ranked(stages.plain(raw.channels, self.weights), False, reason, tuple(notes), *timing)

    async def _rerank(self, plan: Plan, docs: list[RetrievedDoc]) -> tuple[list[RetrievedDoc], float]:
        if self.reranker is None or not docs:
            return docs, 0.0
        started = time.perf_counter()
        head = docs[: plan.candidates]
        schema = self.retriever.schemas.get(plan.collection)
        texts = [schema.text(d.payload) if schema else payload_text(d.payload) for d in head]
        with logfire.span("hyde.rerank", candidates=len(head)):
            reranked = await asyncio.to_thread(stages.rerank, self.reranker, plan.text, head, texts)
        return reranked, (time.perf_counter() - started) * 1000

    def _has_questions(self, collection: str) -> bool:
        """Whether ``ingest --questions`` built the companion collection (found once, then remembered by
        ``check_collection``, so the hot path does not list collections on every search)."""
        try:
            self.retriever.check_collection(questions_collection(collection))
        except CollectionNotFoundError:
            return False
        return True


def _errors(gen: GenerationResult, ranked: Ranked, missing: list[str]) -> list[str]:
    """What went wrong, for ``HydeResult.errors``: an embedding failure first (it decided the fallback),
    then the generation's errors and timeouts, the gate's notes, a missing questions index."""
    timeouts = [f"timeout x{gen.timeouts}"] if gen.timeouts else []
    if ranked.reason == "embed_error":
        return [*ranked.notes, *gen.errors, *timeouts, *missing]
    return [*gen.errors, *timeouts, *ranked.notes, *missing]
