"""The pydantic-ai plugin: ``grammar_search`` and ``docs_search`` tools for any Agent.

    toolset = HydeSearchToolset()
    agent = Agent(model, deps_type=TutorDeps, toolsets=[toolset])
    await agent.run("...", deps=TutorDeps(retriever=hyde_retriever, subject_id="user-42"))

Bad arguments come back to the model as a retry message (``ModelRetry``); a store failure is a
failed tool result (``ToolFailed``: it does not spend the retry budget) saying search is unavailable,
in words without paths or engine internals; a HyDE failure is a silent fallback to plain retrieval
(recorded by the monitor). A chat turn never crashes because of retrieval.
"""

from __future__ import annotations

import logging

from collections.abc import Callable
from dataclasses import asdict
from typing import Any

from pydantic_ai import ModelRetry, RunContext, ToolReturn
from pydantic_ai.exceptions import ToolFailed
from pydantic_ai.capabilities import Toolset
from pydantic_ai.toolsets import FunctionToolset

from ..errors import HydeTutorError, QueryValidationError
from .deps import TutorDeps
from ..experiment.assignment import decide
from .failures import tool_failure_message
from ..hyde import HydeResult, RetrievedDoc
from ..hyde.hypotheses import Domain
from ..hyde.request import SearchRequest
from .monitor import Monitor, RetrievalRecord
from ..llm.prompts import load_prompt
from ..corpus.rendering import REFERENCE_NOTE, compact_payload
from ..retrieval.validation import validate_collection_name, validate_query, validate_top_k

__all__ = ["HydeSearchToolset", "TutorDeps", "compact_result", "context_search", "hyde_capability", "run_search",
           "search_for_context", "search_with_deps", "tool_failure_message", "tool_request", "tutor_instructions"]

_log = logging.getLogger("hyde_tutor")
MAX_TOOL_TOP_K = 10
MAX_RERANK_TOP_K = 50
TOOL_DOMAINS: dict[str, Domain] = {"grammar_search": "grammar", "docs_search": "docs"}
"""A tool knows what it searches: its hypotheses use that domain, whatever the collection is called."""


def _tool_domain(tool: str) -> Domain | None:
    """``ko_grammar_search`` -> ``grammar`` (prefixed tools keep their domain)."""
    return next((d for name, d in TOOL_DOMAINS.items() if tool.endswith(name)), None)


def compact_result(doc: RetrievedDoc) -> dict[str, Any]:
    """What the model sees of one result: readable fields and the id, never vectors (:mod:`hyde_tutor.rendering`)."""
    return compact_payload(doc.id, doc.payload)


async def run_search(ctx: RunContext[TutorDeps], tool: str, request: SearchRequest) -> ToolReturn:
    """Shared body of the search tools: validate, decide HyDE, search, record, compact. The model gets the
    compact results; the hypotheses, their sources, each result's channels and the cost go to the tool
    return's metadata, for the application and never to the model."""
    ctx.deps.begin_run(getattr(ctx, "run_id", None))
    compact, result = await _search(ctx.deps, tool, request)
    return ToolReturn(return_value=compact, metadata={
        "hypotheses": [{"perspective": h.perspective, "source": h.source, "text": h.text} for h in result.hypotheses],
        "channels": {d.id: list(d.channels) for d in result.results},
        "llm_calls": result.usage.requests, "tokens_in": result.usage.input_tokens,
        "tokens_out": result.usage.output_tokens, "usage_source": result.usage.source,
        "skipped": result.skipped, "errors": list(result.errors),
    })


def tool_request(
    tool: str, collection: str, query: Any, top_k: Any, use_hyde: bool | None = None, *, rerank_top_k: Any = None,
    hypothesis: Any = None, history: tuple[tuple[str, str], ...] = (),
) -> SearchRequest:
    """The :class:`SearchRequest` a call of ``tool`` makes (its domain from the tool's name: ``ko_grammar_search``
    searches grammar). The arguments are validated when the search runs."""
    return SearchRequest(collection=collection, text=query, top_k=top_k, use_hyde=use_hyde,
                         rerank_candidates=rerank_top_k, domain=_tool_domain(tool), agent_hypothesis=hypothesis,
                         history=tuple(history or ()))


async def search_with_deps(
    deps: TutorDeps, tool: str, collection: str, query: Any, top_k: Any, use_hyde: bool | None, **options: Any,
) -> dict[str, Any]:
    """A tool's search outside a tool call (raises ``ModelRetry`` for bad arguments): the compact results.
    ``options`` are :func:`tool_request`'s (``rerank_top_k``, ``hypothesis``, ``history``: earlier turns make it
    the conversation-aware search of a follow-up)."""
    request = tool_request(tool, collection, query, top_k, use_hyde, **options)
    return (await _search(deps, tool, request))[0]


def _validated(request: SearchRequest, tool: str, max_query_chars: int) -> SearchRequest:
    """``request`` with its text and sizes checked (what the model sent may be anything); ``ModelRetry`` says
    what to fix."""
    try:
        text = validate_query(request.text, max_query_chars)
        k = validate_top_k(request.top_k, MAX_TOOL_TOP_K)
        rerank = request.rerank_candidates
        rerank = None if rerank is None else validate_top_k(rerank, MAX_RERANK_TOP_K)
        if rerank is not None and rerank < k:
            raise QueryValidationError(f"rerank_top_k ({rerank}) must be at least top_k ({k}).")
        hypothesis = request.agent_hypothesis
        if hypothesis is not None and not isinstance(hypothesis, str):
            raise QueryValidationError(f"hypothesis must be text or null, not {type(hypothesis).__name__}.")
    except QueryValidationError as exc:
        raise ModelRetry(f"{exc} Call {tool} again with corrected arguments.") from exc
    return request.replace(text=text, top_k=k, rerank_candidates=rerank)


async def _search(deps: TutorDeps, tool: str, request: SearchRequest,
                  keep_found: bool = True) -> tuple[dict[str, Any], HydeResult]:
    request = _validated(request, tool, deps.retriever.retrieval_settings.max_query_chars)
    collection = request.collection
    record: RetrievalRecord | None = None
    try:  # the experiment's decision too: a bad experiment file or subject id fails the call, not the turn
        experiment = await deps.acurrent_experiment()
        decision = decide(request.use_hyde, experiment, deps.subject_id, deps.retriever.policy.enabled)
        record = RetrievalRecord(decision.experiment, decision.arm, decision.use_hyde, decision.reason, tool,
                                 collection, subject=deps.subject_id, requested_hyde=decision.requested,
                                 overridden=decision.overridden)
        result = await deps.retriever.execute(request.replace(use_hyde=decision.use_hyde,
                                                              use_questions=decision.use_questions))
        _fill(record, result)
        schema = deps.retriever.schema_for(collection)
        compact = [schema.compact(d.id, d.payload) if schema else compact_result(d) for d in result.results]
    except Exception as exc:  # every failure becomes a failed tool result: a chat turn never crashes on search
        if not isinstance(exc, HydeTutorError):  # a bug (ours, a store's, a reranker's): logged in full
            _log.exception("hyde-tutor: %s failed with an unexpected error", tool)
        if record is not None:
            record.error = type(exc).__name__
            _record(deps.monitor, record)
        raise ToolFailed(tool_failure_message(exc, tool, collection)) from exc
    _record(deps.monitor, record)
    if compact:
        deps.margins.setdefault(str(compact[0].get("id")), result.raw_margin)
    if keep_found:
        deps.found.extend(compact)
    return {"note": REFERENCE_NOTE, "results": compact, "used_hyde": result.used_hyde,
            "fallback_reason": result.fallback_reason}, result


async def search_for_context(deps: TutorDeps, tool: str, request: SearchRequest) -> list[dict[str, Any]]:
    """A search run on the model's behalf (retrieval-first): the tools' decision, records and results,
    with no error raised: a bad query or an unavailable store gives an empty list."""
    return (await context_search(deps, tool, request))[0]


async def context_search(deps: TutorDeps, tool: str, request: SearchRequest, *,
                         keep_found: bool = True) -> tuple[list[dict[str, Any]], HydeResult | None]:
    """:func:`search_for_context` with the pipeline's result beside the entries (None when the search failed):
    its hypotheses, its cost. ``keep_found=False``: the entries are not added to ``deps.found`` (the caller
    adds them, in its own order)."""
    try:
        compact, result = await _search(deps, tool, request, keep_found)
    except ModelRetry:
        return [], None
    except ToolFailed as exc:
        deps.unavailable.append(str(exc))
        return [], None
    return list(compact.get("results", [])), result


def _fill(record: RetrievalRecord, result: HydeResult) -> None:
    record.used_hyde = result.used_hyde
    record.used_questions = result.used_questions
    record.fallback_reason = result.fallback_reason if record.use_hyde else None
    record.n_hypotheses = len(result.hypotheses)
    record.stages_ms = {k: round(v, 2) for k, v in asdict(result.timings).items()}
    record.results = len(result.results)
    record.top_score = result.results[0].score if result.results else None
    record.tokens_in = result.usage.input_tokens
    record.tokens_out = result.usage.output_tokens
    record.llm_calls = result.usage.requests
    record.usage_source = result.usage.source
    record.skipped = result.skipped
    record.hypothesis_sources = [h.source if h.source == "agent" or not h.cached else "cache" for h in result.hypotheses]


def _record(monitor: Monitor | None, record: RetrievalRecord) -> None:
    if monitor is not None:
        monitor.record(record)


class HydeSearchToolset(FunctionToolset[TutorDeps]):
    """``grammar_search`` and ``docs_search`` as a reusable toolset.

    ``prefix`` renames the tools (``ko_grammar_search``) so two tutors can share one agent or process;
    ``grammar_collection`` / ``docs_collection`` point them at other collections; pass ``None`` to drop one.
    """

    def __init__(
        self, *, prefix: str = "", grammar_collection: str | None = "grammar", docs_collection: str | None = "docs",
        max_retries: int = 2,
    ) -> None:
        super().__init__(max_retries=max_retries)
        for name in (grammar_collection, docs_collection):
            if name:
                validate_collection_name(name)  # a clear error now, not a failed tool call later
        if grammar_collection:
            self.add_function(_grammar_tool(prefix + "grammar_search", grammar_collection), name=prefix + "grammar_search")
        if docs_collection:
            self.add_function(_docs_tool(prefix + "docs_search", docs_collection), name=prefix + "docs_search")


def _grammar_tool(name: str, collection: str) -> Callable[..., Any]:
    async def grammar_search(
        ctx: RunContext[TutorDeps], query: str, hypothesis: str | None = None, top_k: int = 5,
        use_hyde: bool | None = None,
    ) -> ToolReturn:
        """Search the Korean grammar reference (patterns with Russian explanations and examples).

        Use it for any question about how to say something in Korean, what an ending or particle means,
        or how two constructions differ. Pass the learner's question as is (Russian is fine); in a
        follow-up, make it self-contained.

        Args:
            query: The learner's question or a short description of the needed construction.
            hypothesis: Optional, and it saves a search step: the reference entry you expect to find, in
                the reference's format, in Russian with Korean examples, one field per line:
                "Конструкция: <Korean pattern>", "Название: <Russian name>", "Объяснение: <2-3 sentences:
                meaning, how it attaches to the stem>", then 1-2 lines "Пример: <Korean sentence> —
                <Russian translation>" (under 500 characters in all). It may be imperfect; it is searched
                together with the query. Leave it null if you cannot write Korean examples.
            top_k: How many entries to return (1-10).
            use_hyde: True forces HyDE (a hypothetical entry is written and searched), False forces plain
                search, null lets the running experiment decide.
        """
        return await run_search(ctx, name, SearchRequest(collection=collection, text=query, top_k=top_k, use_hyde=use_hyde,
                                                         domain="grammar", agent_hypothesis=hypothesis))

    return grammar_search


def _docs_tool(name: str, collection: str) -> Callable[..., Any]:
    async def docs_search(
        ctx: RunContext[TutorDeps], query: str, hypothesis: str | None = None, top_k: int = 5,
        rerank_top_k: int | None = None, use_hyde: bool | None = None,
    ) -> ToolReturn:
        """Search the educational documents (particles, speech levels, conjugation, honorifics,
        pronunciation, study methods), written in Russian with Korean examples.

        Args:
            query: The learner's question (self-contained in a follow-up).
            hypothesis: Optional, and it saves a search step: the passage you expect to find, as a short
                Russian teaching text (3-5 sentences, under 500 characters) that explains the topic with
                Korean examples and their translations. It may be imperfect; it is searched together with
                the query. Leave it null if you cannot write Korean examples.
            top_k: How many documents to return (1-10).
            rerank_top_k: How many candidates the reranker scores before the top_k are kept (top_k-50);
                null uses the configured default. Ignored when no reranker is configured.
            use_hyde: True forces HyDE, False forces plain search, null lets the running experiment decide.
        """
        return await run_search(ctx, name, SearchRequest(collection=collection, text=query, top_k=top_k, use_hyde=use_hyde,
                                                         domain="docs", rerank_candidates=rerank_top_k,
                                                         agent_hypothesis=hypothesis))

    return docs_search


def hyde_capability(**toolset_kwargs: Any) -> Toolset[TutorDeps]:
    """The toolset as a pydantic-ai capability: ``Agent(..., capabilities=[hyde_capability()])``."""
    return Toolset(HydeSearchToolset(**toolset_kwargs))


def tutor_instructions() -> str:
    """The tutor agent's instructions, from ``prompts/tutor.v<N>.md``."""
    return load_prompt("tutor").text
