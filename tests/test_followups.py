"""Follow-up questions searched with the conversation in view: eval history, the context search, the
hypothesis request, retrieve-first and the recordings."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from pydantic_ai import Agent
from pydantic_ai.messages import ModelResponse, TextPart
from pydantic_ai.models.function import AgentInfo, FunctionModel

from hyde_tutor.config import HydeSettings, LLMSettings
from hyde_tutor.errors import HydeTutorError
from hyde_tutor.evaluation.beir import load_beir
from hyde_tutor.hyde import HydeRetriever
from hyde_tutor.hyde.conversation import context_query, render_conversation
from hyde_tutor.hyde.hypotheses import HypothesisGenerator, MemoryCache

from .conftest import DATA

HISTORY = (("user", "Как сказать, что я хочу поехать в Корею?"), ("assistant", "Используйте -고 싶다: 가고 싶어요."))


def test_eval_reads_history_and_refuses_a_bad_one(tmp_path: Path) -> None:
    data = load_beir(DATA / "eval" / "followups")
    assert len(data.queries) >= 30 and all(q.history and q.history[0][0] == "user" for q in data.queries)
    bad = tmp_path / "bad"
    (bad / "qrels").mkdir(parents=True)
    (bad / "qrels" / "test.tsv").write_text("query-id\tcorpus-id\tscore\nq1\td1\t1\n")
    (bad / "queries.jsonl").write_text(json.dumps({"_id": "q1", "text": "А в прошедшем?", "history": ["hi"]}) + "\n")
    with pytest.raises(HydeTutorError, match="role"):
        load_beir(bad)


def test_the_context_query_puts_the_previous_question_in_front() -> None:
    assert context_query(HISTORY, "А в прошедшем?") == "Как сказать, что я хочу поехать в Корею? А в прошедшем?"
    assert context_query((), "А в прошедшем?") == "А в прошедшем?"
    assert render_conversation(HISTORY).startswith("Ученик: Как сказать") and "Репетитор: Используйте" in render_conversation(HISTORY)


async def test_history_reaches_the_raw_search_and_the_hypothesis_request(retriever, monkeypatch) -> None:
    from hyde_tutor.hyde import stages

    prompts: list[str] = []

    def fn(messages, info: AgentInfo):
        prompts.append(str(messages[-1].parts[-1].content))
        return ModelResponse(parts=[TextPart("Конструкция: -았/었으면 좋겠다. Пример: 갔으면 좋겠어요.")])

    searched: list[tuple[str, int]] = []
    real = stages.search_raw
    monkeypatch.setattr(stages, "search_raw", lambda r, c, text, *a, **k: (
        searched.append((text, len(k["encoding"].dense))), real(r, c, text, *a, **k))[1])
    hs = HydeSettings(n_hypotheses=1)
    hr = HydeRetriever(retriever, lambda d: HypothesisGenerator(FunctionModel(fn), "m", d, cache=MemoryCache(), hyde=hs), hs)
    await hr.search("grammar", "А в прошедшем?", history=HISTORY)
    assert searched == [("А в прошедшем?", 3)]  # a follow-up: alone, after the reply, after the exchange (fused)
    assert "Ученик: Как сказать, что я хочу поехать в Корею?" in prompts[0] and "А в прошедшем?" in prompts[0]
    await hr.search("grammar", "А в прошедшем?")  # no history: the plain request and the message alone
    assert searched[-1] == ("А в прошедшем?", 1) and "Ученик:" not in prompts[-1]


async def test_retrieve_first_searches_a_follow_up_with_the_previous_question(retriever, monkeypatch) -> None:
    from hyde_tutor.plugin.toolset import TutorDeps
    from hyde_tutor.plugin.capabilities import RetrieveFirst

    seen: list[tuple] = []
    hr = HydeRetriever(retriever, lambda d: None, HydeSettings(enabled=False))  # type: ignore[arg-type,return-value]
    real = hr.execute

    async def spy(request):
        seen.append((request.text, request.history))
        return await real(request)

    hr.execute = spy  # type: ignore[method-assign]
    agent = Agent(FunctionModel(lambda m, i: ModelResponse(parts=[TextPart("ok")])), deps_type=TutorDeps,
                  capabilities=[RetrieveFirst(docs_collection=None)])
    deps = TutorDeps(retriever=hr)
    first = await agent.run("Как сказать, что я хочу поехать?", deps=deps)
    await agent.run("А в прошедшем?", deps=deps, message_history=first.all_messages())
    assert seen[0] == ("Как сказать, что я хочу поехать?", ())
    assert seen[1][0] == "А в прошедшем?" and seen[1][1][0] == ("user", "Как сказать, что я хочу поехать?")
    assert ("user", "А в прошедшем?") not in seen[1][1]  # the current message is not its own history


def test_a_followup_recording_replays_only_for_its_conversation() -> None:
    from hyde_tutor.llm.prompts import load_prompt, parse_perspectives
    from hyde_tutor.hyde.requests import load_recordings, render_followup_request
    from hyde_tutor.llm.recordings import Recording, RecordingBook, request_sha256

    system, request = load_prompt("hypothesis_grammar"), load_prompt("hypothesis_followup_request", 1)
    persp = load_prompt("perspectives")
    rule = parse_perspectives(persp.text)[0]
    conv = render_conversation(HISTORY)
    user = render_followup_request(request, conv, "А в прошедшем?", rule.instruction)
    rec = Recording(kind="hypothesis", query="А в прошедшем?", perspective="rule", text="…", model="m",
                    prompt_refs=(system.ref, request.ref, persp.ref), domain="grammar", conversation=conv,
                    prompt_sha256=request_sha256(system.text, user))
    book = RecordingBook()
    import tempfile

    with tempfile.NamedTemporaryFile("w", suffix=".jsonl", delete=False) as fh:
        fh.write(rec.to_json() + "\n")
    book = load_recordings([fh.name])
    assert book.stale == 0 and book.lookup(system.text, user) is not None
    other = render_followup_request(request, render_conversation((("user", "Другой вопрос?"),)), "А в прошедшем?",
                                    rule.instruction)
    assert book.lookup(system.text, other) is None


async def test_the_follow_up_agent_calls_replay_with_their_conversation() -> None:
    import sys

    from hyde_tutor.evaluation.agent_replay import AgentReplayModel, ReplayStats, load_agent_turns
    from hyde_tutor.hyde import HydeResult
    from hyde_tutor.hyde.request import SearchRequest
    from hyde_tutor.plugin.toolset import HydeSearchToolset, TutorDeps, tutor_instructions

    sys.path.insert(0, str(DATA.parent / "scripts"))
    from tune_policy import _messages

    turns = load_agent_turns([DATA / "recordings" / "agent" / "followups_tool_calls.jsonl"])
    searched: list[SearchRequest] = []

    class Recorder:
        async def execute(self, request):
            searched.append(request)
            return HydeResult(request.text, request.collection, [], True, None)

        policy = type("P", (), {"enabled": True})()
        retrieval_settings = __import__("hyde_tutor.config", fromlist=["Settings"]).Settings().retrieval

        def schema_for(self, collection):
            return None

    stats = ReplayStats()
    agent = Agent(AgentReplayModel(turns, stats=stats), deps_type=TutorDeps, toolsets=[HydeSearchToolset()],
                  instructions=tutor_instructions())
    for q in load_beir(DATA / "eval" / "followups").queries:
        await agent.run(q.text, deps=TutorDeps(retriever=Recorder()), message_history=_messages(q.history))  # type: ignore[arg-type]
    assert stats.served == 41 and stats.not_recorded == 0 and stats.stale == 0
    assert all(r.agent_hypothesis for r in searched)


def test_the_condensed_arm_searches_the_models_standalone_question_and_falls_back_to_context(retriever) -> None:
    """``eval --arms condensed``: the LLM sees the conversation and the follow-up and writes one standalone
    question, which is searched; a failed rewrite is searched like ``context`` and counted."""
    from hyde_tutor.evaluation.arms import CondensedArm
    from hyde_tutor.evaluation.beir import EvalQuery
    from hyde_tutor.hyde.conversation import Condenser, standalone_question

    seen: list[str] = []

    def fn(messages, info: AgentInfo):
        user = str(messages[-1].parts[-1].content)
        seen.append(user)
        if "сломай" in user:
            raise ConnectionError("server down")
        return ModelResponse(parts=[TextPart("Самостоятельный вопрос: «Как сказать, что я хотел поехать, 먹고 싶었어요?»")])

    condenser = Condenser(FunctionModel(fn), "m")
    queries = [EvalQuery("q1", "А в прошедшем?", "g", history=HISTORY),
               EvalQuery("q2", "сломай меня", "g", history=HISTORY), EvalQuery("q3", "Как сказать «могу»?", "g")]
    with CondensedArm(retriever, "grammar", 3, condenser) as arm:
        ranked = arm(queries)
    asked = next(user for user in seen if "А в прошедшем?" in user)
    assert "Ученик: Как сказать, что я хочу поехать в Корею?" in asked
    assert len(seen) == 2  # a query without a history is searched as it is: no call
    assert arm.rewrites == {"А в прошедшем?": "Как сказать, что я хотел поехать, 먹고 싶었어요?", "сломай меня": None}
    assert arm.fallbacks() == {"rewrite_failed": 1} and ranked[0] and ranked[1] and ranked[2]
    assert arm.cost()["llm_calls"] == pytest.approx(2 / 3)  # both calls were sent: the failed one counts too
    assert standalone_question("") is None and standalone_question("x" * 400) is None


def test_the_condense_recordings_replay_for_their_conversation() -> None:
    import asyncio

    from hyde_tutor.evaluation.beir import load_beir
    from hyde_tutor.hyde.conversation import Condenser
    from hyde_tutor.llm.backends import replay_backend

    backend = replay_backend(str(DATA / "recordings" / "followups.condense.jsonl"))
    condenser = Condenser.for_backend(backend, LLMSettings())
    q = load_beir(DATA / "eval" / "followups").queries[0]
    out = asyncio.run(condenser.condense(q.history, q.text))
    assert out.question and out.failure is None and "сестра" in out.question
    other = asyncio.run(condenser.condense((("user", "Другой вопрос?"),), q.text))
    assert other.question is None and other.failure == "not_recorded"
