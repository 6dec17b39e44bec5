"""Reranking with a real (tiny) CrossEncoder that this test builds and saves itself."""

from __future__ import annotations

from pathlib import Path

import pytest

from hyde_tutor.errors import HydeTutorError
from hyde_tutor.hyde.rerank import CrossEncoderReranker

WORDS = ["хочу", "поехать", "в", "пусан", "но", "желание", "частица", "тема", "가고", "싶어요", "-고", "싶다", "-지만"]


@pytest.fixture(scope="module")
def tiny_cross_encoder(tmp_path_factory: pytest.TempPathFactory) -> Path:
    import torch
    from transformers import BertConfig, BertForSequenceClassification, BertTokenizerFast

    folder = tmp_path_factory.mktemp("tiny-ce")
    vocab = folder / "vocab.txt"
    vocab.write_text("\n".join(["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]", *WORDS]) + "\n", encoding="utf-8")
    tokenizer = BertTokenizerFast(vocab_file=str(vocab), do_lower_case=True)
    torch.manual_seed(0)
    config = BertConfig(vocab_size=len(WORDS) + 5, hidden_size=16, num_hidden_layers=1, num_attention_heads=2,
                        intermediate_size=32, max_position_embeddings=64, num_labels=1,
                        initializer_range=1.0)
    BertForSequenceClassification(config).save_pretrained(folder)
    tokenizer.save_pretrained(folder)
    return folder


def test_cross_encoder_scores_pairs(tiny_cross_encoder: Path) -> None:
    reranker = CrossEncoderReranker(tiny_cross_encoder)
    texts = ["-고 싶다 желание 가고 싶어요", "-지만 но", "частица тема"]
    scores = reranker.scores("хочу поехать в пусан", texts)
    assert len(scores) == 3 and all(isinstance(s, float) for s in scores)
    assert scores == reranker.scores("хочу поехать в пусан", texts)  # deterministic
    assert len(set(scores)) == 3
    assert reranker.scores("q", []) == []


async def test_reranker_in_the_pipeline_orders_by_cross_encoder(tiny_cross_encoder: Path, tmp_path: Path, hash_embedder, bm25) -> None:
    from hyde_tutor import EdgeStore
    from hyde_tutor.config import HydeSettings
    from hyde_tutor.hyde import HydeRetriever
    from hyde_tutor.corpus.ingest import IngestRequest, ingest_documents
    from hyde_tutor.retrieval.retriever import Retriever

    from .test_store import DOCS

    store = EdgeStore(tmp_path / "e")
    ingest_documents(DOCS, IngestRequest(collection="grammar", progress=False), store, hash_embedder, bm25)
    reranker = CrossEncoderReranker(tiny_cross_encoder)
    hr = HydeRetriever(Retriever(store, hash_embedder, bm25), lambda d: None, HydeSettings(enabled=False), reranker=reranker)  # type: ignore[arg-type,return-value]
    res = await hr.search("grammar", "хочу поехать", top_k=4)
    store.close()
    from hyde_tutor.corpus.rendering import payload_text

    expected = reranker.scores("хочу поехать", [payload_text(d.payload) for d in res.results])
    assert [d.score for d in res.results] == pytest.approx(expected)
    assert [d.score for d in res.results] == sorted((d.score for d in res.results), reverse=True)


def test_missing_reranker_folder_is_a_clear_error(tmp_path: Path) -> None:
    with pytest.raises(HydeTutorError, match="HYDE_HYDE__RERANKER_MODEL"):
        CrossEncoderReranker(tmp_path / "nope")
