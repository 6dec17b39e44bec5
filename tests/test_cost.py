"""HyDE that pays for itself: usage per search, one call for N hypotheses, the cascade, agent-written
hypotheses, and the recordings of the new modes."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from pydantic_ai import Agent
from pydantic_ai.messages import ModelResponse, TextPart
from pydantic_ai.models.function import FunctionModel

from hyde_tutor.config import HydeSettings, Settings
from hyde_tutor.evaluation.agent_replay import AgentReplayModel, ReplayStats, load_agent_turns
from hyde_tutor.hyde import HydeRetriever
from hyde_tutor.hyde.domains import split_sections
from hyde_tutor.hyde.hypotheses import HypothesisGenerator, MemoryCache
from hyde_tutor.hyde.request import SearchRequest
from hyde_tutor.llm.backends import LLMBackend
from hyde_tutor.llm.recordings import RecordingBook, ReplayModel
from hyde_tutor.plugin.toolset import HydeSearchToolset, TutorDeps, tutor_instructions

from .conftest import DATA

WANT_TO = "Конструкция: -고 싶다\nНазвание: желание\nПример: 가고 싶어요. — Хочу пойти."
SEE = "Конструкция: -아/어 보다\nНазвание: попробовать\nПример: 먹어 봤어요. — Попробовал."


class CountingTokenizer:
    """A stand-in tokenizer: one token per character, so the expected counts are exact."""

    name = "chars"

    def count_request(self, system: str, user: str) -> int:
        return len(system) + len(user)

    def count_text(self, text: str) -> int:
        return len(text)


def _model(reply, calls: list | None = None) -> FunctionModel:
    def fn(messages, info):
        user = str(messages[-1].parts[-1].content)
        if calls is not None:
            calls.append(user)
        return ModelResponse(parts=[TextPart(reply(user) if callable(reply) else reply)])

    return FunctionModel(fn)


def _hyde(retriever, model, counter=None, **settings) -> HydeRetriever:
    hs = HydeSettings(**{"n_hypotheses": 2, "timeout_s": 2.0, **settings})
    backend = LLMBackend(model, "fake", "test", token_counter=counter)
    return HydeRetriever(retriever, lambda d: HypothesisGenerator.for_backend(backend, d, hyde=hs, llm=Settings().llm,
                                                                              cache=MemoryCache()), hs)


# -- usage ------------------------------------------------------------------------------------------

async def test_usage_is_counted_per_search_with_the_offline_tokenizer(retriever) -> None:
    hr = _hyde(retriever, _model(WANT_TO), counter=CountingTokenizer())
    res = await hr.search("grammar", "Как сказать, что хочу поехать?")
    gen = hr.generator("grammar")
    expected_in = sum(len(gen.prompt.text) + len(gen.user_prompt("Как сказать, что хочу поехать?", p))
                      for p in gen.perspectives[:2])
    assert res.llm_calls == res.usage.requests == 2
    assert res.usage.input_tokens == expected_in
    assert res.usage.output_tokens == 2 * len(WANT_TO)
    assert res.usage.source == "counted:chars"
    plain = await hr.search("grammar", "Как сказать, что хочу поехать?", use_hyde=False)
    assert plain.llm_calls == 0 and plain.usage.total_tokens == 0


async def test_usage_reported_by_the_model_is_labelled_reported(retriever) -> None:
    hr = _hyde(retriever, _model(WANT_TO))
    res = await hr.search("grammar", "Как сказать, что хочу поехать?", n_hypotheses=1)
    assert res.usage.requests == 1 and res.usage.output_tokens > 0 and res.usage.source == "reported"


async def test_the_tool_records_calls_tokens_and_their_source(retriever) -> None:
    records: list = []
    monitor = type("Capture", (), {"record": lambda self, r: records.append(r)})()
    hr = _hyde(retriever, _model(WANT_TO), counter=CountingTokenizer())
    from hyde_tutor.plugin.toolset import search_with_deps

    await search_with_deps(TutorDeps(retriever=hr, monitor=monitor), "grammar_search", "grammar", "хочу поехать", 3, True)
    rec = records[0]
    assert rec.llm_calls == 2 and rec.tokens_out == 2 * len(WANT_TO) and rec.usage_source == "counted:chars"
    assert rec.hypothesis_sources == ["llm"]  # the two identical hypotheses: one kept, one dropped as duplicate


# -- one call, N perspectives -------------------------------------------------------------------------

def test_a_one_call_reply_with_too_few_or_too_many_sections() -> None:
    few = split_sections("### 1\nПервая статья 가요.", 3)
    assert few.texts == ("Первая статья 가요.", None, None) and few.missing == 2 and few.extra == 0
    many = split_sections("### 1\nA\n### 2\nB\n### 3\nC\n### 4\nD", 2)
    assert many.texts == ("A", "B") and many.extra == 2
    unnumbered = split_sections("Без заголовков, но статья 가요.", 2)
    assert unnumbered.texts == ("Без заголовков, но статья 가요.", None)
    preamble = split_sections("Вот ответы:\n## 2\nB\n## 1\nA", 2)
    assert preamble.texts == ("A", "B")


async def test_one_call_mode_makes_one_request_for_n_hypotheses(retriever) -> None:
    calls: list = []
    reply = f"### 1\n{WANT_TO}\n### 2\n{SEE}\n### 3\nлишняя статья 가요"
    hr = _hyde(retriever, _model(reply, calls), counter=CountingTokenizer(), generation="one_call")
    res = await hr.search("grammar", "Как сказать, что хочу поехать?")
    assert len(calls) == 1 and res.llm_calls == 1
    assert "1. " in calls[0] and "2. " in calls[0] and "3. " not in calls[0]  # the two perspectives, numbered
    assert [h.perspective for h in res.hypotheses] == ["rule", "example"]
    assert res.used_hyde and res.usage.output_tokens == len(reply)


async def test_one_call_reply_with_fewer_sections_keeps_what_it_has(retriever) -> None:
    hr = _hyde(retriever, _model(f"### 1\n{WANT_TO}"), generation="one_call", n_hypotheses=4)
    res = await hr.search("grammar", "Как сказать, что хочу поехать?")
    assert res.used_hyde and [h.perspective for h in res.hypotheses] == ["rule"]


async def test_the_learners_braces_are_not_spliced_into_the_one_call_request(retriever) -> None:
    calls: list = []
    hr = _hyde(retriever, _model(WANT_TO, calls), generation="one_call")
    await hr.search("grammar", "а {perspectives} и {n}?")
    assert "а {perspectives} и {n}?" in calls[0]


# -- the cascade ----------------------------------------------------------------------------------------

async def test_the_cascade_skips_a_confident_query_and_records_why(retriever) -> None:
    calls: list = []
    hr = _hyde(retriever, _model(WANT_TO, calls), cascade_margin=0.01)
    plain = await hr.search("grammar", "хочу поехать 싶다", use_hyde=False)
    assert plain.raw_margin is not None and plain.raw_margin >= 0.01
    res = await hr.search("grammar", "хочу поехать 싶다")
    assert res.skipped == "confident" and not res.used_hyde and res.fallback_reason is None
    assert calls == [] and res.llm_calls == 0
    assert any("cascade" in e for e in res.errors)
    assert [d.id for d in res.results] == [d.id for d in plain.results]
    unsure = await hr.search("grammar", "хочу поехать 싶다", cascade_margin=1.0)  # nothing is that sure
    assert unsure.skipped is None and unsure.used_hyde and len(calls) == 2


async def test_the_tool_record_counts_a_cascade_skip(retriever) -> None:
    from hyde_tutor.plugin.toolset import search_with_deps

    records: list = []
    monitor = type("Capture", (), {"record": lambda self, r: records.append(r)})()
    hr = _hyde(retriever, _model(WANT_TO), cascade_margin=0.01)
    await search_with_deps(TutorDeps(retriever=hr, monitor=monitor), "grammar_search", "grammar", "хочу поехать 싶다", 3, True)
    assert records[0].skipped == "confident" and records[0].llm_calls == 0


# -- the agent writes the hypothesis -----------------------------------------------------------------

async def test_an_agent_hypothesis_replaces_generation(retriever) -> None:
    calls: list = []
    hr = _hyde(retriever, _model(WANT_TO, calls))
    res = await hr.execute(SearchRequest(collection="grammar", text="хочу поехать", agent_hypothesis=SEE))
    assert calls == [] and res.llm_calls == 0 and res.used_hyde
    assert [(h.source, h.perspective) for h in res.hypotheses] == [("agent", "agent")]
    assert res.usage.source == "agent"


async def test_an_agent_hypothesis_can_be_added_to_generated_ones(retriever) -> None:
    calls: list = []
    hr = _hyde(retriever, _model(WANT_TO, calls), agent_hypothesis="add")
    res = await hr.search("grammar", "хочу поехать", agent_hypothesis=SEE)
    assert len(calls) == 2 and [h.source for h in res.hypotheses] == ["agent", "llm"]


@pytest.mark.parametrize(("junk", "reason"), [
    ("Хочу поехать в Пусан, как это сказать?", "no_korean"),  # no Korean for a Korean domain
    ("Как сказать 가고 싶어요 хочу?", "echo"),  # the query said again
    ("   ", None),  # blank: as if none was given
])
async def test_a_junk_agent_hypothesis_is_dropped_with_a_reason(retriever, junk, reason) -> None:
    calls: list = []
    hr = _hyde(retriever, _model(WANT_TO, calls))
    res = await hr.search("grammar", "как сказать 가고 싶어요 хочу", agent_hypothesis=junk)
    assert len(calls) == 2 and all(h.source == "llm" for h in res.hypotheses)  # generation took over
    notes = [e for e in res.errors if e.startswith("agent hypothesis dropped")]
    assert notes == ([f"agent hypothesis dropped: {reason}"] if reason else [])


async def test_the_experiments_plain_arm_ignores_an_agent_hypothesis(retriever) -> None:
    hr = _hyde(retriever, _model(WANT_TO))
    res = await hr.search("grammar", "хочу поехать", use_hyde=False, agent_hypothesis=SEE)
    assert not res.used_hyde and res.hypotheses == [] and res.fallback_reason == "disabled"


async def test_the_tool_passes_the_agents_hypothesis_and_refuses_a_non_text_one(retriever) -> None:
    from pydantic_ai import ModelRetry

    from hyde_tutor.plugin.toolset import search_with_deps

    calls: list = []
    hr = _hyde(retriever, _model(WANT_TO, calls))
    out = await search_with_deps(TutorDeps(retriever=hr), "grammar_search", "grammar", "хочу поехать", 3, True,
                                 hypothesis=SEE)
    assert calls == [] and out["used_hyde"]
    with pytest.raises(ModelRetry, match="hypothesis must be text"):
        await search_with_deps(TutorDeps(retriever=hr), "grammar_search", "grammar", "хочу поехать", 3, True,
                               hypothesis=["list"])


def test_the_tool_schema_describes_the_hypothesis_in_the_domains_format() -> None:
    seen: dict = {}

    def capture(messages, info):
        seen.update({t.name: t.parameters_json_schema for t in info.function_tools})
        return ModelResponse(parts=[TextPart("ok")])

    Agent(FunctionModel(capture), deps_type=TutorDeps, toolsets=[HydeSearchToolset()]).run_sync(
        "?", deps=TutorDeps(retriever=None))  # type: ignore[arg-type]
    grammar = seen["grammar_search"]["properties"]["hypothesis"]["description"]
    assert "Конструкция:" in grammar and "Пример:" in grammar
    assert "Korean examples" in seen["docs_search"]["properties"]["hypothesis"]["description"]


# -- settings read per search ------------------------------------------------------------------------

async def test_policy_and_timeout_changes_apply_to_the_next_search(retriever) -> None:
    import asyncio

    async def slow(messages, info):
        await asyncio.sleep(0.3)
        return ModelResponse(parts=[TextPart(WANT_TO)])

    hr = _hyde(retriever, FunctionModel(slow), timeout_s=5.0)
    first = await hr.search("grammar", "хочу поехать")
    assert first.used_hyde and len(first.hypotheses) == 1
    hr.settings.timeout_s = 0.05  # the generator was built with 5 s: the next search must use 0.05 s
    second = await hr.search("grammar", "хочу уехать")  # another query: not served from the cache
    assert second.fallback_reason == "timeout"
    hr.settings.n_hypotheses = 1
    hr.settings.timeout_s = 5.0
    third = await hr.search("grammar", "другой вопрос про поездку")
    assert third.llm_calls == 1


# -- the recordings of the new modes replay ----------------------------------------------------------

def _queries(name: str) -> list[str]:
    return [json.loads(line)["text"] for line in (DATA / "eval" / name / "queries.jsonl").read_text().splitlines()
            if line.strip()]


@pytest.mark.parametrize(("eval_set", "domain"), [("grammar", "grammar"), ("docs", "docs"),
                                                    ("grammar_holdout", "grammar"), ("passage_en", "passage")])
async def test_one_call_recordings_replay_with_nothing_missing(eval_set, domain) -> None:
    book = RecordingBook.load(sorted((DATA / "recordings").glob("*.jsonl")))
    assert book.stale == 0
    backend = LLMBackend(ReplayModel(book), "replay", "replay")
    hs = HydeSettings(generation="one_call", n_hypotheses=2)
    gen = HypothesisGenerator.for_backend(backend, domain, hyde=hs, llm=Settings().llm)
    missing = 0
    for query in _queries(eval_set):
        result = await gen.generate(query, 2, 5.0, one_call=True)
        missing += result.not_recorded
        assert result.hypotheses, query
    assert missing == 0


async def test_agent_tool_call_recordings_replay_through_the_tools_path() -> None:
    turns = load_agent_turns([DATA / "recordings" / "agent" / "tutor_tool_calls.jsonl"])
    assert len(turns) == 158
    stats = ReplayStats()
    searched: list = []

    class Recorder:
        async def execute(self, request):  # what the tool sends the retriever
            searched.append(request)
            from hyde_tutor.hyde import HydeResult

            return HydeResult(request.text, request.collection, [], True, None)

        policy = type("P", (), {"enabled": True})()
        retrieval_settings = Settings().retrieval

        def schema_for(self, collection):
            return None

    agent = Agent(AgentReplayModel(turns, stats=stats), deps_type=TutorDeps, toolsets=[HydeSearchToolset()],
                  instructions=tutor_instructions())
    for query in _queries("grammar_holdout") + _queries("docs"):
        await agent.run(query, deps=TutorDeps(retriever=Recorder()))  # type: ignore[arg-type]
    assert stats.not_recorded == 0 and stats.stale == 0 and stats.served == 68
    with_hypothesis = [r for r in searched if r.agent_hypothesis]
    assert len(with_hypothesis) >= 0.8 * len(searched)  # the agent wrote one in (nearly) every call


def test_an_agent_recording_for_other_tools_is_not_served() -> None:
    turns = load_agent_turns(sorted((DATA / "recordings" / "agent").glob("*.jsonl")))
    stats = ReplayStats()
    agent = Agent(AgentReplayModel(turns, stats=stats), deps_type=TutorDeps,
                  toolsets=[HydeSearchToolset(prefix="ko_")], instructions=tutor_instructions())
    query = _queries("grammar_holdout")[0]
    from hyde_tutor.llm.recordings import NotRecordedError

    with pytest.raises(NotRecordedError, match="other instructions or tool definitions"):
        agent.run_sync(query, deps=TutorDeps(retriever=None))  # type: ignore[arg-type]
    assert stats.stale == 1


def test_recordings_readme_names_the_new_files() -> None:
    text = (DATA / "recordings" / "README.md").read_text()
    for name in ("grammar_eval.one_call.jsonl", "passage_en.jsonl", "agent/tutor_tool_calls.jsonl"):
        assert name in text
    assert Path(DATA / "recordings" / "agent" / "tutor_tool_calls.jsonl").is_file()


# -- cost in eval and ab-report ---------------------------------------------------------------------

async def test_an_eval_arm_reports_calls_and_tokens_per_search(retriever) -> None:
    import asyncio

    from hyde_tutor.evaluation.arms import HYDE_ARMS, HydeArm

    hr = _hyde(retriever, _model(WANT_TO), counter=CountingTokenizer(), n_hypotheses=1)
    arm = HydeArm(hr, "grammar", 3, HYDE_ARMS["hyde"], None, None)
    try:
        await asyncio.to_thread(arm, ["хочу поехать"])  # the warm-up, as evaluate_arms does
        await asyncio.to_thread(arm, ["хочу поехать", "попробовать еду"])  # the repeat hits the cache
    finally:
        arm.close()
    cost = arm.cost()
    assert cost["llm_calls"] == 1.0 and cost["tokens_out"] == len(WANT_TO)
    assert cost["counted"] == "counted:chars" and cost["skipped"] == 0.0


def test_ab_report_shows_calls_and_tokens_per_arm_with_intervals() -> None:
    from hyde_tutor.experiment.abreport import arm_rows, format_report

    records = ([{"arm": "hyde", "use_hyde": True, "llm_calls": 1, "tokens_in": 300, "tokens_out": 200,
                 "stages_ms": {"total_ms": 5.0}, "results": 3}] * 8
               + [{"arm": "hyde", "use_hyde": True, "llm_calls": 0, "skipped": "confident", "stages_ms": {"total_ms": 1.0},
                   "results": 3}] * 2
               + [{"arm": "raw", "use_hyde": False, "stages_ms": {"total_ms": 1.0}, "results": 3}] * 5)
    rows = {r.arm: r for r in arm_rows(records)}
    hyde = rows["hyde"]
    assert hyde.llm_calls[0] == pytest.approx(0.8) and hyde.llm_calls[1] <= 0.8 <= hyde.llm_calls[2]
    assert hyde.tokens[0] == pytest.approx(400.0) and hyde.skipped_rate == pytest.approx(0.2)
    assert rows["raw"].llm_calls == (0.0, 0.0, 0.0)
    text = format_report(list(rows.values()), [])
    assert "cost per retrieval" in text and "0.80 [" in text and "20.0%" in text


def test_the_policy_defaults_have_one_source_and_the_docs_follow_it() -> None:
    """HydePolicy's field defaults, the policy constants, config.py's descriptions and .env.example used to
    disagree (4 / 3, rrf / score, 1.0 / 6.0)."""
    import re

    from hyde_tutor.hyde.hypotheses import DEFAULT_HYPOTHESES
    from hyde_tutor.hyde.policy import PASSAGE_POLICY, STRONG_MODEL_POLICY, WEAK_MODEL_POLICY, HydePolicy

    assert HydePolicy() == STRONG_MODEL_POLICY and STRONG_MODEL_POLICY.n_hypotheses == DEFAULT_HYPOTHESES
    fields = HydeSettings.model_fields
    weights = {f"{p.hypothesis_weight:g}" for p in (STRONG_MODEL_POLICY, PASSAGE_POLICY, WEAK_MODEL_POLICY)}
    described = set(re.findall(r"\d+(?:\.\d+)?", fields["hypothesis_weight"].description or ""))
    assert weights <= described, (weights, described)
    assert STRONG_MODEL_POLICY.fusion in (fields["fusion"].description or "")
    assert f"{STRONG_MODEL_POLICY.n_hypotheses}," in (fields["n_hypotheses"].description or "")
    env = (DATA.parent / ".env.example").read_text(encoding="utf-8")
    block = env.split("# HYDE_HYDE__HYPOTHESIS_WEIGHT=")[0].rsplit("# HYDE_HYDE__LEGS=", 1)[1]
    assert weights <= set(re.findall(r"\d+(?:\.\d+)?", block)), block
    n_block = env.split("# HYDE_HYDE__N_HYPOTHESES=")[0].rsplit("\n\n", 1)[-1]
    assert f"Unset = {STRONG_MODEL_POLICY.n_hypotheses} " in n_block
