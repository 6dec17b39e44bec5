"""The HyDE pipeline: parallel channels, fusion modes, fallbacks, rerank, threshold, result shape."""

from __future__ import annotations

import asyncio
import time
from pathlib import Path

import pytest
from pydantic_ai.messages import ModelResponse, TextPart
from pydantic_ai.models.function import FunctionModel

from hyde_tutor import EdgeStore, QueryValidationError
from hyde_tutor.config import HydeSettings
from hyde_tutor.hyde import HydeRetriever
from hyde_tutor.hyde.hypotheses import HypothesisGenerator, MemoryCache
from hyde_tutor.corpus.ingest import IngestRequest, ingest_documents
from hyde_tutor.hyde.rerank import adaptive_threshold
from hyde_tutor.retrieval.retriever import Retriever
from hyde_tutor.retrieval.store import Hit


WANT_TO = "Конструкция: -고 싶다 желание хотеть. Пример: 가고 싶어요."


def _text_model(text_for=lambda prompt: WANT_TO, delay: float = 0.0, log: list | None = None):
    async def fn(messages, info):
        prompt = str(messages[-1].parts[-1].content)
        start = time.perf_counter()
        await asyncio.sleep(delay)
        if log is not None:
            log.append((start, time.perf_counter()))
        result = text_for(prompt)
        if isinstance(result, Exception):
            raise result
        return ModelResponse(parts=[TextPart(result)])

    return FunctionModel(fn)


def _hyde(retriever, model, **settings) -> HydeRetriever:
    hs = HydeSettings(**{"n_hypotheses": 2, "timeout_s": 2.0, **settings})
    return HydeRetriever(retriever, lambda domain: HypothesisGenerator(model, "fake", domain, cache=MemoryCache(), hyde=hs), hs)


async def test_hyde_search_result_shape(retriever) -> None:
    hr = _hyde(retriever, _text_model(lambda p: WANT_TO + p[-12:]))
    res = await hr.search("grammar", "Как сказать про мечту поехать?", top_k=3)
    assert res.used_hyde and res.fallback_reason is None
    assert len(res.hypotheses) == 2 and res.results[0].id == "g1"
    assert "raw" in res.results[0].channels or any(c.startswith("hyde:") for c in res.results[0].channels)
    assert any(c.startswith("hyde:") for d in res.results for c in d.channels)
    t = res.timings
    assert t.total_ms >= t.generate_ms > 0 and t.embed_ms > 0 and t.search_ms > 0 and t.raw_ms > 0
    assert res.usage.requests == 2
    assert len(res.results) <= 3


async def test_raw_channel_runs_while_hypotheses_are_generated(retriever) -> None:
    log: list = []
    hr = _hyde(retriever, _text_model(delay=0.3, log=log))
    raw_calls: list[float] = []
    original = retriever.store.search_batch

    def spy(name, requests):
        raw_calls.append(time.perf_counter())
        return original(name, requests)

    retriever.store.search_batch = spy  # type: ignore[method-assign]
    await hr.search("grammar", "хочу", top_k=2)
    generation_end = min(end for _, end in log)
    assert raw_calls[0] < generation_end  # raw search finished before any hypothesis came back
    assert len(raw_calls) == 2  # one raw call + ONE batched call for all hypotheses


@pytest.mark.parametrize(
    ("model_text", "reason"),
    [
        (lambda p: ConnectionError("connection refused"), "llm_error"),
        (lambda p: "", "empty_hypotheses"),
    ],
)
async def test_fallbacks_return_raw_results(retriever, model_text, reason) -> None:
    hr = _hyde(retriever, _text_model(model_text))
    res = await hr.search("grammar", "хотеть 가고 싶어요", top_k=2)
    assert (res.used_hyde, res.fallback_reason) == (False, reason)
    assert res.results and res.results[0].id == "g1" and res.results[0].channels == ("raw",)


async def test_timeout_falls_back(retriever) -> None:
    hr = _hyde(retriever, _text_model(delay=5), timeout_s=0.2)
    res = await hr.search("grammar", "хотеть", top_k=2)
    assert res.fallback_reason == "timeout" and res.results


async def test_llm_backend_that_cannot_start_falls_back(retriever) -> None:
    def broken(domain):
        raise RuntimeError("llama server failed to start")

    hr = HydeRetriever(retriever, broken, HydeSettings())
    res = await hr.search("grammar", "хотеть", top_k=2)
    assert res.fallback_reason == "llm_error" and "failed to start" in res.errors[0] and res.results


async def test_no_hyde_results_falls_back(retriever) -> None:
    original = retriever.store.search_batch

    def empty_for_hypotheses(name, requests):
        return original(name, requests) if len(requests) == 1 else [[] for _ in requests]

    retriever.store.search_batch = empty_for_hypotheses  # type: ignore[method-assign]
    hr = _hyde(retriever, _text_model(lambda p: WANT_TO + p[-8:]))
    res = await hr.search("grammar", "хотеть", top_k=2, include_raw=False)
    assert res.fallback_reason == "no_results" and res.results[0].channels == ("raw",)


async def test_disabled_and_precedence(retriever) -> None:
    calls = []
    model = _text_model(lambda p: calls.append(p) or WANT_TO + p[-5:])
    off_by_default = _hyde(retriever, model, enabled=False)
    res = await off_by_default.search("grammar", "хотеть")
    assert (res.used_hyde, res.fallback_reason, calls) == (False, "disabled", [])
    forced = await off_by_default.search("grammar", "хотеть", use_hyde=True)
    assert forced.used_hyde and calls
    on_by_default = _hyde(retriever, model, enabled=True)
    assert (await on_by_default.search("grammar", "хотеть", use_hyde=False)).fallback_reason == "disabled"


@pytest.mark.parametrize("fusion", ["rrf", "max", "mean", "score"])
async def test_every_fusion_mode_runs(retriever, fusion) -> None:
    hr = _hyde(retriever, _text_model(lambda p: WANT_TO + p[-8:]))
    res = await hr.search("grammar", "мечтаю поехать", top_k=3, fusion=fusion)
    assert res.used_hyde and res.fusion == fusion and res.results[0].id == "g1"
    if fusion == "mean":
        assert {c for d in res.results for c in d.channels} <= {"raw", "hyde:mean"}


def test_fuse_on_hand_made_rankings(retriever) -> None:
    hr = _hyde(retriever, _text_model(), rrf_k=1, hypothesis_weight=1.0)
    channels = {
        "raw": [Hit("a", 0.9, {}), Hit("b", 0.5, {})],
        "hyde:rule": [Hit("b", 0.8, {}), Hit("c", 0.95, {})],
        "hyde:example": [Hit("b", 0.7, {})],
    }
    rrf = hr._fuse(channels, "rrf")
    assert [d.id for d in rrf] == ["b", "a", "c"]  # b: 1/3 + 1/2 + 1/2
    assert rrf[0].channels == ("raw", "hyde:rule", "hyde:example")
    top = hr._fuse(channels, "max")
    assert [(d.id, d.score) for d in top] == [("c", 0.95), ("a", 0.9), ("b", 0.8)]


async def test_hyde_only_excludes_raw_channel(retriever) -> None:
    hr = _hyde(retriever, _text_model(lambda p: WANT_TO + p[-8:]))
    res = await hr.search("grammar", "мечтаю", top_k=4, include_raw=False)
    assert res.used_hyde and all("raw" not in d.channels for d in res.results)


class SpyReranker:
    def __init__(self) -> None:
        self.queries: list[str] = []

    def scores(self, query, texts):
        self.queries.append(query)
        return [1.0 if "-지만" in t else 0.0 for t in texts]


async def test_reranker_scores_against_the_original_query(retriever) -> None:
    spy = SpyReranker()
    hr = _hyde(retriever, _text_model(lambda p: WANT_TO + p[-8:]))
    hr.reranker = spy
    res = await hr.search("grammar", "исходный вопрос про но", top_k=3)
    assert spy.queries == ["исходный вопрос про но"]  # never the hypothesis
    assert res.results[0].id == "g3" and res.results[0].score == 1.0
    assert res.timings.rerank_ms > 0
    seen: list[int] = []
    spy.scores = lambda q, texts: seen.append(len(texts)) or [0.0] * len(texts)  # type: ignore[method-assign]
    await hr.search("grammar", "вопрос", top_k=1, rerank_candidates=2)
    assert seen == [2]  # rerank_top_k / rerank_candidates limits what the reranker sees


def test_adaptive_threshold_steps_down() -> None:
    assert adaptive_threshold([1.0, 0.95, 0.5, 0.2], 2, 0.9, 0.1, 0.3) == (0.9, 2)
    assert adaptive_threshold([1.0, 0.55, 0.5, 0.2], 3, 0.9, 0.1, 0.3) == (0.5, 3)
    assert adaptive_threshold([1.0, 0.1, 0.1], 3, 0.9, 0.1, 0.4) == (0.4, 1)  # floor reached
    # logits are min-max scaled: [1, 0.25, 0] -> 0.25 passes only once the threshold reaches 0.1
    assert adaptive_threshold([5.0, -1.0, -3.0], 2, 0.9, 0.2, 0.1) == pytest.approx((0.1, 2))
    assert adaptive_threshold([0.3, 0.1], 1, 0.0, 0.1, 0.0) == (None, 2)  # off


async def test_threshold_is_reported_and_applied(retriever) -> None:
    hr = _hyde(retriever, _text_model(lambda p: WANT_TO + p[-8:]), threshold_start=0.99, threshold_floor=0.97,
               threshold_step=0.01, threshold_min_results=10)
    res = await hr.search("grammar", "хотеть 가고 싶어요", top_k=4)
    assert res.effective_threshold == pytest.approx(0.97)  # never enough results: stopped at the floor
    scores = [d.score for d in res.results]
    assert res.results and min(scores) / max(scores) >= 0.97 - 1e-9
    unfiltered = await _hyde(retriever, _text_model(lambda p: WANT_TO + p[-8:])).search("grammar", "хотеть 가고 싶어요", top_k=4)
    assert unfiltered.effective_threshold is None and len(unfiltered.results) >= len(res.results)


@pytest.mark.parametrize("bad", ["", "   ", "я" * 5000, None, 42])
async def test_bad_queries_raise_typed_errors(retriever, bad) -> None:
    hr = _hyde(retriever, _text_model())
    with pytest.raises(QueryValidationError):
        await hr.search("grammar", bad)


async def test_protect_top_keeps_raw_hits_above_off_topic_hypotheses(retriever) -> None:
    off_topic = _text_model(lambda p: "-지만 противопоставление но 비싸지만 좋아요 " + p[-6:])
    query = "-고 싶다 хотеть"
    unprotected = await _hyde(retriever, off_topic, protect_top=0).search("grammar", query, top_k=4)
    assert unprotected.results[0].id == "g3"  # two hypothesis channels outvote the raw channel
    protected = await _hyde(retriever, off_topic, protect_top=1).search("grammar", query, top_k=4)
    assert protected.used_hyde and protected.results[0].id == "g1" and protected.results[1].id == "g3"
    scores = [d.score for d in protected.results]
    assert scores == sorted(scores, reverse=True)


def test_fusion_policy_defaults_follow_the_model_and_settings_win(isolated_env) -> None:
    from hyde_tutor.config import Settings
    from hyde_tutor.hyde import STRONG_MODEL_POLICY, WEAK_MODEL_POLICY, HydePolicy

    local = HydeRetriever.from_settings(Settings(), retriever=object())  # type: ignore[arg-type]
    assert local.policy == WEAK_MODEL_POLICY == HydePolicy(1, "score", 0.5, 3, 0, enabled=False,  # the embedded model
                                                           followup_lead=0, named_lead=0, named_lead_new=0)  # nor lead
    api = HydeRetriever.from_settings(Settings(llm={"provider": "openai"}, openai={"api_key": "sk-test"}), retriever=object())  # type: ignore[arg-type]
    assert api.policy == STRONG_MODEL_POLICY == HydePolicy(1, "score", 3.0, 0, 0)  # chosen on recordings, per cost
    pinned = Settings(hyde={"n_hypotheses": 4, "fusion": "rrf", "hypothesis_weight": 2.0, "min_agreement": 0,
                            "protect_top": 5})
    assert HydeRetriever.from_settings(pinned, retriever=object()).policy == HydePolicy(4, "rrf", 2.0, 0, 5, enabled=False, followup_lead=0, named_lead=0, named_lead_new=0)  # type: ignore[arg-type]
    on = Settings(hyde={"enabled": True})
    assert HydeRetriever.from_settings(on, retriever=object()).policy.enabled  # type: ignore[arg-type]
    assert HydeRetriever(None, lambda d: None, HydeSettings()).policy == STRONG_MODEL_POLICY  # type: ignore[arg-type]


def test_score_fusion_splits_the_hypothesis_weight_over_n(retriever) -> None:
    hr = _hyde(retriever, _text_model(), hypothesis_weight=0.5)
    channels = {
        "raw": [Hit("a", 2.0, {}), Hit("b", 1.0, {})],
        "hyde:rule": [Hit("b", 0.8, {}), Hit("c", 0.6, {})],
        "hyde:example": [Hit("b", 0.4, {})],
    }
    fused = {d.id: d.score for d in hr._fuse(channels, "score")}
    # weight 0.5 split over 2 hypotheses; a missing document takes the channel's last score
    assert fused == pytest.approx({"a": 2.0 + 0.25 * 0.6 + 0.25 * 0.4, "b": 1.0 + 0.25 * 0.8 + 0.25 * 0.4,
                                   "c": 1.0 + 0.25 * 0.6 + 0.25 * 0.4})
    assert [d.id for d in hr._fuse(channels, "score")] == ["a", "b", "c"]


@pytest.fixture()
def clustered(tmp_path: Path, hash_embedder, bm25):
    """8 entries about -고 싶다, 8 about -지만 and 40 unrelated fillers: top-10 overlaps are meaningful."""
    from hyde_tutor.corpus.documents import Document

    docs = [Document(f"want{i}", f"-고 싶다 желание хотеть мечтать 가고 싶어요 вариант{i}", {}) for i in range(8)]
    docs += [Document(f"but{i}", f"-지만 противопоставление но однако 비싸지만 좋아요 вариант{i}", {}) for i in range(8)]
    docs += [Document(f"filler{i}", f"посторонний текст номер{i} слово{i} 단어{i}", {}) for i in range(40)]
    store = EdgeStore(tmp_path / "clustered")
    ingest_documents(docs, IngestRequest(collection="grammar", progress=False), store, hash_embedder, bm25)
    r = Retriever(store, hash_embedder, bm25)
    yield r
    r.close()


async def test_off_topic_hypotheses_are_dropped_by_agreement(clustered) -> None:
    query = "-고 싶다 хотеть мечтать"
    off_topic = _text_model(lambda p: "-지만 противопоставление но однако 비싸지만 좋아요 " + p[-6:])
    gated = await _hyde(clustered, off_topic, min_agreement=3).search("grammar", query, top_k=5)
    assert not gated.used_hyde and gated.fallback_reason == "off_topic"
    assert all(d.id.startswith("want") for d in gated.results)  # the raw results, untouched
    assert len(gated.hypotheses) == 2 and any("off-topic" in e for e in gated.errors)
    ungated = await _hyde(clustered, off_topic, min_agreement=0).search("grammar", query, top_k=10)
    assert ungated.used_hyde and any(d.id.startswith("but") for d in ungated.results)

    on_topic = _text_model(lambda p: "-고 싶다 желание хотеть 가고 싶어요 " + p[-6:])
    kept = await _hyde(clustered, on_topic, min_agreement=3).search("grammar", query, top_k=5)
    assert kept.used_hyde and kept.fallback_reason is None and not kept.errors


async def test_one_off_topic_hypothesis_is_dropped_and_the_other_kept(clustered) -> None:
    mixed = _text_model(lambda p: ("-지만 но однако 비싸지만 " if "упор на примеры" in p else "-고 싶다 хотеть 가고 싶어요 ") + p[-6:])
    res = await _hyde(clustered, mixed, min_agreement=3).search("grammar", "-고 싶다 хотеть", top_k=5)
    assert res.used_hyde
    assert {c for d in res.results for c in d.channels} == {"raw", "hyde:rule"}
    assert [e.split()[0] for e in res.errors] == ["hyde:example"]


async def test_the_embedded_model_policy_writes_one_hypothesis_by_default(retriever) -> None:
    calls: list[str] = []

    def text(prompt: str) -> str:
        calls.append(prompt)
        return WANT_TO + prompt[-8:]

    model = _text_model(text)
    hs = HydeSettings(timeout_s=2.0)
    hr = HydeRetriever(retriever, lambda d: HypothesisGenerator(model, "fake", d, cache=MemoryCache(), hyde=hs), hs,
                       weak_model=True)
    off = await hr.search("grammar", "хотеть", top_k=3)
    assert calls == [] and off.fallback_reason == "disabled"  # HyDE is off by default with the embedded model
    res = await hr.search("grammar", "хотеть", top_k=3, use_hyde=True)
    assert len(calls) == 1 and len(res.hypotheses) == 1 and res.fusion == "score"
    await hr.search("grammar", "хотеть поехать", top_k=3, n_hypotheses=3, use_hyde=True)
    assert len(calls) == 4  # an explicit n still wins


async def test_a_request_runs_for_many_texts_as_copies_of_itself(retriever) -> None:
    """``execute_many`` (the CLI's search): each text gets a copy of the one request, made where the search
    entered; the results are those of one ``execute`` per text, in order."""
    from hyde_tutor.hyde.request import SearchRequest

    hr = HydeRetriever(retriever, lambda d: None, HydeSettings(enabled=False))  # type: ignore[arg-type,return-value]
    request = SearchRequest(collection="grammar", text="", top_k=2, use_hyde=False)
    texts = ["хотеть 가고 싶어요", "можно 할 수 있어요", "но 비싸지만"]
    many = await hr.execute_many(request, texts)
    one_by_one = [await hr.execute(request.replace(text=t)) for t in texts]
    assert [r.query for r in many] == texts and request.text == ""
    assert [[d.id for d in r.results] for r in many] == [[d.id for d in r.results] for r in one_by_one]
    assert all(len(r.results) <= 2 and not r.used_hyde for r in many)
