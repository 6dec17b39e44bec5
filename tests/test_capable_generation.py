"""A capable generator's requests and calls (issue 29, items 3 and 4): the follow-up request v2 and the version
pin that keeps the v1 recordings replayable, the rendered requests a recording writer gets, and retrieve-first at
one LLM call per turn."""

from __future__ import annotations

import json
import sys
from pathlib import Path

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


def _retrieve_first_turn(retriever, docs) -> tuple[list[str], list, "TutorDeps"]:
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

    hs = HydeSettings(n_hypotheses=1, cascade_margin=0)
    hr = HydeRetriever(retriever, lambda d: HypothesisGenerator(FunctionModel(fn), "m", d, cache=MemoryCache(),
                                                                hyde=hs), hs)
    records: list = []
    monitor = type("Capture", (), {"record": lambda self, r: records.append(r)})()
    return calls, records, TutorDeps(retriever=hr, monitor=monitor)


async def test_retrieve_first_makes_one_call_a_turn_and_can_make_one_per_collection(retriever) -> None:
    from hyde_tutor.plugin.tutor import RetrieveFirst

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
    from hyde_tutor.plugin.tutor import RetrieveFirst

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

    from hyde_tutor.plugin import tutor
    from hyde_tutor.plugin.tutor import RetrieveFirst

    question = "расписание занятий каждый день"  # nearest to docs when the probe works
    real = tutor._nearest

    def breaks_on_docs(r, collection, encoded):
        if collection == "docs":
            raise RuntimeError("store down")
        return real(r, collection, encoded)

    monkeypatch.setattr(tutor, "_nearest", breaks_on_docs)
    calls, records, deps = _retrieve_first_turn(retriever, LESSON_DOCS)
    assert await RetrieveFirst().search(deps, question)
    assert [r.collection for r in records] == ["grammar", "docs"] and len(calls) == 1  # the failed one goes last
    monkeypatch.setattr(tutor, "_nearest", real)

    async def hangs(texts, collection=None):
        await asyncio.sleep(30)

    monkeypatch.setattr(retriever, "aencode", hangs)  # the probe's encoding never answers
    calls, records, deps = _retrieve_first_turn(retriever, LESSON_DOCS)
    steps = [("grammar_search", "grammar", 1), ("docs_search", "docs", 1)]
    started = asyncio.get_running_loop().time()
    assert await tutor.closest_first(deps, steps, question, timeout_s=0.2) == steps  # the listed order, in time
    assert asyncio.get_running_loop().time() - started < 5


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
