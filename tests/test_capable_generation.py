"""A capable generator's requests and calls (issue 29, items 3 and 4): the follow-up request v2 and the version
pin that keeps the v1 recordings replayable, the rendered requests a recording writer gets, and retrieve-first at
one LLM call per turn."""

from __future__ import annotations

import json
import sys
from typing import Any

from pydantic_ai.messages import ModelResponse, TextPart
from pydantic_ai.models.function import AgentInfo, FunctionModel

from hyde_tutor.config import HydeSettings, LLMSettings
from hyde_tutor.corpus.documents import Document
from hyde_tutor.evaluation.beir import load_beir
from hyde_tutor.hyde import HydeRetriever
from hyde_tutor.hyde.conversation import render_conversation
from hyde_tutor.hyde.hypotheses import HypothesisGenerator, MemoryCache
from hyde_tutor.hyde.requests import render_followup_request
from hyde_tutor.llm.prompts import load_prompt
from hyde_tutor.llm.recordings import request_sha256

from .conftest import DATA

HISTORY = (("user", "Как сказать, что я хочу поехать в Корею?"), ("assistant", "Используйте -고 싶다: 가고 싶어요."))
ENTRY = "Конструкция: -고 싶다\nОбъяснение: желание говорящего.\nПример: 한국에 가고 싶어요. — Хочу в Корею."


def _generator(hyde: HydeSettings) -> HypothesisGenerator:
    return HypothesisGenerator(FunctionModel(lambda m, i: ModelResponse(parts=[TextPart(ENTRY)])), "m", "grammar",
                               cache=MemoryCache(), hyde=hyde)


def test_the_follow_up_request_says_how_to_tell_a_new_question_and_v1_stays_pinnable() -> None:
    conv = render_conversation(HISTORY)
    newest, pinned = _generator(HydeSettings()), _generator(HydeSettings(followup_request_version=1))
    rule = newest.perspectives[0]
    v2 = newest.user_prompt("Как сказать «я чуть не опоздал»?", rule, conv)
    assert v2 == render_followup_request(load_prompt("hypothesis_followup_request", version=2), conv,
                                         "Как сказать «я чуть не опоздал»?", rule.instruction)
    assert conv in v2 and "новый вопрос" in v2.lower() and "как будто разговора не было" in v2
    v1 = pinned.user_prompt("А в прошедшем?", rule, conv)
    assert v1 == render_followup_request(load_prompt("hypothesis_followup_request", version=1), conv, "А в прошедшем?",
                                         rule.instruction)
    assert "как будто разговора не было" not in v1


async def test_the_v1_follow_up_recordings_replay_when_v1_is_pinned_and_only_then() -> None:
    from hyde_tutor.hyde.requests import render_recording
    from hyde_tutor.llm.backends import replay_backend

    backend = replay_backend(str(DATA / "recordings" / "followups.jsonl"), render=render_recording)
    q = load_beir(DATA / "eval" / "followups").queries[0]
    pinned = HypothesisGenerator.for_backend(backend, "grammar", hyde=HydeSettings(followup_request_version=1),
                                             llm=LLMSettings())
    served = await pinned.generate(q.text, 1, history=q.history)
    assert len(served.hypotheses) == 1 and served.not_recorded == 0
    newest = HypothesisGenerator.for_backend(backend, "grammar", hyde=HydeSettings(), llm=LLMSettings())
    unserved = await newest.generate(q.text, 1, history=q.history)
    assert unserved.hypotheses == [] and unserved.failure_reason == "not_recorded"  # v2 was asked: never a v1 answer


def test_the_rendered_requests_are_what_the_pipeline_sends() -> None:
    sys.path.insert(0, str(DATA.parent / "scripts"))
    from render_requests import rendered

    rows = list(rendered(DATA / "eval" / "followups", "grammar", ["rule"], None))
    data = load_beir(DATA / "eval" / "followups")
    assert [r["id"] for r in rows] == [q.id for q in data.queries]
    gen = _generator(HydeSettings())
    system = load_prompt("hypothesis_grammar")
    for row, q in zip(rows, data.queries):
        user = gen.user_prompt(q.text.strip(), gen.perspectives[0], render_conversation(q.history))
        assert row["user"] == user and row["user_sha256"] == request_sha256(system.text, user)
        assert row["system_prompt"] == "hypothesis_grammar.v1.md" and row["request"] == "hypothesis_followup_request@v2"
    plain = next(rendered(DATA / "eval" / "docs", "grammar", ["rule"], None))  # no history: the plain request
    assert plain["request"] == "hypothesis_request@v1" and "Разговор" not in plain["user"]
    json.dumps(rows, ensure_ascii=False)  # a writer's file: plain JSON


def _retrieve_first_turn(retriever, docs, hyde: bool = True) -> tuple[list[str], list, Any]:
    """A retrieve-first turn's parts: ``docs`` ingested as collection ``docs`` beside the test grammar; the LLM
    calls (by the system prompt's domain) and the monitor's records are captured."""
    from hyde_tutor.corpus.ingest import IngestRequest, ingest_documents
    from hyde_tutor.plugin.toolset import TutorDeps

    if "docs" not in retriever.store.list_collections():
        ingest_documents(docs, IngestRequest(collection="docs", progress=False), retriever.store, retriever.dense,
                         retriever.sparse)
    calls: list[str] = []

    def fn(messages, info: AgentInfo) -> ModelResponse:
        calls.append(info.instructions or "")
        return ModelResponse(parts=[TextPart(ENTRY)])

    hs = HydeSettings(n_hypotheses=1, cascade_margin=0, enabled=hyde)
    hr = HydeRetriever(retriever, lambda d: HypothesisGenerator(FunctionModel(fn), "m", d, cache=MemoryCache(),
                                                                hyde=hs), hs)
    records: list = []
    monitor = type("Capture", (), {"record": lambda self, r: records.append(r)})()
    return calls, records, TutorDeps(retriever=hr, monitor=monitor)


async def test_retrieve_first_makes_one_call_a_turn_and_can_make_one_per_collection(retriever) -> None:
    from hyde_tutor.plugin.capabilities import RetrieveFirst

    from .test_store import DOCS

    calls, records, deps = _retrieve_first_turn(retriever, DOCS)
    found = await RetrieveFirst().search(deps, "Как сказать, что я хочу поехать?")
    assert len(calls) == 1 and found  # the default: one LLM call for the turn
    assert [r.collection for r in records] == ["grammar", "docs"]  # a tie keeps the listed order
    assert records[0].llm_calls == 1 and records[1].llm_calls == 0
    assert records[1].used_hyde and records[1].hypothesis_sources == ["agent"]  # the grammar hypothesis, handed on
    calls, records, deps = _retrieve_first_turn(retriever, DOCS)
    await RetrieveFirst(share_hypothesis=False).search(deps, "Как сказать, что я хочу поехать?")
    assert len(calls) == 2 and [r.llm_calls for r in records] == [1, 1]  # one call per collection


LESSON_DOCS = [Document("d-plan", "расписание занятий каждый день повторение слов карточки", {"title": "План"}),
               Document("d-ex", "экзамен TOPIK уровни баллы регистрация", {"title": "TOPIK"})]


async def test_the_collection_nearest_the_message_writes_the_turns_hypothesis(retriever) -> None:
    from hyde_tutor.plugin.capabilities import RetrieveFirst

    question = "расписание занятий каждый день"  # near a docs entry, far from every grammar entry
    calls, records, deps = _retrieve_first_turn(retriever, LESSON_DOCS)
    found = await RetrieveFirst(grammar_top_k=2, docs_top_k=1).search(deps, question)
    assert [r.collection for r in records] == ["docs", "grammar"] and [r.llm_calls for r in records] == [1, 0]
    assert calls[0].startswith(load_prompt("hypothesis_docs").text.splitlines()[0])  # written with the docs prompt
    assert [e["id"] for e in found][-1] == "d-plan" and len(found) == 3  # still listed order: grammar, then docs
    assert deps.found == found
    calls, records, deps = _retrieve_first_turn(retriever, LESSON_DOCS)
    await RetrieveFirst(order="listed").search(deps, question)
    assert [r.collection for r in records] == ["grammar", "docs"] and [r.llm_calls for r in records] == [1, 0]


async def test_a_failed_or_slow_closeness_probe_never_fails_the_turn(retriever, monkeypatch) -> None:
    import asyncio
    import time

    from hyde_tutor.plugin import capabilities as tutor
    from hyde_tutor.plugin.capabilities import RetrieveFirst

    question = "желание хотеть"  # nearest to grammar when every probe works
    real = tutor._nearest

    def breaks_on_grammar(r, collection, encoded):
        if collection == "grammar":
            raise RuntimeError("store down")
        return real(r, collection, encoded)

    monkeypatch.setattr(tutor, "_nearest", breaks_on_grammar)
    calls, records, deps = _retrieve_first_turn(retriever, LESSON_DOCS)
    await RetrieveFirst().search(deps, question)
    assert [r.collection for r in records] == ["docs", "grammar"] and len(calls) == 1  # the failed one goes last
    monkeypatch.setattr(tutor, "_nearest", real)

    def hangs(texts):
        time.sleep(3)

    monkeypatch.setattr(retriever.dense, "embed", hangs)  # the probe's encoding does not answer in time
    calls, records, deps = _retrieve_first_turn(retriever, LESSON_DOCS)
    steps = [("grammar_search", "grammar", 1), ("docs_search", "docs", 1)]
    started = time.monotonic()
    assert await tutor.closest_first(deps, steps, "расписание занятий каждый день", timeout_s=0.2) == [0, 1]
    assert time.monotonic() - started < 2  # the listed order, within the bound
    await asyncio.sleep(3)  # let the stuck thread finish before the store closes


async def test_no_probe_when_the_turn_will_not_generate(retriever, monkeypatch) -> None:
    from hyde_tutor.plugin import capabilities as tutor
    from hyde_tutor.plugin.capabilities import RetrieveFirst

    probed: list[str] = []
    real = tutor._nearest
    monkeypatch.setattr(tutor, "_nearest", lambda r, c, e: probed.append(c) or real(r, c, e))
    calls, records, deps = _retrieve_first_turn(retriever, LESSON_DOCS, hyde=False)  # the embedded model's default
    await RetrieveFirst().search(deps, "расписание занятий каждый день")
    assert probed == [] and calls == [] and [r.collection for r in records] == ["grammar", "docs"]
    calls, records, deps = _retrieve_first_turn(retriever, LESSON_DOCS)
    await RetrieveFirst().search(deps, "расписание занятий каждый день")
    assert probed == ["grammar", "docs"]


async def test_entries_found_earlier_stay_and_one_collection_twice_keeps_both_searches(retriever) -> None:
    from hyde_tutor.plugin.capabilities import RetrieveFirst

    calls, records, deps = _retrieve_first_turn(retriever, LESSON_DOCS)
    deps.found.append({"id": "earlier"})
    found = await RetrieveFirst(grammar_top_k=2, docs_top_k=1).search(deps, "расписание занятий каждый день")
    assert deps.found == [{"id": "earlier"}, *found] and len(found) == 3
    calls, records, deps = _retrieve_first_turn(retriever, LESSON_DOCS)
    twice = await RetrieveFirst(docs_collection="grammar", grammar_top_k=3, docs_top_k=1).search(deps, "хотеть")
    assert len(twice) == 4 and [r.collection for r in records] == ["grammar", "grammar"]


async def test_the_v2_recordings_answer_the_requests_the_pipeline_sends_today() -> None:
    from hyde_tutor.hyde.requests import load_recordings, render_recording
    from hyde_tutor.llm.backends import replay_backend

    files = [DATA / "recordings" / "followups.v2.jsonl", DATA / "recordings" / "conversations.v2.jsonl"]
    assert load_recordings(files).stale == 0
    backend = replay_backend(",".join(map(str, files)), render=render_recording)
    gen = HypothesisGenerator.for_backend(backend, "grammar", hyde=HydeSettings(), llm=LLMSettings())
    for name in ("followups", "conversations"):
        queries = load_beir(DATA / "eval" / name).queries
        served = [await gen.generate(q.text, 1, history=q.history) for q in queries]
        assert all(len(r.hypotheses) == 1 for r in served), name  # every message's default request is recorded
