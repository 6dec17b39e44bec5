"""The HyDE retrieval pipeline: :class:`HydeRetriever` composes the stages of ``stages.py``.

1. validate the query and plan the search (HyDE on/off: the call, else the policy; depth; fusion);
2. the raw-query channel and the hypothesis generation run IN PARALLEL;
3. all hypotheses embedded in one batch, all their hybrid searches in one batched store call;
4. off-topic hypotheses dropped (agreement with the raw channel), channels fused, a follow-up's named entry first;
5. optional rerank against the original query, adaptive threshold;
6. any HyDE failure falls back to the raw results with a recorded reason; the result is built once.
"""

from __future__ import annotations

import asyncio
import dataclasses
import logging
import time
from collections.abc import Callable, Mapping, Sequence
from typing import Any

from ..config import HydeSettings, QuestionSettings, RetrievalSettings, Settings
from ..errors import EmbedderError, HydeTutorError
from .domains import DOMAINS
from .hypotheses import Domain, GenerationResult, Hypothesis, HypothesisGenerator, shape_hypothesis
from .request import SearchRequest
from .requests import render_recording
from .plan import Hypotheses, Plan, Ranked, agent_usage, result_errors
from .conversation import DEFAULT_CONVERSATION_MODE, conversation_queries, reads_as_followup
from .conversation_rank import follow_up_for, ranked_depth
from .cache import make_cache
from ..telemetry import logfire
from ..corpus.rendering import payload_text
from .rerank import CrossEncoderReranker, Reranker
from ..retrieval.retriever import Retriever
from ..retrieval.store import Hit
from ..retrieval.schemas import CollectionSchema
from ..retrieval.validation import validate_query, validate_top_k
from . import named, stages
from .generators import GeneratorFactory, GeneratorPool
from .question_index import QuestionsProbe
from .policy import AGREEMENT_DEPTH, SCORE_FUSION_DEPTH, FusionMode, HydePolicy
from .result import RAW, FallbackReason, HydeResult, RetrievedDoc, StageTimings

_log = logging.getLogger("hyde_tutor")


class HydeRetriever:
    """HyDE on top of a :class:`Retriever`. Generators are created lazily, so plain searches never load an LLM."""

    def __init__(self, retriever: Retriever, generator_factory: GeneratorFactory, settings: HydeSettings | None = None,
                 *, reranker: Reranker | None = None, domains: Mapping[str, Domain] | None = None,
                 questions: QuestionSettings | None = None, weak_model: bool = False) -> None:
        self.retriever = retriever
        self.settings = settings or HydeSettings()
        self.questions = questions or QuestionSettings()
        self.weak_model = weak_model
        self.questions_probe = QuestionsProbe(retriever)
        self.reranker = reranker
        self.domains: dict[str, Domain] = dict(self.settings.domains if domains is None else domains)
        self.generators = GeneratorPool(generator_factory)

    @property
    def policy(self) -> HydePolicy:
        """The policy in force for the default domain, resolved from the settings on every read."""
        return self.policy_for(None)

    def policy_for(self, domain: Domain | None) -> HydePolicy:
        """The policy in force for a hypothesis domain (the defaults differ per domain for capable models)."""
        return HydePolicy.resolve(self.settings, self.weak_model, domain)

    @property
    def retrieval_settings(self) -> RetrievalSettings:
        """The plain retriever's settings (query size limit, default ``top_k``, fusion)."""
        return self.retriever.settings

    def schema_for(self, collection: str) -> CollectionSchema | None:
        """The schema configured for ``collection`` (``HYDE_SCHEMAS``), if any: how its payloads render."""
        return self.retriever.schemas.get(collection)

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
                backends.append(make_llm(settings, render=render_recording))
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

    def warm_up(self, collections: Sequence[str], *, freeze_gc: bool = True) -> None:
        """One plain search per collection (loads the collections, the embedder's process, the Korean analyser; no LLM),
        then with ``freeze_gc`` :func:`gc.freeze` (one full GC over ~280,000 objects paused the loop ~160 ms under
        load). Once at start-up; it blocks (async code: ``await asyncio.to_thread(hr.warm_up, [...])``)."""
        import gc

        for collection in collections:
            self.retriever.search(collection, "warm-up 준비", top_k=1)
        if freeze_gc:
            gc.collect()
            gc.freeze()

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

    async def search(self, collection: str, query: Any, **options: Any) -> HydeResult:
        """Run the pipeline for one query. Raises only for bad input or a failing store, never for HyDE.

        ``options`` are the fields of :class:`SearchRequest` (``top_k``, ``use_hyde``, ``n_hypotheses``,
        ``fusion``, ``include_raw``, ``rerank_candidates``, ``use_questions``, ``domain``,
        ``agent_hypothesis``, ``generation``, ``cascade_margin``); unset ones come from the policy.
        """
        return await self.execute(SearchRequest(collection=collection, text=query, **options))

    def search_sync(self, collection: str, query: Any, **options: Any) -> HydeResult:
        """:meth:`search` for code without an event loop (a script, a REPL)::

            hr = HydeRetriever.from_settings(Settings())
            for doc in hr.search_sync("grammar", "Как сказать, что я хочу поехать в Пусан?").results:
                print(doc.id, doc.payload.get("pattern"))

        Inside async code (an agent, a Jupyter cell) ``await hr.search(...)`` instead.
        """
        try:
            asyncio.get_running_loop()
        except RuntimeError:
            return asyncio.run(self.search(collection, query, **options))
        raise HydeTutorError("search_sync() was called inside a running event loop (async code or Jupyter): "
                             "use `await hr.search(collection, query)` there.")

    async def execute(self, request: SearchRequest) -> HydeResult:
        """Run the pipeline for one :class:`SearchRequest` (see :meth:`search`)."""
        with logfire.span("hyde.search {collection}", collection=request.collection) as span:
            started = time.perf_counter()
            plan = await self._plan(request)
            result = await self._run(plan, started)
            span.set_attributes({"used_hyde": result.used_hyde, "fallback_reason": result.fallback_reason or "",
                                 "n_hypotheses": len(result.hypotheses), "results": len(result.results),
                                 "used_questions": result.used_questions, "skipped": result.skipped or "",
                                 "llm_calls": result.usage.requests})
            return result

    async def search_many(self, collection: str, texts: Sequence[str], *, concurrency: int = 4,
                          **options: Any) -> list[HydeResult]:
        """:meth:`search` for each text, ``concurrency`` at a time; results in the order of ``texts``."""
        return await self.execute_many(SearchRequest(collection=collection, text="", **options), texts, concurrency)

    async def execute_many(self, request: SearchRequest, texts: Sequence[str], concurrency: int = 4) -> list[HydeResult]:
        """``request`` for each text (a copy with that text), ``concurrency`` at a time, in order."""
        gate = asyncio.Semaphore(concurrency)

        async def one(text: str) -> HydeResult:
            async with gate:
                return await self.execute(request.replace(text=text))

        return list(await asyncio.gather(*(one(t) for t in texts)))

    async def _plan(self, request: SearchRequest) -> Plan:
        text = validate_query(request.text, self.retriever.settings.max_query_chars)
        top_k = validate_top_k(request.top_k if request.top_k is not None else self.retriever.settings.top_k)
        collection = request.collection
        domain = self.domain_of(collection, request.domain)
        policy = self.policy_for(domain)
        fusion = request.fusion or policy.fusion
        if not self.retriever.is_checked(collection):  # the first time reads the collection's files: off the loop
            await asyncio.to_thread(self.retriever.check_collection, collection)
        candidates = request.rerank_candidates or self.settings.rerank_candidates
        depth = max(top_k, candidates if self.reranker else top_k, AGREEMENT_DEPTH)
        if fusion == "score":
            depth = max(depth, SCORE_FUSION_DEPTH)
        want_questions = self.questions.enabled if request.use_questions is None else bool(request.use_questions)
        history = tuple(request.history)
        mode = request.conversation or DEFAULT_CONVERSATION_MODE
        queries = conversation_queries(history, text, mode, self.retriever.settings.max_query_chars)
        search_text = queries[0][0]
        followup = reads_as_followup(history, text, mode) and (len(queries) > 1 or search_text != text)
        follow_up = follow_up_for(history, text, queries, mode, DOMAINS[domain].name_field)
        return Plan(follow_up=follow_up, followup=followup, request=request, text=text, search_text=search_text,
                    top_k=top_k, depth=ranked_depth(follow_up, depth), queries=queries if len(queries) > 1 else (),
                    candidates=candidates, fusion=fusion,
                    use_hyde=policy.enabled if request.use_hyde is None else bool(request.use_hyde),
                    n_hypotheses=request.n_hypotheses or policy.n_hypotheses,
                    domain=domain, want_questions=want_questions,
                    has_questions=want_questions and await self.questions_probe.has_questions(collection), policy=policy)

    async def _run(self, plan: Plan, started: float) -> HydeResult:
        """The stages in order; reads like the diagram in ``stages.py``."""
        raw_task = asyncio.create_task(self._search_raw(plan))
        hypotheses = await self._hypotheses(plan, raw_task)
        raw = await raw_task
        ranked = await self._rank(plan, raw, hypotheses.generated)
        docs, rerank_ms, rerank_notes = await self._rerank(plan, ranked.docs)
        kept = stages.threshold(docs, plan.top_k, self.settings)
        gen = hypotheses.generated or GenerationResult()
        missing = ([f"no questions for {plan.collection!r} (run `hyde-tutor ingest --questions K`)"]
                   if plan.want_questions and not plan.has_questions else list(raw.notes))
        return HydeResult(
            plan.text, plan.collection, kept.docs, ranked.used_hyde, ranked.reason,
            hypotheses=list(gen.hypotheses), usage=gen.usage, effective_threshold=kept.threshold,
            errors=result_errors(gen, ranked, [*hypotheses.notes, *rerank_notes, *missing]),
            timings=StageTimings(raw.ms, gen.seconds * 1000, ranked.embed_ms, ranked.search_ms, rerank_ms,
                                 (time.perf_counter() - started) * 1000),
            fusion=plan.fusion, used_questions=stages.QUESTIONS in raw.channels, skipped=hypotheses.skipped,
            raw_margin=raw.margin,
        )

    async def _search_raw(self, plan: Plan) -> stages.RawChannel:
        """The query's channel: its encoding awaited (a batch shared with the other searches in flight, no
        worker thread held meanwhile), then the store search in a worker thread."""
        started = time.perf_counter()
        texts = [q for q, _ in plan.queries] or [plan.search_text]
        encoding = await self.retriever.aencode(texts, plan.collection)
        raw = await asyncio.to_thread(stages.search_raw, self.retriever, plan.collection, plan.search_text,
                                      plan.depth, plan.has_questions, encoding=encoding, started=started,
                                      conversation=stages.ConversationSearches(
                                          tuple(w for _, w in plan.queries), plan.follow_up,
                                          DOMAINS[plan.domain].name_field))
        if raw.notes:  # the questions collection failed: asked again only after the probe's recheck time
            self.questions_probe.lost(plan.collection)
        return raw

    async def _hypotheses(self, plan: Plan, raw_task: asyncio.Task[stages.RawChannel]) -> Hypotheses:
        """The hypotheses to search: the agent's (free), else generated ones, unless the cascade finds the
        raw ranking sure enough to skip the LLM; None when HyDE is off or skipped."""
        if not plan.use_hyde:
            return Hypotheses(None)
        agent, notes = self._agent_hypothesis(plan)
        policy = plan.policy
        if agent is not None and policy.agent_hypothesis == "replace":
            return Hypotheses(GenerationResult(hypotheses=[agent], usage=agent_usage(agent)), notes=notes)
        if agent is None and plan.cascade_margin > 0:
            raw = await raw_task  # the cascade reads the raw ranking first (one encode + one search, ~10 ms)
            margin = raw.margin
            if margin is not None and margin >= plan.cascade_margin:
                return Hypotheses(None, skipped="confident",
                                  notes=(*notes, f"cascade: raw top-1 margin {margin:.3f} >= {plan.cascade_margin}"))
        generated = await self.generators.generate(plan.domain, plan.text, plan.n_hypotheses, self.settings.timeout_s,
                                                   one_call=plan.one_call, history=plan.request.history)
        if agent is not None:  # agent_hypothesis = add: searched beside the generated ones
            generated.hypotheses.insert(0, agent)
            generated.usage.add(agent_usage(agent))
        return Hypotheses(generated, notes=notes)

    def _agent_hypothesis(self, plan: Plan) -> tuple[Hypothesis | None, tuple[str, ...]]:
        """The agent's hypothesis through the same guard as generated ones; junk is dropped with a reason."""
        text = plan.request.agent_hypothesis
        if text is None or not str(text).strip():
            return None, ()
        shaped = shape_hypothesis(str(text), DOMAINS[plan.domain], self.settings, query=plan.text)
        if shaped.rejected is not None:
            return None, (f"agent hypothesis dropped: {shaped.rejected}",)
        return Hypothesis(shaped.text, "agent", source="agent"), ()

    async def _rank(self, plan: Plan, raw: stages.RawChannel, generated: GenerationResult | None) -> Ranked:
        """Hypothesis channels → gate → fusion; the raw ranking with a reason when any step leaves nothing."""
        if generated is None:
            return self._fallback(raw, "disabled" if not plan.use_hyde else None)
        if generated.failure_reason is not None:
            return self._fallback(raw, generated.failure_reason)  # type: ignore[arg-type]
        started = time.perf_counter()
        try:
            with logfire.span("hyde.embed", n=len(generated.hypotheses)):
                encoding = await self.retriever.aencode([h.text for h in generated.hypotheses], plan.collection)
        except EmbedderError as exc:  # e.g. a rate limit on the hypotheses' batch: the raw results stand
            return self._fallback(raw, "embed_error", (f"{type(exc).__name__}: {exc}"[:300],))
        except Exception as exc:  # noqa: BLE001 - a HyDE failure never fails the search
            _log.warning("hyde-tutor: embedding the hypotheses failed; raw results instead", exc_info=True)
            return self._fallback(raw, "search_error", (f"{type(exc).__name__}: {exc}"[:300],))
        try:
            embed_ms = (time.perf_counter() - started) * 1000
            found = dataclasses.replace(await asyncio.to_thread(
                stages.search_hypotheses, self.retriever, plan.collection, generated.hypotheses, raw.encoding,
                plan.policy, plan.fusion, plan.depth, encoding=encoding), embed_ms=embed_ms)
        except Exception as exc:  # noqa: BLE001 - the raw results are in hand: a HyDE failure never fails the search
            _log.warning("hyde-tutor: the hypotheses' search failed; raw results instead", exc_info=True)
            return self._fallback(raw, "search_error", (f"{type(exc).__name__}: {exc}"[:300],))
        gated = stages.gate(found.channels, raw.channels[RAW], plan.policy.min_agreement)
        if not gated.channels:
            return self._fallback(raw, "off_topic", gated.notes, found)
        fused = stages.fuse_hyde(raw.channels, gated.channels, plan.fusion, stages.Weights.of(
            plan.policy, self.questions.weight), plan.include_raw, plan.policy.protect_top, plan.lead)
        depth = plan.policy.named_lead if plan.followup else plan.policy.named_lead_new
        if depth:  # the entry a kept hypothesis names goes first (named.py)
            kept = named.kept_texts(generated.hypotheses, gated.channels)
            fused = await asyncio.to_thread(named.lead_named, fused, kept, DOMAINS[plan.domain], depth)
        if not fused:
            return self._fallback(raw, "no_results", gated.notes, found)
        return Ranked(fused, True, None, gated.notes, found.embed_ms, found.search_ms)

    def _fallback(self, raw: stages.RawChannel, reason: FallbackReason | None, notes: Sequence[str] = (),
                  found: stages.HypothesisChannels | None = None) -> Ranked:
        timing = (found.embed_ms, found.search_ms) if found is not None else (0.0, 0.0)
        return Ranked(stages.plain(raw.alone, self.weights), False, reason, tuple(notes), *timing)

    async def _rerank(self, plan: Plan, docs: list[RetrievedDoc]) -> tuple[list[RetrievedDoc], float, tuple[str, ...]]:
        """Reranked docs, ms, and a note when the reranker failed (the fused order is kept then)."""
        if self.reranker is None or not docs:
            return docs, 0.0, ()
        started = time.perf_counter()
        head = docs[: plan.candidates]
        schema = self.schema_for(plan.collection)
        try:
            texts = [schema.text(d.payload) if schema else payload_text(d.payload) for d in head]
            with logfire.span("hyde.rerank", candidates=len(head)):
                reranked = await asyncio.to_thread(stages.rerank, self.reranker, plan.text, head, texts)
        except Exception as exc:  # noqa: BLE001 - the fused results are in hand: keep them
            _log.warning("hyde-tutor: the reranker failed; fused order kept", exc_info=True)
            return docs, (time.perf_counter() - started) * 1000, (f"rerank failed, fused order kept: "
                                                                  f"{type(exc).__name__}: {exc}"[:300],)
        return reranked, (time.perf_counter() - started) * 1000, ()
