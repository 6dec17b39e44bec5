"""The HyDE retrieval pipeline.

1. validate the query;  2. decide HyDE on/off (per-call flag > caller's decision > settings);
3. raw-query channel and hypothesis generation run IN PARALLEL;
4. all hypotheses embedded in one batch, all their hybrid searches in one batched store call;
5. drop off-topic hypotheses (agreement with the raw channel), fuse channels (rrf | max | mean | score);  6. optional rerank against the original query, adaptive threshold;
7. graceful fallback to the raw results with a recorded reason;  8. typed result with timings and usage.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import logging
import threading
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Literal

import numpy as np

from .config import HydeSettings, QuestionSettings, Settings
from .documents import payload_text
from .errors import CollectionNotFoundError, EmbedderError
from .fusion import (
    agreement,
    channels_by_doc,
    max_score_fusion,
    mean_vector,
    protect_head,
    reciprocal_rank_fusion,
    weighted_score_fusion,
)
from .monitor import logfire
from .hypotheses import (
    DEFAULT_HYPOTHESES,
    Domain,
    GenerationResult,
    Hypothesis,
    HypothesisGenerator,
    TokenUsage,
    make_cache,
)
from .rerank import CrossEncoderReranker, Reranker, adaptive_threshold
from .retriever import EncodedQueries, Retriever
from .sparse import SparseVec
from .store import Hit, questions_collection
from .validation import validate_query, validate_top_k

_log = logging.getLogger("hyde_tutor")
FusionMode = Literal["rrf", "max", "mean", "score"]
HydeLegs = Literal["both", "dense", "sparse"]
"""Which legs of the hybrid search a hypothesis replaces the query in (peer libraries: dense only)."""
FallbackReason = Literal[
    "llm_error", "timeout", "not_recorded", "empty_hypotheses", "off_topic", "no_results", "embed_error", "disabled"
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


@dataclass(slots=True)
class StageTimings:
    """Milliseconds per stage. ``raw`` overlaps ``generate`` (they run in parallel)."""

    raw_ms: float = 0.0
    generate_ms: float = 0.0
    embed_ms: float = 0.0
    search_ms: float = 0.0
    rerank_ms: float = 0.0
    total_ms: float = 0.0


@dataclass(slots=True)
class HydeResult:
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


GeneratorFactory = Callable[[Domain], HypothesisGenerator]


@dataclass(frozen=True, slots=True)
class BackendFailure:
    """The LLM backend failed to start: how often, when to try again, and why."""

    attempts: int
    retry_at: float
    message: str


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
AGREEMENT_DEPTH = 10
SCORE_FUSION_DEPTH = 30  # score fusion reads each channel this deep, so a missing document means "far down"


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
        self._factory = generator_factory
        self._generators: dict[Domain, HypothesisGenerator] = {}
        self._build_lock = threading.Lock()
        self._closed = False
        self._inflight_lock = threading.Lock()
        self._inflight: dict[Domain, concurrent.futures.Future[HypothesisGenerator]] = {}
        self._builder: concurrent.futures.ThreadPoolExecutor | None = None
        self._backend_failure: BackendFailure | None = None
        self.closers: list[Callable[[], None]] = []

    @classmethod
    def from_settings(cls, settings: Settings, retriever: Retriever | None = None) -> HydeRetriever:
        """Wire everything from settings; the LLM backend starts on the first HyDE search."""
        from .llm import make_llm

        retriever = retriever or Retriever.from_settings(settings)
        cache = make_cache(settings.hyde.cache, settings.data_dir)
        backend_holder: list[Any] = []
        instance: HydeRetriever

        def factory(domain: Domain) -> HypothesisGenerator:
            if not backend_holder:
                backend = make_llm(settings)
                backend_holder.append(backend)
                instance.closers.append(backend.close)
            return HypothesisGenerator.for_backend(backend_holder[0], domain, hyde=settings.hyde, llm=settings.llm,
                                                   cache=cache)

        reranker = CrossEncoderReranker(settings.hyde.reranker_model) if settings.hyde.rerank and settings.hyde.reranker_model else None
        from .llm import resolve_provider

        weak = resolve_provider(settings.llm) == "local"  # the embedded model gets the guarded policy
        from .llm import describe_backend

        _log.info("hyde-tutor LLM backend for HyDE: %s", describe_backend(settings))
        instance = cls(retriever, factory, settings.hyde, reranker=reranker, questions=settings.questions,
                       weak_model=weak)
        return instance

    def close(self) -> None:
        self._closed = True
        if self._builder is not None:
            self._builder.shutdown(wait=False, cancel_futures=True)
        for close in self.closers:
            close()
        self.retriever.close()

    def __enter__(self) -> HydeRetriever:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def domain_of(self, collection: str, domain: Domain | None = None) -> Domain:
        """The hypothesis domain for a search: the caller's (a tool knows it searches grammar), else the
        collection's in ``HYDE_HYDE__DOMAINS``, else ``default_domain``."""
        return domain or self.domains.get(collection, self.settings.default_domain)

    def _build_in_background(self, collection: str, domain: Domain) -> concurrent.futures.Future[HypothesisGenerator]:
        """One build per domain at a time, on a dedicated thread: concurrent searches share the same
        start instead of each blocking a worker thread (the raw channel needs those)."""
        with self._inflight_lock:
            future = self._inflight.get(domain)
            if future is None or future.done():
                if self._builder is None:
                    self._builder = concurrent.futures.ThreadPoolExecutor(1, thread_name_prefix="hyde-llm-start")
                future = self._builder.submit(self.generator, collection, domain)
                self._inflight[domain] = future
            return future

    def generator(self, collection: str, domain: Domain | None = None) -> HypothesisGenerator:
        """The collection's hypothesis generator, built on first use (this may start the LLM backend,
        which can block for seconds: the pipeline calls it off the event loop).

        A failed build is remembered: until its backoff (5 s, doubling to 5 min) has passed, further
        calls fail at once with :class:`~hyde_tutor.llm.LLMUnavailableError` instead of trying again.
        """
        domain = self.domain_of(collection, domain)
        if domain in self._generators:
            return self._generators[domain]
        self._build_lock.acquire()
        try:
            if domain in self._generators:
                return self._generators[domain]
            failure = self._backend_failure
            if failure is not None and time.monotonic() < failure.retry_at:
                from .llm import LLMUnavailableError

                raise LLMUnavailableError(
                    f"The LLM backend failed to start ({failure.attempts}x, last: {failure.message}); "
                    f"next try in {failure.retry_at - time.monotonic():.0f} s."
                )
            try:
                self._generators[domain] = self._factory(domain)
            except Exception as exc:
                attempts = failure.attempts + 1 if failure else 1
                self._backend_failure = BackendFailure(
                    attempts, time.monotonic() + min(300.0, 5.0 * 2 ** (attempts - 1)), f"{type(exc).__name__}: {exc}"[:200]
                )
                raise
            self._backend_failure = None
            if self._closed:  # close() ran while the backend was starting: do not leave it running
                for close in self.closers:
                    close()
            return self._generators[domain]
        finally:
            self._build_lock.release()

    # -- the pipeline ---------------------------------------------------------------------------
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
            result = await self._search(collection, query, top_k, use_hyde, n_hypotheses, fusion, include_raw,
                                        rerank_candidates, use_questions, domain)
            span.set_attributes({"used_hyde": result.used_hyde, "fallback_reason": result.fallback_reason or "",
                                 "n_hypotheses": len(result.hypotheses), "results": len(result.results),
                                 "used_questions": result.used_questions})
            return result

    async def _search(
        self, collection: str, query: Any, top_k: int | None, use_hyde: bool | None, n_hypotheses: int | None,
        fusion: FusionMode | None, include_raw: bool, rerank_candidates: int | None = None,
        use_questions: bool | None = None, domain: Domain | None = None,
    ) -> HydeResult:
        started = time.perf_counter()
        text = validate_query(query, self.retriever.settings.max_query_chars)
        top_k = validate_top_k(top_k if top_k is not None else self.retriever.settings.top_k)
        fusion = fusion or self.policy.fusion
        if collection not in self.retriever._checked:  # the first time reads the collection's files: off the loop
            await asyncio.to_thread(self.retriever.check_collection, collection)
        candidates = rerank_candidates or self.settings.rerank_candidates
        depth = max(top_k, candidates if self.reranker else top_k, AGREEMENT_DEPTH)
        if fusion == "score":
            depth = max(depth, SCORE_FUSION_DEPTH)
        use = self.policy.enabled if use_hyde is None else bool(use_hyde)
        want_questions = self.questions.enabled if use_questions is None else bool(use_questions)
        has_questions = want_questions and self._has_questions(collection)

        raw_task = asyncio.create_task(self._timed_raw(collection, text, depth, has_questions))
        if not use:
            base, raw_enc, raw_ms = await raw_task
            result = self._fallback(text, collection, base, "disabled", fusion)
        else:
            generated = await self._generate(collection, text, n_hypotheses, domain)
            base, raw_enc, raw_ms = await raw_task
            result = await self._with_hypotheses(text, collection, base, raw_enc, generated, fusion, include_raw, depth)
        result.timings.raw_ms = raw_ms
        result.used_questions = has_questions
        if want_questions and not has_questions:
            result.errors.append(f"no questions for {collection!r} (run `hyde-tutor ingest --questions K`)")
        return await self._finish(result, text, top_k, started, candidates)

    def _has_questions(self, collection: str) -> bool:
        """Whether ``ingest --questions`` built the companion collection (found once, then remembered by
        ``check_collection``, so the hot path does not list collections on every search)."""
        try:
            self.retriever.check_collection(questions_collection(collection))
        except CollectionNotFoundError:
            return False
        return True

    async def _generate(self, collection: str, text: str, n: int | None, domain: Domain | None = None) -> GenerationResult:
        """Start the backend if needed (in a worker thread) and write the hypotheses, all within
        ``timeout_s``: neither a slow backend start nor a hung call stalls the event loop or the search."""
        n = n or self.policy.n_hypotheses
        started = time.perf_counter()
        domain = self.domain_of(collection, domain)

        try:
            with logfire.span("hyde.generate", n=n):
                if domain in self._generators:
                    generator = self._generators[domain]
                else:  # starting the backend may block for seconds: its own thread, awaited within timeout_s
                    build = asyncio.wrap_future(self._build_in_background(collection, domain))
                    generator = await asyncio.wait_for(asyncio.shield(build), self.settings.timeout_s)
                return await generator.generate(text, n)  # each call bounded by timeout_s; partial results kept
        except (asyncio.TimeoutError, TimeoutError):
            return GenerationResult(timeouts=1, seconds=time.perf_counter() - started)
        except Exception as exc:  # noqa: BLE001 - e.g. the LLM backend could not start
            return GenerationResult(errors=[f"{type(exc).__name__}: {exc}"[:300]], seconds=time.perf_counter() - started)

    async def _timed_raw(
        self, collection: str, text: str, depth: int, questions: bool = False
    ) -> tuple[dict[str, list[Hit]], EncodedQueries, float]:
        """The query-only channels: raw, plus the write-time questions channel when asked for."""
        t0 = time.perf_counter()
        channels, enc = await asyncio.to_thread(self._raw_channel, collection, text, depth, questions)
        return channels, enc, (time.perf_counter() - t0) * 1000

    def _raw_channel(self, collection: str, text: str, depth: int, questions: bool = False) -> tuple[dict[str, list[Hit]], EncodedQueries]:
        with logfire.span("hyde.raw_channel", questions=questions):
            hits, enc = self._raw_search(collection, text, depth)
            channels = {RAW: hits}
            if questions:
                channels[QUESTIONS] = self._questions_search(collection, enc, depth)
            return channels, enc

    def _raw_search(self, collection: str, text: str, depth: int) -> tuple[list[Hit], EncodedQueries]:
        enc = self.retriever.encode([text], collection)
        hits = self.retriever.store.search_batch(collection, [self.retriever.request(enc, 0, depth, collection=collection)])[0]
        return hits, enc

    def _questions_search(self, collection: str, enc: EncodedQueries, depth: int) -> list[Hit]:
        """Search the question points; a document matched by several questions counts once (its best)."""
        r = self.retriever
        hits = r.store.search_batch(questions_collection(collection), [r.request(enc, 0, depth * 4)])[0]
        best: dict[str, Hit] = {}
        for h in hits:  # hits are score-ordered: the first one per document is its best question
            if h.doc_id not in best:  # the parent's payload, without the matched question
                best[h.doc_id] = Hit(h.doc_id, h.score, {k: v for k, v in h.payload.items() if k != "question"})
        return list(best.values())[:depth]

    async def _with_hypotheses(
        self, text: str, collection: str, base: dict[str, list[Hit]], raw_enc: EncodedQueries,
        gen: GenerationResult, fusion: FusionMode, include_raw: bool, depth: int,
    ) -> HydeResult:
        reason = gen.failure_reason
        notes: list[str] = []
        if reason is not None:
            result = self._fallback(text, collection, base, reason, fusion)  # type: ignore[arg-type]
        else:
            t0 = time.perf_counter()
            with logfire.span("hyde.embed", n=len(gen.hypotheses)):
                try:
                    hyp_enc = await asyncio.to_thread(self.retriever.encode, [h.text for h in gen.hypotheses], collection)
                except EmbedderError as exc:  # e.g. a rate limit on the hypotheses' batch: raw results stand
                    result = self._fallback(text, collection, base, "embed_error", fusion)
                    result.errors = [f"{type(exc).__name__}: {exc}"[:300]]
                    result.hypotheses = gen.hypotheses
                    return result
            t1 = time.perf_counter()
            with logfire.span("hyde.store_search", fusion=fusion):
                channels = await asyncio.to_thread(
                    self._hypothesis_channels, collection, gen.hypotheses, hyp_enc, raw_enc, fusion, depth
                )
            t2 = time.perf_counter()
            channels, notes = self._drop_off_topic(channels, base[RAW])
            if not channels:
                result = self._fallback(text, collection, base, "off_topic", fusion)
            else:
                result = self._fused_result(text, collection, base, channels, fusion, include_raw)
            result.timings.embed_ms = (t1 - t0) * 1000
            result.timings.search_ms = (t2 - t1) * 1000
        result.hypotheses = gen.hypotheses
        result.usage = gen.usage
        result.errors = gen.errors + [f"timeout x{gen.timeouts}"] * bool(gen.timeouts) + notes
        result.timings.generate_ms = gen.seconds * 1000
        return result

    def _drop_off_topic(
        self, channels: dict[str, list[Hit]], raw_hits: list[Hit]
    ) -> tuple[dict[str, list[Hit]], list[str]]:
        """Keep the hypothesis channels that agree with the raw query on at least ``min_agreement`` documents."""
        need = self.policy.min_agreement
        if need <= 0:
            return channels, []
        anchor = [h.doc_id for h in raw_hits]
        kept: dict[str, list[Hit]] = {}
        notes: list[str] = []
        for name, hits in channels.items():
            shared = agreement([h.doc_id for h in hits], anchor, AGREEMENT_DEPTH)
            if shared >= need:
                kept[name] = hits
            else:
                notes.append(f"{name} dropped as off-topic: {shared}/{AGREEMENT_DEPTH} shared with the raw top "
                             f"{AGREEMENT_DEPTH}, need {need}")
        return kept, notes

    def _fused_result(
        self, text: str, collection: str, base: dict[str, list[Hit]], channels: dict[str, list[Hit]],
        fusion: FusionMode, include_raw: bool,
    ) -> HydeResult:
        if include_raw:
            channels = {**base, **channels}
        elif QUESTIONS in base:
            channels = {QUESTIONS: base[QUESTIONS], **channels}
        fused = self._fuse(channels, fusion)
        if include_raw and self.policy.protect_top:
            fused = self._protect(fused, base[RAW])
        if not fused:
            return self._fallback(text, collection, base, "no_results", fusion)
        return HydeResult(text, collection, fused, True, None, fusion=fusion)

    def _hypothesis_channels(
        self, collection: str, hypotheses: Sequence[Hypothesis], hyp: EncodedQueries, raw: EncodedQueries,
        fusion: FusionMode, depth: int,
    ) -> dict[str, list[Hit]]:
        r = self.retriever
        if fusion == "mean":
            dense = mean_vector(np.vstack([raw.dense, hyp.dense]))
            merged = EncodedQueries(dense[None, :], [_merge_sparse([*raw.sparse, *hyp.sparse])])
            return {"hyde:mean": r.store.search_batch(collection, [r.request(merged, 0, depth, collection=collection)])[0]}
        hyp = _with_legs(hyp, raw, self.policy.legs)
        requests = [r.request(hyp, i, depth, collection=collection) for i in range(len(hypotheses))]
        found = r.store.search_batch(collection, requests)  # one batched call for all hypotheses
        return {f"hyde:{h.perspective}": hits for h, hits in zip(hypotheses, found, strict=True)}

    def _fuse(self, channels: Mapping[str, list[Hit]], fusion: FusionMode) -> list[RetrievedDoc]:
        payloads: dict[str, dict[str, Any]] = {}
        for hits in channels.values():
            for h in hits:
                payloads.setdefault(h.doc_id, h.payload)
        found_by = channels_by_doc({name: [h.doc_id for h in hits] for name, hits in channels.items()})
        if fusion == "rrf":
            weights = [self._weight(n) for n in channels]
            ranked = reciprocal_rank_fusion([[h.doc_id for h in hits] for hits in channels.values()], self.policy.rrf_k, weights)
        elif fusion == "score":  # the hypothesis weight is shared by the hypothesis channels
            n_hyp = sum(1 for name in channels if _is_hypothesis(name))
            weights = [self._weight(n) / (n_hyp if _is_hypothesis(n) else 1) for n in channels]
            ranked = weighted_score_fusion([[(h.doc_id, h.score) for h in hits] for hits in channels.values()], weights)
        else:  # max (and mean, whose single hyde channel is deduplicated against raw the same way)
            ranked = max_score_fusion([[(h.doc_id, h.score) for h in hits] for hits in channels.values()])
        return [RetrievedDoc(d, s, payloads[d], found_by[d]) for d, s in ranked]

    def _protect(self, fused: list[RetrievedDoc], raw_hits: list[Hit]) -> list[RetrievedDoc]:
        by_id = {d.id: d for d in fused}
        order = protect_head([(d.id, d.score) for d in fused], [h.doc_id for h in raw_hits], self.policy.protect_top)
        return [RetrievedDoc(d, s, by_id[d].payload, by_id[d].channels) for d, s in order]

    def _weight(self, channel: str) -> float:
        if channel == RAW:
            return self.policy.raw_weight
        if channel == QUESTIONS:
            return self.questions.weight
        return self.policy.hypothesis_weight  # every other channel is a hypothesis (see _is_hypothesis)

    def _fallback(
        self, text: str, collection: str, base: dict[str, list[Hit]], reason: FallbackReason, fusion: str
    ) -> HydeResult:
        """Raw results (RRF-fused with the questions channel when it is on)."""
        if len(base) == 1:
            docs = [RetrievedDoc(h.doc_id, h.score, h.payload, (RAW,)) for h in base[RAW]]
        else:
            docs = self._fuse(base, "rrf")
        return HydeResult(text, collection, docs, False, reason, fusion=fusion)

    async def _finish(self, result: HydeResult, text: str, top_k: int, started: float, candidates: int) -> HydeResult:
        if self.reranker is not None and result.results:
            t0 = time.perf_counter()
            with logfire.span("hyde.rerank", candidates=min(candidates, len(result.results))):
                result.results = await asyncio.to_thread(self._rerank, text, result.results[:candidates], result.collection)
            result.timings.rerank_ms = (time.perf_counter() - t0) * 1000
        s = self.settings
        threshold, kept = adaptive_threshold(
            [d.score for d in result.results], min(top_k, s.threshold_min_results), s.threshold_start, s.threshold_step, s.threshold_floor
        )
        result.effective_threshold = threshold
        result.results = result.results[: min(kept, top_k)]
        result.timings.total_ms = (time.perf_counter() - started) * 1000
        return result

    def _rerank(self, query: str, docs: list[RetrievedDoc], collection: str = "") -> list[RetrievedDoc]:
        assert self.reranker is not None
        schema = self.retriever.schemas.get(collection)
        texts = [schema.text(d.payload) if schema else payload_text(d.payload) for d in docs]
        scores = self.reranker.scores(query, texts)  # ORIGINAL query
        order = sorted(range(len(docs)), key=lambda i: -scores[i])
        return [RetrievedDoc(docs[i].id, scores[i], docs[i].payload, docs[i].channels) for i in order]


def _is_hypothesis(channel: str) -> bool:
    """Channels other than the query-only ones (raw, questions) come from hypotheses."""
    return channel not in (RAW, QUESTIONS)


def _with_legs(hyp: EncodedQueries, raw: EncodedQueries, legs: HydeLegs) -> EncodedQueries:
    """Hypothesis encodings with the query's own vector on the leg(s) HyDE does not replace."""
    n = len(hyp.sparse)
    if legs == "dense":
        return EncodedQueries(hyp.dense, [raw.sparse[0]] * n)
    if legs == "sparse":
        return EncodedQueries(np.repeat(raw.dense[:1], n, axis=0), hyp.sparse)
    return hyp


def _merge_sparse(vectors: Sequence[SparseVec]) -> SparseVec:
    weights: dict[int, float] = {}
    for v in vectors:
        for i, w in zip(v.indices, v.values, strict=True):
            weights[i] = weights.get(i, 0.0) + w
    items = sorted(weights.items())
    return SparseVec(tuple(i for i, _ in items), tuple(w for _, w in items))
