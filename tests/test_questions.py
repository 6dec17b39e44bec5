"""Write-time questions: parsing, cache reuse on re-ingest, failures that do not stop the ingest,
one result per document, the questions channel in the pipeline, and experiment arms."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from pydantic_ai.messages import ModelResponse, TextPart
from pydantic_ai.models.function import FunctionModel

from hyde_tutor import EdgeStore
from hyde_tutor.config import HydeSettings, QuestionSettings
from hyde_tutor.corpus.documents import Document
from hyde_tutor.experiment.assignment import Experiment, decide
from hyde_tutor.hyde import QUESTIONS, RAW, HydeRetriever
from hyde_tutor.hyde.hypotheses import HypothesisGenerator, MemoryCache
from hyde_tutor.corpus.ingest import IngestRequest, ingest_documents
from hyde_tutor.hyde.question_index import question_point_id
from hyde_tutor.hyde.question_index import ingest_questions
from hyde_tutor.hyde.questions import QuestionCache, QuestionGenerator, parse_questions
from hyde_tutor.retrieval.retriever import Retriever
from hyde_tutor.retrieval.store import questions_collection

DOCS = [
    Document("g1", "-고 싶다 желание 가고 싶어요", {"pattern": "-고 싶다"}),
    Document("g2", "-(으)ㄹ 수 있다 возможность 할 수 있어요", {"pattern": "-(으)ㄹ 수 있다"}),
    Document("g3", "-지만 противопоставление 비싸지만 좋아요", {"pattern": "-지만"}),
]
QUESTIONS_FOR = {
    "g1": ["Как сказать по-корейски что я мечтаю поехать в Сеул?",
           "Как сказать по-корейски что я мечтаю поехать домой?",
           "Как сказать по-корейски что я мечтаю поехать на море?"],
    "g2": ["Как сказать по-корейски что я умею плавать?", "Как сказать что мне удастся прийти?"],
    "g3": ["Как соединить два противоположных утверждения?"],
}



def _model(calls: list[str], fail: set[str] = frozenset(), questions=QUESTIONS_FOR) -> FunctionModel:
    async def fn(messages, info):
        prompt = str(messages[-1].parts[-1].content)
        doc = next((d for d in DOCS if d.text in prompt), None)
        doc_id = doc.id if doc else "?"
        calls.append(doc_id)
        if doc_id in fail:
            raise ConnectionError("backend down for this document")
        return ModelResponse(parts=[TextPart("\n".join(f"{i + 1}. {q}" for i, q in enumerate(questions.get(doc_id, []))))])

    return FunctionModel(fn)


def _generator(model, cache: QuestionCache | None) -> QuestionGenerator:
    return QuestionGenerator(model, "fake-model", cache=cache, settings=QuestionSettings(timeout_s=2.0))


@pytest.fixture()
def store(tmp_path: Path):
    s = EdgeStore(tmp_path / "edge")
    yield s
    s.close()


def _ingest_all(store, embedder, bm25, generator, k=3, docs=DOCS, **kw):
    ingest_documents(docs, IngestRequest(collection="grammar", progress=False), store, embedder, bm25)
    request = IngestRequest(collection="grammar", questions=k, progress=False, **kw)
    return ingest_questions(docs, request, store, embedder, bm25, generator)


def test_parse_questions_strips_numbering_and_drops_junk() -> None:
    text = "1. Как сказать «хочу»?\n- Как сказать «хочу»?\n\nок\n2) Почему корейцы говорят 가고 싶어요?\n• Третий вопрос ученика?"
    assert parse_questions(text, 5) == ["Как сказать «хочу»?", "Почему корейцы говорят 가고 싶어요?", "Третий вопрос ученика?"]
    assert parse_questions(text, 2) == ["Как сказать «хочу»?", "Почему корейцы говорят 가고 싶어요?"]
    assert parse_questions("", 3) == []


def test_questions_are_stored_one_point_each_and_reused_from_cache(store, hash_embedder, bm25, tmp_path) -> None:
    calls: list[str] = []
    cache = QuestionCache(tmp_path / "cache" / "questions.v1.jsonl")
    first = _ingest_all(store, hash_embedder, bm25, _generator(_model(calls), cache))
    assert sorted(calls) == ["g1", "g2", "g3"]
    assert first.generated == 3 and not first.failed
    assert first.points_in_collection == 3 + 2 + 1 == store.count(questions_collection("grammar"))

    # Unchanged documents: nothing generated, nothing written.
    second = _ingest_all(store, hash_embedder, bm25, _generator(_model(calls), cache))
    assert len(calls) == 3 and second.unchanged == 3 and second.points_written == 0

    # Rebuilt index, fresh process (cache re-read from disk): questions come from the cache file, no LLM call.
    reread = QuestionCache(cache.path)
    assert len(reread) == 3
    third = _ingest_all(store, hash_embedder, bm25, _generator(_model(calls), reread), recreate=True)
    assert len(calls) == 3 and third.from_cache == 3 and third.points_in_collection == 6

    # --regenerate ignores the cache.
    fourth = _ingest_all(store, hash_embedder, bm25, _generator(_model(calls), reread), regenerate=True)
    assert len(calls) == 6 and fourth.generated == 3
    lines = [json.loads(line) for line in cache.path.read_text(encoding="utf-8").splitlines()]
    assert {row["doc_id"] for row in lines} == {"g1", "g2", "g3"} and all(row["model"] == "fake-model" for row in lines)


def test_changed_document_drops_its_stale_questions(store, hash_embedder, bm25, tmp_path) -> None:
    calls: list[str] = []
    _ingest_all(store, hash_embedder, bm25, _generator(_model(calls), None))
    changed = [Document("g1", DOCS[0].text + " 먹고 싶어요", DOCS[0].payload), *DOCS[1:]]
    fewer = {**QUESTIONS_FOR, "g1": ["Как сказать по-корейски что я хочу есть?"]}
    report = _ingest_all(store, hash_embedder, bm25, _generator(_model(calls, questions=fewer), None), docs=changed)
    assert calls[3:] == ["g1"] and report.unchanged == 2
    target = questions_collection("grammar")
    assert store.count(target) == 1 + 2 + 1
    assert store.stored_hashes(target, [question_point_id("g1", 1), question_point_id("g1", 2)]) == {}


def test_failed_generation_is_reported_and_does_not_stop_the_ingest(store, hash_embedder, bm25) -> None:
    calls: list[str] = []
    report = _ingest_all(store, hash_embedder, bm25, _generator(_model(calls, fail={"g2"}), None))
    assert set(report.failed) == {"g2"} and report.failed["g2"].startswith("llm_error")
    assert "g2" in report.summary() and "document itself was ingested" in report.summary()
    assert store.count("grammar") == 3  # the document itself is searchable
    assert store.count(questions_collection("grammar")) == 3 + 1
    # The next run retries only the failed document.
    again = _ingest_all(store, hash_embedder, bm25, _generator(_model(calls), None))
    assert calls[3:] == ["g2"] and again.generated == 1 and not again.failed


def _pipeline(store, embedder, bm25, **questions) -> HydeRetriever:
    retriever = Retriever(store, embedder, bm25)
    hs = HydeSettings(n_hypotheses=1, timeout_s=2.0, min_hangul_chars=0)

    def factory(domain):
        model = FunctionModel(lambda m, i: ModelResponse(parts=[TextPart("мечтаю поехать 가고 싶어요")]))
        return HypothesisGenerator(model, "fake", domain, cache=MemoryCache(), hyde=hs)

    return HydeRetriever(retriever, factory, hs, questions=QuestionSettings(**questions))


async def test_a_document_matched_by_several_questions_is_returned_once(store, hash_embedder, bm25) -> None:
    _ingest_all(store, hash_embedder, bm25, _generator(_model([]), None))
    hr = _pipeline(store, hash_embedder, bm25)
    query = "как сказать по-корейски что я мечтаю поехать"
    raw_q = hr.retriever.store.search_batch(questions_collection("grammar"),
                                            [hr.retriever.request(hr.retriever.encode([query]), 0, 10)])[0]
    assert [h.doc_id for h in raw_q[:3]] == ["g1", "g1", "g1"]  # three question points match ...
    for use_hyde in (False, True):
        res = await hr.search("grammar", query, top_k=10, use_hyde=use_hyde, use_questions=True)
        ids = [d.id for d in res.results]
        assert len(ids) == len(set(ids)) == 3  # ... the document comes back once
        g1 = res.results[ids.index("g1")]
        assert res.used_questions and QUESTIONS in g1.channels and RAW in g1.channels
        assert "question" not in g1.payload and g1.payload["pattern"] == "-고 싶다"


async def test_questions_channel_is_off_by_default_and_missing_index_is_not_an_error(store, hash_embedder, bm25) -> None:
    ingest_documents(DOCS, IngestRequest(collection="grammar", progress=False), store, hash_embedder, bm25)
    hr = _pipeline(store, hash_embedder, bm25)
    off = await hr.search("grammar", "хочу поехать", use_hyde=False)
    assert not off.used_questions and all(d.channels == (RAW,) for d in off.results)
    missing = await hr.search("grammar", "хочу поехать", use_hyde=False, use_questions=True)
    assert not missing.used_questions and missing.results
    assert any("ingest --questions" in e for e in missing.errors)
    on_by_setting = _pipeline(store, hash_embedder, bm25, enabled=True)
    _ingest_all(store, hash_embedder, bm25, _generator(_model([]), None))
    assert (await on_by_setting.search("grammar", "хочу поехать", use_hyde=False)).used_questions


def test_experiment_arms_route_the_questions_channel() -> None:
    four = Experiment(arms=("raw", "hyde", "questions", "hyde+questions"))
    arms = {four.arm(f"user-{i}") for i in range(400)}
    assert arms == {"raw", "hyde", "questions", "hyde+questions"}
    counts = {a: sum(four.arm(f"user-{i}") == a for i in range(4000)) for a in arms}
    assert all(800 < c < 1200 for c in counts.values())  # an even split
    subject = next(f"user-{i}" for i in range(400) if four.arm(f"user-{i}") == "hyde+questions")
    d = decide(None, four, subject, default=False)
    assert (d.use_hyde, d.use_questions, d.reason) == (True, True, "experiment")
    asked = decide(False, four, subject, default=False)  # (issue 13) the arm decides; the request is recorded
    assert (asked.use_hyde, asked.use_questions, asked.reason, asked.requested) == (True, True, "experiment", False)
    debug = Experiment(arms=four.arms, explicit_wins=True)
    forced = decide(False, debug, subject, default=False)
    assert (forced.use_hyde, forced.use_questions, forced.reason) == (False, True, "explicit")
    assert decide(None, four, None, default=True).use_questions is None  # not enrolled: retriever default
    with pytest.raises(ValueError, match="arms"):
        Experiment(arms=("raw", "typo"))


def test_ingest_sync_drops_the_questions_of_documents_that_left(store, hash_embedder, bm25) -> None:
    from hyde_tutor.hyde.question_index import sync_questions

    _ingest_all(store, hash_embedder, bm25, _generator(_model([]), None))
    target = questions_collection("grammar")
    assert store.count(target) == 3 + 2 + 1
    request = IngestRequest(collection="grammar", progress=False, sync=True, on_sync=sync_questions)
    report = ingest_documents(DOCS[:2], request, store, hash_embedder, bm25)
    assert report.deleted == 1 and store.count("grammar") == 2
    assert store.count(target) == 3 + 2  # g3's question went with it
    assert store.stored_hashes(target, [question_point_id("g3", 0)]) == {}
    # Without the hook the document ingest leaves a derived index alone.
    ingest_documents(DOCS[:1], request.replace(on_sync=None), store, hash_embedder, bm25)
    assert store.count("grammar") == 1 and store.count(target) == 3 + 2
