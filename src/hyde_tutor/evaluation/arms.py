"""Eval arms as functions from a batch of query texts to ranked document ids: plain retrieval modes and
HyDE pipeline variants, ready for :func:`~hyde_tutor.evaluation.arms.evaluate_arms`."""

from __future__ import annotations

import asyncio
from collections import Counter
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass
from typing import Any, Self, TypeVar

from ..hyde import FusionMode, HydeRetriever
from ..hyde.conversation import Condenser, ConversationMode, context_query, conversation_queries, fuse_rankings
from ..hyde.conversation_rank import SEARCH_DEPTH, follow_up_for, rank_hits
from ..hyde.request import SearchRequest
from ..retrieval.retriever import Retriever, SearchMode

ArmRun = Callable[[Sequence[str]], list[list[str]]]


@dataclass(frozen=True, slots=True)
class PipelineArm:
    """An eval arm run through the HyDE pipeline: which channels it fuses."""

    use_hyde: bool
    include_raw: bool = True
    use_questions: bool = False


# arm -> (channels, fusion override). "raw" uses the configured fusion.
RAW_ARMS: dict[str, tuple[SearchMode, str | None]] = {
    "raw": ("hybrid", None),
    "rrf": ("hybrid", "rrf"),
    "dbsf": ("hybrid", "dbsf"),
    "dense": ("dense", None),
    "sparse": ("sparse", None),
}
HYDE_ARMS: dict[str, PipelineArm] = {
    "hyde": PipelineArm(True),
    "hyde_only": PipelineArm(True, include_raw=False),
    "questions": PipelineArm(False, use_questions=True),
    "hyde+questions": PipelineArm(True, use_questions=True),
}
CONTEXT_ARMS = ("context", "condensed")
"""``context``: a follow-up searched with the previous question in front of it (plain hybrid, no LLM);
``condensed``: a follow-up rewritten by the LLM as a standalone question, then searched (plain hybrid)."""
CONVERSATION_ARMS: dict[str, ConversationMode] = {"fused": "fused", "reply": "reply", "conversation": "auto"}
"""No LLM (:data:`~hyde_tutor.hyde.conversation.ConversationMode`): ``fused``, the message alone and with the
previous question, fused; ``reply``, also the message after the tutor's last reply; ``conversation``, the
chat's default (``auto``): ``reply`` for a message that reads as a follow-up, the message alone otherwise."""
ARM_NAMES = (*RAW_ARMS, *CONTEXT_ARMS, *CONVERSATION_ARMS, *HYDE_ARMS)


def raw_arm(r: Retriever, collection: str, k: int, mode: SearchMode, fusion: str | None) -> ArmRun:
    """Plain retrieval in ``mode`` (and Qdrant fusion ``fusion``, when given)."""
    settings = r.settings if fusion is None else r.settings.model_copy(update={"fusion": fusion})

    def run(texts: Sequence[str]) -> list[list[str]]:
        return [[h.doc_id for h in hits] for hits in r.search_many(collection, list(texts), k, mode, settings=settings)]

    return run


History = tuple[tuple[str, str], ...]
"""A query's conversation before it: ``(role, content)`` turns."""
T = TypeVar("T")


def _text_and_history(item: Any) -> tuple[str, History]:
    """An arm's input: a query text, or an :class:`~hyde_tutor.evaluation.beir.EvalQuery` with its history."""
    if isinstance(item, str):
        return item, ()
    return item.text, tuple(getattr(item, "history", ()) or ())


class _OwnLoop:
    """An arm whose batches run on one event loop of its own (HTTP clients stay bound to it); close it, or use
    it as a context manager, to close that loop."""

    def __init__(self) -> None:
        self._loop = asyncio.new_event_loop()

    def _run_each(self, pairs: Sequence[tuple[str, History]], call: Callable[[str, History], Awaitable[T]],
                  concurrency: int = 4) -> list[T]:
        """``call(text, history)`` for each pair, ``concurrency`` at a time, on this arm's loop; in order."""

        async def run() -> list[T]:
            gate = asyncio.Semaphore(concurrency)

            async def one(text: str, history: History) -> T:
                async with gate:
                    return await call(text, history)

            return list(await asyncio.gather(*(one(t, h) for t, h in pairs)))

        return self._loop.run_until_complete(run())

    def close(self) -> None:
        self._loop.close()

    def __enter__(self) -> Self:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


class ContextArm:
    """Plain hybrid search of each query with the conversation's previous question in front of it."""

    takes_queries = True

    def __init__(self, r: Retriever, collection: str, k: int) -> None:
        self.r, self.collection, self.k = r, collection, k

    def __call__(self, items: Sequence[Any]) -> list[list[str]]:
        texts = [context_query(h, t, self.r.settings.max_query_chars) if h else t
                 for t, h in map(_text_and_history, items)]
        return [[h.doc_id for h in hits] for hits in self.r.search_many(self.collection, texts, self.k)]


class ConversationArm(ContextArm):
    """Plain hybrid search of each query as the pipeline's raw channel searches it in ``mode``
    (:func:`~hyde_tutor.hyde.conversation.conversation_queries`, fused by ``fuse_rankings``)."""

    def __init__(self, r: Retriever, collection: str, k: int, mode: ConversationMode, *,
                 name_field: str | None = None) -> None:
        super().__init__(r, collection, k)
        self.mode = mode
        self.name_field = name_field
        """The payload field of an entry's notation (the domain's, e.g. grammar's ``pattern``): with it, a follow-up
        in mode ``auto`` is ordered by the learned ranker, as the pipeline orders it; None: RRF alone."""

    def __call__(self, items: Sequence[Any]) -> list[list[str]]:
        plans = [conversation_queries(h, t, self.mode, self.r.settings.max_query_chars)
                 for t, h in map(_text_and_history, items)]
        texts = [q for plan in plans for q, _ in plan]
        hits = iter(self.r.search_many(self.collection, texts, max(self.k, SEARCH_DEPTH)))
        out = []
        for plan, (text, history) in zip(plans, map(_text_and_history, items), strict=True):
            found = [next(hits) for _ in plan]
            fused = [doc_id for doc_id, _ in fuse_rankings([[h.doc_id for h in f] for f in found], [w for _, w in plan])]
            follow_up = follow_up_for(history, text, plan, self.mode, self.name_field)
            if follow_up is not None:  # the pipeline's order (conversation_rank)
                ranked = rank_hits(follow_up, found, fused, self.name_field)
                fused = fused if ranked is None else [doc_id for doc_id, _ in ranked]
            out.append(fused[: self.k])
        return out


class CondensedArm(ContextArm, _OwnLoop):
    """Plain hybrid search of each follow-up rewritten by the LLM as a standalone question
    (:class:`~hyde_tutor.hyde.conversation.Condenser`); a query without history is searched as it is, and a
    failed rewrite is searched like ``context`` (counted in :meth:`fallbacks`). Close it to close its loop."""

    def __init__(self, r: Retriever, collection: str, k: int, condenser: Condenser, timeout_s: float = 60.0) -> None:
        super().__init__(r, collection, k)
        self.condenser, self.timeout_s = condenser, timeout_s
        self.rewrites: dict[str, str | None] = {}
        """Per follow-up text: the standalone question, or None when the rewrite failed."""
        self.costs: dict[str, tuple[int, int, int, bool, str]] = {}
        _OwnLoop.__init__(self)

    def __call__(self, items: Sequence[Any]) -> list[list[str]]:
        pairs = [_text_and_history(item) for item in items]
        rewritten = self._run_each(pairs, lambda text, history: self.condenser.condense(history, text, self.timeout_s))
        texts = []
        for (text, history), out in zip(pairs, rewritten, strict=True):
            self.costs.setdefault(text, (out.usage.requests, out.usage.input_tokens, out.usage.output_tokens, False,
                                         out.usage.source))
            if history:
                self.rewrites.setdefault(text, out.question)
            texts.append(out.question or (context_query(history, text, self.r.settings.max_query_chars) if history
                                          else text))
        return [[h.doc_id for h in hits] for hits in self.r.search_many(self.collection, texts, self.k)]

    def fallbacks(self) -> dict[str, int]:
        failed = sum(q is None for q in self.rewrites.values())
        return {"rewrite_failed": failed} if failed else {}

    def cost(self) -> dict[str, Any]:
        """LLM calls and tokens per search (one rewrite per follow-up), as :meth:`HydeArm.cost`."""
        return _cost(self.costs)


class HydeArm(_OwnLoop):
    """A HyDE pipeline arm. Its batches run on one event loop of its own (HTTP clients stay bound to
    it); ``reasons`` collects each query's fallback reasons, keyed by its text (a warm-up query counts once).
    Close it (or use it as a context manager) to close that loop."""

    def __init__(self, hr: HydeRetriever, collection: str, k: int, arm: PipelineArm, n: int | None,
                 fusion: FusionMode | None) -> None:
        self.hr, self.collection, self.k, self.arm, self.n, self.fusion = hr, collection, k, arm, n, fusion
        self.takes_queries = True  # evaluate_arms hands over the queries, with their conversations
        self.reasons: dict[str, list[str]] = {}
        self.costs: dict[str, tuple[int, int, int, bool, str]] = {}
        """Per query text: (LLM calls, input tokens, output tokens, skipped by the cascade, usage source)."""
        super().__init__()

    def __call__(self, items: Sequence[Any]) -> list[list[str]]:
        arm = self.arm
        pairs = [_text_and_history(item) for item in items]
        keys = [getattr(item, "id", None) or text for item, (text, _) in zip(items, pairs, strict=True)]
        request = SearchRequest(collection=self.collection, text="", top_k=self.k, use_hyde=arm.use_hyde,
                                n_hypotheses=self.n, fusion=self.fusion, include_raw=arm.include_raw,
                                use_questions=arm.use_questions)
        results = self._run_each(pairs, lambda text, history: self.hr.execute(request.replace(text=text,
                                                                                            history=history)))
        for text, res in zip(keys, results, strict=True):
            u = res.usage
            # the first run of a text is what it cost (a repeat, e.g. after the warm-up, hits the cache)
            self.costs.setdefault(text, (u.requests, u.input_tokens, u.output_tokens, res.skipped is not None, u.source))
            self.reasons[text] = (["no_questions_index"] if arm.use_questions and not res.used_questions else []) + (
                [res.fallback_reason] if res.fallback_reason and arm.use_hyde else [])
        return [[d.id for d in res.results] for res in results]

    def cost(self) -> dict[str, Any]:
        """Per search, over distinct queries: LLM calls, input and output tokens, the share the cascade skipped,
        and how the tokens were counted."""
        return _cost(self.costs)

    def fallbacks(self) -> dict[str, int]:
        """How often each fallback reason occurred, over distinct queries."""
        return dict(Counter(reason for found in self.reasons.values() for reason in found))


def _cost(costs: dict[str, tuple[int, int, int, bool, str]]) -> dict[str, Any]:
    rows = list(costs.values())
    n = max(1, len(rows))
    sources = sorted({s for row in rows for s in row[4].split("+") if s})
    return {"llm_calls": sum(r[0] for r in rows) / n, "tokens_in": sum(r[1] for r in rows) / n,
            "tokens_out": sum(r[2] for r in rows) / n, "skipped": sum(r[3] for r in rows) / n,
            "counted": "+".join(sources) or "none"}
