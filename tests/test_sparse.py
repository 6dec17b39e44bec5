import subprocess
import sys

import pytest

from hyde_tutor.retrieval.sparse import Bm25Encoder, bm25_document_weights, query_weights, term_index


def test_term_index_is_stable_across_processes() -> None:
    here = [term_index(t) for t in ("고", "싶", "желан")]
    code = "from hyde_tutor.retrieval.sparse import term_index; print([term_index(t) for t in ('고', '싶', 'желан')])"
    there = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout.strip()
    assert str(here) == there
    assert all(0 <= i < 2**31 for i in here)


def test_bm25_saturates_term_frequency_and_normalises_length() -> None:
    one = bm25_document_weights(["a"], k1=1.2, b=0.75, avg_len=1)
    three = bm25_document_weights(["a", "a", "a"], k1=1.2, b=0.0, avg_len=1)
    assert one.values[0] == pytest.approx(1.0)  # tf=1 at average length
    assert 1.0 < three.values[0] < 2.2  # grows with tf, bounded by k1 + 1
    short = bm25_document_weights(["a", "b"], k1=1.2, b=0.75, avg_len=10)
    long = bm25_document_weights(["a"] + ["x"] * 30, k1=1.2, b=0.75, avg_len=10)
    assert dict(zip(short.indices, short.values))[term_index("a")] > dict(zip(long.indices, long.values))[term_index("a")]


def test_query_weights_are_one_per_distinct_term() -> None:
    q = query_weights(["a", "b", "a"])
    assert len(q) == 2 and set(q.values) == {1.0}
    assert list(q.indices) == sorted(q.indices)


def test_encoder_matches_korean_usage_to_pattern(bm25: Bm25Encoder) -> None:
    doc = bm25.encode_documents(["-고 싶다 — желание"])[0]
    query = bm25.encode_queries(["부산에 가고 싶어요"])[0]
    assert set(doc.indices) & set(query.indices)
