import numpy as np
import pytest

from hyde_tutor.hyde.fusion import (
    agreement,
    channels_by_doc,
    max_score_fusion,
    mean_vector,
    reciprocal_rank_fusion,
    weighted_score_fusion,
)


def test_rrf_hand_computed() -> None:
    fused = dict(reciprocal_rank_fusion([["a", "b", "c"], ["b", "a"]], k=1))
    assert fused["a"] == pytest.approx(1 / 2 + 1 / 3)
    assert fused["b"] == pytest.approx(1 / 3 + 1 / 2)
    assert fused["c"] == pytest.approx(1 / 4)


def test_rrf_order_and_tie_break_is_deterministic() -> None:
    fused = reciprocal_rank_fusion([["a", "b"], ["b", "a"]], k=60)
    assert [d for d, _ in fused] == ["a", "b"]  # equal scores: first seen wins


def test_rrf_weights_shift_the_winner() -> None:
    rankings = [["dense1", "shared"], ["sparse1", "shared"]]
    assert reciprocal_rank_fusion(rankings, k=1, weights=[3.0, 1.0])[0][0] == "dense1"
    assert reciprocal_rank_fusion(rankings, k=1, weights=[1.0, 3.0])[0][0] == "sparse1"


def test_rrf_ignores_duplicates_within_a_list_and_validates() -> None:
    fused = dict(reciprocal_rank_fusion([["a", "a", "b"]], k=1))
    assert fused["b"] == pytest.approx(1 / 3)
    with pytest.raises(ValueError):
        reciprocal_rank_fusion([["a"]], k=0)
    with pytest.raises(ValueError):
        reciprocal_rank_fusion([["a"]], weights=[1.0, 2.0])


def test_max_score_keeps_highest() -> None:
    fused = max_score_fusion([[("a", 0.2), ("b", 0.9)], [("a", 0.7)]])
    assert fused == [("b", 0.9), ("a", 0.7)]


def test_mean_vector_is_normalised_mean() -> None:
    m = mean_vector([[1.0, 0.0], [0.0, 1.0]])
    assert np.allclose(m, [2**-0.5, 2**-0.5])
    with pytest.raises(ValueError):
        mean_vector(np.zeros((0, 3)))


def test_channels_by_doc() -> None:
    assert channels_by_doc({"raw": ["a", "b"], "hyde:0": ["b"]}) == {"a": ("raw",), "b": ("raw", "hyde:0")}


def test_protect_head_keeps_the_raw_top_in_order_and_scores_monotone() -> None:
    from hyde_tutor.hyde.fusion import protect_head

    fused = [("x", 0.9), ("b", 0.8), ("y", 0.7), ("a", 0.5), ("c", 0.4)]
    out = protect_head(fused, ["a", "b", "c"], 2)
    assert [d for d, _ in out] == ["a", "b", "x", "y", "c"]
    scores = [s for _, s in out]
    assert scores == sorted(scores, reverse=True) and dict(out)["x"] == 0.9
    assert protect_head(fused, ["a"], 0) == fused
    assert [d for d, _ in protect_head(fused, ["zz", "c"], 3)][:1] == ["c"]  # ids the fusion lacks are skipped


def test_weighted_score_fusion_keeps_a_confident_raw_hit_on_top() -> None:
    raw = [("a", 2.0), ("b", 1.0), ("c", 0.9)]  # "a" is far ahead of the rest
    hypothesis = [("c", 1.0), ("b", 0.8), ("z", 0.7)]
    fused = weighted_score_fusion([raw, hypothesis], [1.0, 0.5])
    # missing from a list = that list's last score: a gets 0.7 from the hypothesis, z gets 0.9 from raw
    assert dict(fused) == pytest.approx({"a": 2.35, "b": 1.4, "c": 1.4, "z": 1.25})
    assert [d for d, _ in fused] == ["a", "b", "c", "z"]  # the b/c tie keeps first appearance
    zero = weighted_score_fusion([raw, hypothesis], [1.0, 0.5], fill_missing=False)
    assert dict(zero) == pytest.approx({"a": 2.0, "b": 1.4, "c": 1.4, "z": 0.35})
    # RRF forgets the gap: the hypothesis alone pushes "a" from first to last of the three
    assert [d for d, _ in reciprocal_rank_fusion([["a", "b", "c"], ["c", "b", "z"]], k=60)][:3] == ["c", "b", "a"]


def test_weighted_score_fusion_validates_and_ignores_repeats() -> None:
    assert weighted_score_fusion([[("a", 1.0), ("a", 0.1)]], [2.0]) == [("a", 2.0)]
    assert weighted_score_fusion([[("a", 1.0)], [("b", 3.0)]], [1.0, 0.0])[0] == ("a", 1.0)
    assert weighted_score_fusion([[("a", 1.0)], []], [1.0, 1.0]) == [("a", 1.0)]  # an empty list adds nothing
    with pytest.raises(ValueError):
        weighted_score_fusion([[("a", 1.0)]], [1.0, 1.0])


def test_agreement_counts_shared_documents_in_both_tops() -> None:
    assert agreement(["a", "b", "x"], ["b", "a", "c"]) == 2
    assert agreement(["x", "y"], ["a", "b"]) == 0
    assert agreement(["a", "b", "c"], ["c", "b", "a"], depth=1) == 0  # only each list's first counts
    assert agreement(["a", "b", "c"], ["c", "b", "a"], depth=2) == 1
