"""Standard IR metrics over one ranked list and graded relevance labels (pure functions)."""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence


def recall_at_k(ranked: Sequence[str], relevant: Mapping[str, int], k: int) -> float:
    """Share of relevant documents found in the top ``k``."""
    rel = {d for d, g in relevant.items() if g > 0}
    if not rel:
        return 0.0
    return len(rel.intersection(ranked[:k])) / len(rel)


def precision_at_k(ranked: Sequence[str], relevant: Mapping[str, int], k: int) -> float:
    """Share of the top ``k`` slots holding a relevant document (``k`` is the denominator)."""
    return sum(1 for d in ranked[:k] if relevant.get(d, 0) > 0) / k


def mrr_at_k(ranked: Sequence[str], relevant: Mapping[str, int], k: int) -> float:
    """Reciprocal rank of the first relevant document within the top ``k`` (0 if none)."""
    for rank, d in enumerate(ranked[:k], start=1):
        if relevant.get(d, 0) > 0:
            return 1.0 / rank
    return 0.0


def ndcg_at_k(ranked: Sequence[str], relevant: Mapping[str, int], k: int) -> float:
    """nDCG with linear gains (as trec_eval / BEIR): ``sum rel_i / log2(i + 1)``."""
    dcg = sum(relevant.get(d, 0) / math.log2(i + 2) for i, d in enumerate(ranked[:k]))
    ideal = sorted((g for g in relevant.values() if g > 0), reverse=True)[:k]
    idcg = sum(g / math.log2(i + 2) for i, g in enumerate(ideal))
    return dcg / idcg if idcg > 0 else 0.0


METRICS = {
    "recall@1": lambda r, q: recall_at_k(r, q, 1),
    "recall@5": lambda r, q: recall_at_k(r, q, 5),
    "recall@10": lambda r, q: recall_at_k(r, q, 10),
    "precision@5": lambda r, q: precision_at_k(r, q, 5),
    "mrr@10": lambda r, q: mrr_at_k(r, q, 10),
    "ndcg@10": lambda r, q: ndcg_at_k(r, q, 10),
}


def score_run(run: Mapping[str, Sequence[str]], qrels: Mapping[str, Mapping[str, int]]) -> dict[str, float]:
    """Mean of every metric in :data:`METRICS` over the queries that have labels."""
    qids = [q for q in run if qrels.get(q)]
    if not qids:
        return {name: 0.0 for name in METRICS}
    return {name: sum(fn(run[q], qrels[q]) for q in qids) / len(qids) for name, fn in METRICS.items()}
