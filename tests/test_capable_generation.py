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


async def test_retrieve_first_can_search_both_collections_with_one_hypothesis(retriever, hash_embedder, bm25) -> None:
    from hyde_tutor.corpus.ingest import IngestRequest, ingest_documents
    from hyde_tutor.plugin.toolset import TutorDeps
    from hyde_tutor.plugin.tutor import RetrieveFirst

    from .test_store import DOCS

    ingest_documents(DOCS, IngestRequest(collection="docs", progress=False), retriever.store, hash_embedder, bm25)
    calls: list[str] = []

    def fn(messages, info: AgentInfo) -> ModelResponse:
        calls.append(info.instructions or "")
        return ModelResponse(parts=[TextPart(ENTRY)])

    def turn() -> tuple[HydeRetriever, list, TutorDeps]:
        hs = HydeSettings(n_hypotheses=1, cascade_margin=0)
        hr = HydeRetriever(retriever, lambda d: HypothesisGenerator(FunctionModel(fn), "m", d, cache=MemoryCache(),
                                                                    hyde=hs), hs)
        records: list = []
        monitor = type("Capture", (), {"record": lambda self, r: records.append(r)})()
        return hr, records, TutorDeps(retriever=hr, monitor=monitor)

    _, records, deps = turn()
    found = await RetrieveFirst(share_hypothesis=True).search(deps, "Как сказать, что я хочу поехать?")
    assert len(calls) == 1 and found  # one LLM call for the turn
    assert [r.collection for r in records] == ["grammar", "docs"]
    assert records[0].llm_calls == 1 and records[1].llm_calls == 0
    assert records[1].used_hyde and records[1].hypothesis_sources == ["agent"]  # the grammar hypothesis, handed on
    calls.clear()
    _, records, deps = turn()
    await RetrieveFirst().search(deps, "Как сказать, что я хочу поехать?")
    assert len(calls) == 2 and [r.llm_calls for r in records] == [1, 1]  # the default: one call per collection


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
