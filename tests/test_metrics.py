import math

import pytest

from hyde_tutor.evaluation.metrics import mrr_at_k, ndcg_at_k, precision_at_k, recall_at_k, score_run

REL = {"a": 2, "b": 1}


def test_recall_precision_mrr() -> None:
    ranked = ["x", "a", "y", "b"]
    assert recall_at_k(ranked, REL, 1) == 0.0
    assert recall_at_k(ranked, REL, 2) == 0.5
    assert recall_at_k(ranked, REL, 4) == 1.0
    assert precision_at_k(ranked, REL, 4) == 0.5
    assert precision_at_k(ranked, REL, 5) == 0.4  # k is the denominator even past the list end
    assert mrr_at_k(ranked, REL, 10) == 0.5
    assert mrr_at_k(ranked, REL, 1) == 0.0


def test_ndcg_graded() -> None:
    assert ndcg_at_k(["a", "b"], REL, 10) == pytest.approx(1.0)
    swapped = (1 / math.log2(2) + 2 / math.log2(3)) / (2 / math.log2(2) + 1 / math.log2(3))
    assert ndcg_at_k(["b", "a"], REL, 10) == pytest.approx(swapped)
    assert ndcg_at_k(["x"], REL, 10) == 0.0
    assert ndcg_at_k(["a"], {}, 10) == 0.0


def test_score_run_averages_over_labelled_queries() -> None:
    run = {"q1": ["a"], "q2": ["x"], "unlabelled": ["a"]}
    scores = score_run(run, {"q1": {"a": 1}, "q2": {"b": 1}})
    assert scores["recall@1"] == 0.5
    assert scores["mrr@10"] == 0.5
