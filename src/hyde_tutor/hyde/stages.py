"""The HyDE pipeline's stages. Each takes values and returns a new frozen value; none keeps state.

    raw channel ─┐
                 ├─ hypothesis channels ─ gate ─ fusion ─ rerank ─ threshold
    generation ──┘

The raw channel and the generation run at the same time (``pipeline.py`` composes them); the raw
channel's encoding is reused by the hypothesis channels (the legs HyDE does not replace, ``mean``).
"""

from __future__ import annotations

import logging
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import numpy as np

from ..config import HydeSettings
from .fusion import (
    agreement,
    channels_by_doc,
    max_score_fusion,
    mean_vector,
    protect_head,
    reciprocal_rank_fusion,
    weighted_score_fusion,
)
from .hypotheses import Hypothesis
from ..telemetry import logfire
from .rerank import Reranker, adaptive_threshold
from ..retrieval.retriever import EncodedQueries, Retriever
from ..retrieval.sparse import SparseVec
from ..retrieval.store import Hit, questions_collection
from .policy import AGREEMENT_DEPTH, FusionMode, HydeLegs, HydePolicy
from .result import QUESTIONS, RAW, RetrievedDoc

_log = logging.getLogger("hyde_tutor")

if TYPE_CHECKING:
    from .conversation_rank import FollowUp

Channels = Mapping[str, list[Hit]]


@dataclass(frozen=True, slots=True)
class RawChannel:
    """The query-only channels (``raw``, plus ``questions`` when asked for) and the query's encoding."""

    channels: Channels
    encoding: EncodedQueries
    ms: float
    notes: tuple[str, ...] = ()
    """Why a channel was dropped (the questions collection failed: the raw hits stand)."""
    ranked: list[Hit] | None = None
    """A follow-up's searches in the learned ranker's order (:mod:`~hyde_tutor.hyde.conversation_rank`): the
    ranking when no hypothesis is fused (the offline path, a failed generation). Hypotheses fuse with ``raw``, the
    RRF fusion the generated path was chosen with (measured: the learned order there lost on the tuning half)."""

    @property
    def margin(self) -> float | None:
        """How sure the raw ranking is (:func:`top_margin`); None when the learned order heads another entry than
        RRF: no score says how sure that entry is (the cascade generates, the headline rule reads it as unsure)."""
        hits = self.channels[RAW]
        if self.ranked is not None and (not self.ranked or not hits or self.ranked[0].doc_id != hits[0].doc_id):
            return None
        return top_margin(hits)

    @property
    def alone(self) -> Channels:
        """The channels as the results stand without hypotheses (``raw`` in the learned order, when there is one)."""
        return self.channels if self.ranked is None else {**self.channels, RAW: self.ranked}


@dataclass(frozen=True, slots=True)
class HypothesisChannels:
    """One ranking per hypothesis (or one ``hyde:mean``)."""

    channels: Channels
    embed_ms: float = 0.0
    search_ms: float = 0.0


@dataclass(frozen=True, slots=True)
class Gated:
    """The hypothesis channels that agree with the raw query, and a note for each one dropped."""

    channels: Channels
    notes: tuple[str, ...] = ()


@dataclass(frozen=True, slots=True)
class Weights:
    """Channel weights for rrf and score fusion."""

    raw: float = 1.0
    hypothesis: float = 1.0
    questions: float = 1.0
    rrf_k: int = 60

    @classmethod
    def of(cls, policy: HydePolicy, questions_weight: float) -> Weights:
        return cls(policy.raw_weight, policy.hypothesis_weight, questions_weight, policy.rrf_k)

    def __call__(self, channel: str) -> float:
        if channel == RAW:
            return self.raw
        if channel == QUESTIONS:
            return self.questions
        return self.hypothesis  # every other channel is a hypothesis (see is_hypothesis)


@dataclass(frozen=True, slots=True)
class Thresholded:
    """The results that pass the adaptive threshold, cut to ``top_k``."""

    docs: list[RetrievedDoc]
    threshold: float | None


def is_hypothesis(channel: str) -> bool:
    """Channels other than the query-only ones (raw, questions) come from hypotheses."""
    return channel not in (RAW, QUESTIONS)


# -- raw channel ------------------------------------------------------------------------------------

@dataclass(frozen=True, slots=True)
class ConversationSearches:
    """A message searched with its conversation: one RRF weight per encoded text (the message alone first), and
    for a follow-up of three searches what the learned ranker reads (``name_field``: the payload field of an
    entry's notation)."""

    weights: tuple[float, ...]
    follow_up: FollowUp | None = None
    name_field: str | None = None


def search_raw(retriever: Retriever, collection: str, text: str, depth: int, questions: bool, *,
               encoding: EncodedQueries, started: float, conversation: ConversationSearches | None = None) -> RawChannel:
    """Search with the query's ``encoding`` (and the write-time questions, when on). Blocking. ``started``:
    when the search began, before the encoding (the channel's time counts from it). With a ``conversation`` of
    several searches (a follow-up alone and with the conversation) they are fused
    (:func:`~hyde_tutor.hyde.conversation.fuse_rankings`); a follow-up's three are also ordered by the learned
    ranker (``RawChannel.ranked``)."""
    conversation = conversation or ConversationSearches(())
    with logfire.span("hyde.raw_channel", questions=questions):
        n = max(1, len(conversation.weights))
        found = retriever.store.search_batch(collection, [retriever.request(encoding, i, depth, collection=collection)
                                                          for i in range(n)])
        hits = found[0] if n == 1 else fuse_hits(found, conversation.weights)[:depth]
        ranked = (rank_follow_up(found, hits, conversation.follow_up, conversation.name_field, depth)
                  if conversation.follow_up is not None and n == 3 else None)
        channels, notes = {RAW: hits}, ()
        if questions:
            try:
                channels[QUESTIONS] = search_questions(retriever, collection, encoding, depth)
            except Exception as exc:  # noqa: BLE001 - deleted or rebuilt under us: drop the channel, keep the hits
                notes = (f"questions channel dropped: {questions_collection(collection)!r} failed "
                         f"({type(exc).__name__}: {exc})"[:300],)
    return RawChannel(channels, encoding, (time.perf_counter() - started) * 1000, notes, ranked)


def fuse_hits(rankings: Sequence[Sequence[Hit]], weights: Sequence[float]) -> list[Hit]:
    """One ranking of a conversation's searches (the fused score replaces the store's)."""
    from .conversation import fuse_rankings

    payloads = {h.doc_id: h.payload for hits in rankings for h in hits}
    fused = fuse_rankings([[h.doc_id for h in hits] for hits in rankings], weights)
    return [Hit(doc_id, score, payloads[doc_id]) for doc_id, score in fused]


def rank_follow_up(searches: Sequence[Sequence[Hit]], fused: Sequence[Hit], follow_up: FollowUp,
                   name_field: str | None, depth: int) -> list[Hit] | None:
    """A follow-up's three searches in the learned ranker's order, the first ``depth`` (its score replaces the
    fused one); None when the ranker fails (e.g. the Korean analyser): the RRF ranking stands, the search goes on."""
    from .conversation_rank import rank_hits

    try:
        ranked = rank_hits(follow_up, searches, [h.doc_id for h in fused], name_field)
    except Exception:  # noqa: BLE001 - the fused ranking is in hand: a ranker failure never fails the search
        _log.warning("hyde-tutor: the follow-up ranker failed; the RRF ranking stands", exc_info=True)
        return None
    if ranked is None:
        return None
    payloads = {h.doc_id: h.payload for hits in (*searches, fused) for h in hits}
    return [Hit(doc_id, score, payloads[doc_id]) for doc_id, score in ranked[:depth]]


def search_questions(retriever: Retriever, collection: str, enc: EncodedQueries, depth: int) -> list[Hit]:
    """Search the question points; a document matched by several questions counts once (its best)."""
    hits = retriever.store.search_batch(questions_collection(collection), [retriever.request(enc, 0, depth * 4)])[0]
    best: dict[str, Hit] = {}
    for h in hits:  # hits are score-ordered: the first one per document is its best question
        if h.doc_id not in best:  # the parent's payload, without the matched question
            best[h.doc_id] = Hit(h.doc_id, h.score, {k: v for k, v in h.payload.items() if k != "question"})
    return list(best.values())[:depth]


def top_margin(hits: Sequence[Hit]) -> float | None:
    """How sure the raw ranking is: the top-1 score's lead over the second, as a share of the top-1 score
    (0: a tie, 1: nothing else scored); None with no hits. Scale-free, so one threshold serves RRF and
    DBSF scores alike. The cascade skips generation at or above its threshold."""
    if not hits or hits[0].score <= 0:
        return None
    second = hits[1].score if len(hits) > 1 else 0.0
    return (hits[0].score - second) / hits[0].score


# -- hypothesis channels ----------------------------------------------------------------------------

def search_hypotheses(
    retriever: Retriever, collection: str, hypotheses: Sequence[Hypothesis], raw: EncodedQueries,
    policy: HydePolicy, fusion: FusionMode, depth: int, *, encoding: EncodedQueries,
) -> HypothesisChannels:
    """Run the searches of all hypotheses (``encoding``) in one batched store call. Blocking. The result's
    ``embed_ms`` is 0: the caller, who embedded the hypotheses, sets it (``dataclasses.replace``)."""
    embedded = time.perf_counter()
    with logfire.span("hyde.store_search", fusion=fusion):
        channels = _search_encoded(retriever, collection, hypotheses, encoding, raw, policy.legs, fusion, depth)
    done = time.perf_counter()
    return HypothesisChannels(channels, search_ms=(done - embedded) * 1000)


def _search_encoded(
    retriever: Retriever, collection: str, hypotheses: Sequence[Hypothesis], hyp: EncodedQueries,
    raw: EncodedQueries, legs: HydeLegs, fusion: FusionMode, depth: int,
) -> dict[str, list[Hit]]:
    if fusion == "mean":
        dense = mean_vector(np.vstack([raw.dense, hyp.dense]))
        merged = EncodedQueries(dense[None, :], [merge_sparse([*raw.sparse, *hyp.sparse])])
        return {"hyde:mean": retriever.store.search_batch(collection, [retriever.request(merged, 0, depth, collection=collection)])[0]}
    hyp = with_legs(hyp, raw, legs)
    requests = [retriever.request(hyp, i, depth, collection=collection) for i in range(len(hypotheses))]
    found = retriever.store.search_batch(collection, requests)  # one batched call for all hypotheses
    return {f"hyde:{h.perspective}": hits for h, hits in zip(hypotheses, found, strict=True)}


def with_legs(hyp: EncodedQueries, raw: EncodedQueries, legs: HydeLegs) -> EncodedQueries:
    """Hypothesis encodings with the query's own vector on the leg(s) HyDE does not replace."""
    n = len(hyp.sparse)
    if legs == "dense":
        return EncodedQueries(hyp.dense, [raw.sparse[0]] * n)
    if legs == "sparse":
        return EncodedQueries(np.repeat(raw.dense[:1], n, axis=0), hyp.sparse)
    return hyp


def merge_sparse(vectors: Sequence[SparseVec]) -> SparseVec:
    """Sum sparse vectors term by term (the sparse half of ``mean`` fusion)."""
    weights: dict[int, float] = {}
    for v in vectors:
        for i, w in zip(v.indices, v.values, strict=True):
            weights[i] = weights.get(i, 0.0) + w
    items = sorted(weights.items())
    return SparseVec(tuple(i for i, _ in items), tuple(w for _, w in items))


# -- gate, fusion -----------------------------------------------------------------------------------

def gate(channels: Channels, raw_hits: Sequence[Hit], min_agreement: int) -> Gated:
    """Keep the hypothesis channels that share at least ``min_agreement`` of their top 10 with the raw
    query's top 10 (off-topic hypotheses from a weak model drop out)."""
    if min_agreement <= 0:
        return Gated(channels)
    anchor = [h.doc_id for h in raw_hits]
    kept: dict[str, list[Hit]] = {}
    notes: list[str] = []
    for name, hits in channels.items():
        shared = agreement([h.doc_id for h in hits], anchor, AGREEMENT_DEPTH)
        if shared >= min_agreement:
            kept[name] = hits
        else:
            notes.append(f"{name} dropped as off-topic: {shared}/{AGREEMENT_DEPTH} shared with the raw top "
                         f"{AGREEMENT_DEPTH}, need {min_agreement}")
    return Gated(kept, tuple(notes))


def fuse(channels: Channels, fusion: FusionMode, weights: Weights) -> list[RetrievedDoc]:
    """One ranking from several: weighted RRF, weighted score sum (the hypotheses share their weight),
    or each document's best score (``max``, and ``mean``'s single channel deduplicated against raw)."""
    payloads: dict[str, dict[str, Any]] = {}
    for hits in channels.values():
        for h in hits:
            payloads.setdefault(h.doc_id, h.payload)
    found_by = channels_by_doc({name: [h.doc_id for h in hits] for name, hits in channels.items()})
    if fusion == "rrf":
        ranked = reciprocal_rank_fusion([[h.doc_id for h in hits] for hits in channels.values()], weights.rrf_k,
                                        [weights(n) for n in channels])
    elif fusion == "score":
        n_hyp = sum(1 for name in channels if is_hypothesis(name))
        shares = [weights(n) / (n_hyp if is_hypothesis(n) else 1) for n in channels]
        ranked = weighted_score_fusion([[(h.doc_id, h.score) for h in hits] for hits in channels.values()], shares)
    else:
        ranked = max_score_fusion([[(h.doc_id, h.score) for h in hits] for hits in channels.values()])
    return [RetrievedDoc(d, s, payloads[d], found_by[d]) for d, s in ranked]


def fuse_hyde(
    raw: Channels, hypotheses: Channels, fusion: FusionMode, weights: Weights, include_raw: bool, protect_top: int,
    lead: int = 0,
) -> list[RetrievedDoc]:
    """The hypothesis channels fused with the query-only ones (raw left out when ``include_raw`` is off;
    the questions channel always stays), the raw query's top ``protect_top`` kept on top, or (``lead``, a
    follow-up) the hypotheses' own top ``lead`` (their channels fused alone)."""
    if include_raw:
        channels = {**raw, **hypotheses}
    else:
        channels = {**({QUESTIONS: raw[QUESTIONS]} if QUESTIONS in raw else {}), **hypotheses}
    fused = fuse(channels, fusion, weights)
    if include_raw and protect_top:
        fused = keep_on_top(fused, [h.doc_id for h in raw[RAW]], protect_top)
    if lead and hypotheses:
        fused = keep_on_top(fused, [d.id for d in fuse(hypotheses, fusion, weights)], lead)
    return fused


def keep_on_top(docs: Sequence[RetrievedDoc], anchor: Sequence[str], m: int) -> list[RetrievedDoc]:
    """``docs`` with the first ``m`` of ``anchor`` on top, their scores raised to stay non-increasing
    (:func:`~hyde_tutor.hyde.fusion.protect_head` over the documents)."""
    by_id = {d.id: d for d in docs}
    order = protect_head([(d.id, d.score) for d in docs], anchor, m)
    return [RetrievedDoc(d, s, by_id[d].payload, by_id[d].channels) for d, s in order]


def plain(raw: Channels, weights: Weights) -> list[RetrievedDoc]:
    """The fallback: raw results (RRF-fused with the questions channel when it is on)."""
    if len(raw) == 1:
        return [RetrievedDoc(h.doc_id, h.score, h.payload, (RAW,)) for h in raw[RAW]]
    return fuse(raw, "rrf", weights)


# -- rerank, threshold ------------------------------------------------------------------------------

def rerank(reranker: Reranker, query: str, docs: Sequence[RetrievedDoc], texts: Sequence[str]) -> list[RetrievedDoc]:
    """Re-order ``docs`` by the reranker's score against the ORIGINAL query. Blocking."""
    scores = reranker.scores(query, texts)
    order = sorted(range(len(docs)), key=lambda i: -scores[i])
    return [RetrievedDoc(docs[i].id, scores[i], docs[i].payload, docs[i].channels) for i in order]


def threshold(docs: Sequence[RetrievedDoc], top_k: int, settings: HydeSettings) -> Thresholded:
    """Step a relative score threshold down until enough results pass, then cut to ``top_k``."""
    s = settings
    value, kept = adaptive_threshold([d.score for d in docs], min(top_k, s.threshold_min_results),
                                     s.threshold_start, s.threshold_step, s.threshold_floor)
    return Thresholded(list(docs[: min(kept, top_k)]), value)
