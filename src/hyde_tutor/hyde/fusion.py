"""Pure rank-fusion functions over ranked lists of document ids.

Used to fuse search channels (raw query, each hypothesis, ...) on the client
side. Dense + sparse fusion inside one channel is done by Qdrant itself.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

import numpy as np


def reciprocal_rank_fusion(
    rankings: Sequence[Sequence[str]], k: int = 60, weights: Sequence[float] | None = None
) -> list[tuple[str, float]]:
    """Weighted RRF: ``score(d) = sum_i w_i / (k + rank_i(d))`` with ranks starting at 1.

    Ties are broken by first appearance (earlier list, higher rank), so the result is deterministic.
    """
    if k < 1:
        raise ValueError("RRF k must be >= 1")
    if weights is None:
        weights = [1.0] * len(rankings)
    if len(weights) != len(rankings):
        raise ValueError(f"got {len(weights)} weights for {len(rankings)} rankings")
    scores: dict[str, float] = {}
    for ranking, weight in zip(rankings, weights, strict=True):
        for rank, doc_id in enumerate(dict.fromkeys(ranking), start=1):
            scores[doc_id] = scores.get(doc_id, 0.0) + weight / (k + rank)
    return sorted(scores.items(), key=lambda item: -item[1])


def max_score_fusion(scored_lists: Sequence[Sequence[tuple[str, float]]]) -> list[tuple[str, float]]:
    """Deduplicate across lists keeping each document's highest score."""
    best: dict[str, float] = {}
    for scored in scored_lists:
        for doc_id, score in scored:
            if doc_id not in best or score > best[doc_id]:
                best[doc_id] = score
    return sorted(best.items(), key=lambda item: -item[1])


def weighted_score_fusion(
    scored_lists: Sequence[Sequence[tuple[str, float]]], weights: Sequence[float], fill_missing: bool = True
) -> list[tuple[str, float]]:
    """``score(d) = sum_i w_i * score_i(d)`` over the union of the lists.

    Unlike RRF this keeps each channel's score gaps: a confident raw hit far ahead of the next one
    is not overtaken by a hypothesis that merely ranks a weaker document first. The channels must
    share one score scale (here: Qdrant's hybrid scores for the same collection).
    A list is a truncated top-N, so a document it lacks scored at most its last score: with
    ``fill_missing`` it gets that score (else 0, which punishes documents just below the cut).
    """
    if len(weights) != len(scored_lists):
        raise ValueError(f"got {len(weights)} weights for {len(scored_lists)} lists")
    firsts = [dict(reversed(list(scored))) for scored in scored_lists]  # a repeated id keeps its first score
    ids = dict.fromkeys(doc_id for scored in scored_lists for doc_id, _ in scored)
    scores: dict[str, float] = {}
    for doc_id in ids:
        total = 0.0
        for scored, first, weight in zip(scored_lists, firsts, weights, strict=True):
            floor = scored[-1][1] if (fill_missing and scored) else 0.0
            total += weight * first.get(doc_id, floor)
        scores[doc_id] = total
    return sorted(scores.items(), key=lambda item: -item[1])  # stable: ties keep first appearance


def agreement(ranking: Sequence[str], anchor: Sequence[str], depth: int = 10) -> int:
    """How many of ``ranking``'s top ``depth`` are also in ``anchor``'s top ``depth``.

    A hypothesis about the learner's topic finds some of what the query itself finds; one that
    drifted to another topic (a weak model's usual failure) shares almost nothing with it.
    """
    return len(set(ranking[:depth]) & set(anchor[:depth]))


def mean_vector(vectors: Sequence[Sequence[float]] | np.ndarray) -> np.ndarray:
    """Mean of (query + hypothesis) vectors, re-normalised: the HyDE paper's combination."""
    matrix = np.asarray(vectors, dtype=np.float32)
    if matrix.ndim != 2 or matrix.shape[0] == 0:
        raise ValueError("mean_vector needs a non-empty 2-D array")
    mean = matrix.mean(axis=0)
    norm = float(np.linalg.norm(mean))
    return mean / norm if norm > 0 else mean


def channels_by_doc(rankings: Mapping[str, Sequence[str]]) -> dict[str, tuple[str, ...]]:
    """For each document, the names of the channels whose ranking contains it."""
    found: dict[str, list[str]] = {}
    for channel, ranking in rankings.items():
        for doc_id in ranking:
            if channel not in found.setdefault(doc_id, []):
                found[doc_id].append(channel)
    return {doc_id: tuple(chs) for doc_id, chs in found.items()}


def protect_head(fused: Sequence[tuple[str, float]], anchor: Sequence[str], m: int) -> list[tuple[str, float]]:
    """Keep the first ``m`` documents of ``anchor`` (the raw query's ranking) on top, in their order.

    The rest follows in fused order. Scores of the protected head are raised just enough to stay
    non-increasing, so score-based thresholds still read the list top to bottom.
    Used when hypotheses come from a weak model: they may add candidates, not displace confident hits.
    """
    if m <= 0:
        return list(fused)
    score = dict(fused)
    head = [d for d in dict.fromkeys(anchor) if d in score][:m]
    tail = [(d, s) for d, s in fused if d not in head]
    out = [[d, score[d]] for d in head]
    floor = tail[0][1] if tail else float("-inf")
    for item in reversed(out):
        item[1] = max(item[1], floor)
        floor = item[1]
    return [(d, s) for d, s in out] + tail
