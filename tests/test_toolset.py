"""The pydantic-ai plugin: a real Agent calling the tools, A/B routing, monitor, logfire, load."""

from __future__ import annotations

from hyde_tutor.hyde.request import SearchRequest

import asyncio
import json
import re
from pathlib import Path

import pytest
from pydantic_ai import Agent
from pydantic_ai.messages import ModelRequest, ModelResponse, TextPart, ToolCallPart, ToolReturnPart
from pydantic_ai.models.function import AgentInfo, FunctionModel

from hyde_tutor import EdgeStore, Experiment, HydeSearchToolset, Monitor, TutorDeps, decide, hyde_capability
from hyde_tutor.config import HydeSettings
from hyde_tutor.hyde import HydeRetriever
from hyde_tutor.hyde.hypotheses import HypothesisGenerator, MemoryCache
from hyde_tutor.corpus.ingest import IngestRequest, ingest_documents
from hyde_tutor.retrieval.retriever import Retriever
from hyde_tutor.llm.simulated import simulated_model

from .chat_stub import chat_stub
from .conftest import ROOT
from .examples import example, run
from .test_store import DOCS


def simulated_hyde(root: Path, embedder, bm25, latency_ms: float) -> HydeRetriever:
    """``grammar`` and ``docs`` collections in an edge store under ``root``, HyDE on a simulated LLM."""
    store = EdgeStore(root / "edge")
    ingest_documents(DOCS, IngestRequest(collection="grammar", progress=False), store, embedder, bm25)
    ingest_documents(DOCS[3:], IngestRequest(collection="docs", progress=False), store, embedder, bm25)
    # The simulated LLM writes one generic text for every query: fused at the capable-model weight (6) it would
    # outvote the query itself, so these plumbing tests pin the even-handed rrf policy.
    settings = HydeSettings(n_hypotheses=2, timeout_s=5, fusion="rrf", hypothesis_weight=1.0)
    model = simulated_model(latency_ms=latency_ms)
    return HydeRetriever(Retriever(store, embedder, bm25),
                         lambda d: HypothesisGenerator(model, "sim", d, cache=MemoryCache(), hyde=settings), settings)


@pytest.fixture()
def hyde_retriever(tmp_path: Path, hash_embedder, bm25):
    hr = simulated_hyde(tmp_path, hash_embedder, bm25, latency_ms=5)
    yield hr
    hr.close()


def _tool_then_answer(tool_args: dict, seen: list):
    """A FunctionModel that calls grammar_search once, then answers from the tool's result."""

    def fn(messages, info: AgentInfo) -> ModelResponse:
        last = messages[-1]
        returns = [p for p in last.parts if isinstance(p, ToolReturnPart)] if isinstance(last, ModelRequest) else []
        if returns:
            seen.append(returns[0])
            content = returns[0].content
            first = content["results"][0]["pattern"] if isinstance(content, dict) and content.get("results") else "—"
            return ModelResponse(parts=[TextPart(f"Ответ: используйте {first}")])
        return ModelResponse(parts=[ToolCallPart("grammar_search", tool_args)])

    return FunctionModel(fn)


def test_agent_calls_grammar_search_and_answers_from_it(hyde_retriever, capfire) -> None:
    seen: list = []
    monitor = Monitor()
    agent = Agent(_tool_then_answer({"query": "хотеть 가고 싶어요", "use_hyde": True}, seen),
                  deps_type=TutorDeps, toolsets=[HydeSearchToolset()])
    spy_calls: list = []
    original = hyde_retriever.execute

    async def spy(request):
        spy_calls.append(request)
        return await original(request)

    hyde_retriever.execute = spy  # type: ignore[method-assign]
    # explicit_wins: the debugging option under which the model's use_hyde beats the subject's raw arm
    # (the default, where the arm decides, is tested in test_ab_integrity.py)
    experiment = Experiment(hyde_share=0.0, explicit_wins=True)
    deps = TutorDeps(retriever=hyde_retriever, experiment=experiment, monitor=monitor, subject_id="u1")
    result = agent.run_sync("Как сказать, что я хочу?", deps=deps)

    assert result.output == "Ответ: используйте -고 싶다"
    assert spy_calls == [SearchRequest(collection="grammar", text="хотеть 가고 싶어요", top_k=5, use_hyde=True,
                                       rerank_candidates=None, use_questions=False, domain="grammar")]
    tool_result = seen[0].content
    assert tool_result["used_hyde"] is True and tool_result["results"][0]["id"] == "g1"
    assert "vector" not in json.dumps(tool_result)
    (rec,) = monitor.records()
    assert (rec.arm, rec.reason, rec.use_hyde, rec.used_hyde, rec.tool) == ("raw", "explicit", True, True, "grammar_search")
    assert rec.requested_hyde is True and rec.overridden is True
    assert rec.n_hypotheses == 2 and rec.stages_ms["total_ms"] > 0
    spans = [s["name"] for s in capfire.exporter.exported_spans_as_dict()]
    assert {"hyde.search {collection}", "hyde.generate", "hyde.embed", "hyde.store_search", "hyde.raw_channel"} <= set(spans)
    metrics = {m["name"] for m in capfire.get_collected_metrics()}
    assert {"hyde.retrievals", "hyde.stage_ms"} <= metrics


def test_tool_schema_comes_from_docstrings() -> None:
    captured: dict = {}

    def fn(messages, info: AgentInfo) -> ModelResponse:
        captured.update({t.name: t for t in info.function_tools})
        return ModelResponse(parts=[TextPart("ok")])

    Agent(FunctionModel(fn), deps_type=TutorDeps, toolsets=[HydeSearchToolset(prefix="ko_")]).run_sync("x", deps=None)  # type: ignore[arg-type]
    assert set(captured) == {"ko_grammar_search", "ko_docs_search"}
    tool = captured["ko_grammar_search"]
    assert "Korean grammar reference" in tool.description
    props = tool.parameters_json_schema["properties"]
    assert set(props) == {"query", "hypothesis", "top_k", "use_hyde"}
    assert "experiment" in props["use_hyde"]["description"]
    assert tool.parameters_json_schema["required"] == ["query"]
    assert set(captured["ko_docs_search"].parameters_json_schema["properties"]) == {"query", "hypothesis", "top_k", "rerank_top_k", "use_hyde"}


def test_capability_bundles_the_tools(hyde_retriever) -> None:
    names: list = []

    def fn(messages, info: AgentInfo) -> ModelResponse:
        names.extend(t.name for t in info.function_tools)
        return ModelResponse(parts=[TextPart("ok")])

    Agent(FunctionModel(fn), deps_type=TutorDeps, capabilities=[hyde_capability(docs_collection=None)]).run_sync(
        "x", deps=TutorDeps(retriever=hyde_retriever))
    assert names == ["grammar_search"]


def test_bad_arguments_come_back_as_retry_messages(hyde_retriever) -> None:
    retries: list[str] = []

    def fn(messages, info: AgentInfo) -> ModelResponse:
        texts = [str(getattr(p, "content", "")) for m in messages if isinstance(m, ModelRequest) for p in m.parts
                 if type(p).__name__ in ("RetryPromptPart", "ToolReturnPart")]
        if not texts:
            return ModelResponse(parts=[ToolCallPart("grammar_search", {"query": "   ", "top_k": 50})])
        retries.extend(texts)
        return ModelResponse(parts=[TextPart("исправлюсь")])

    out = Agent(FunctionModel(fn), deps_type=TutorDeps, toolsets=[HydeSearchToolset()]).run_sync(
        "x", deps=TutorDeps(retriever=hyde_retriever, monitor=Monitor()))
    assert out.output == "исправлюсь"
    assert any("empty" in t and "grammar_search again" in t for t in retries)


def test_store_folder_removed_under_a_running_toolset_is_a_failed_tool_result(tmp_path: Path, hash_embedder, bm25) -> None:
    import shutil

    from pydantic_ai.messages import RetryPromptPart

    hr = simulated_hyde(tmp_path, hash_embedder, bm25, latency_ms=1)
    monitor = Monitor()
    seen: list = []

    def fn(messages, info: AgentInfo) -> ModelResponse:
        last = messages[-1]
        parts = [p for p in last.parts if isinstance(p, (ToolReturnPart, RetryPromptPart))] if isinstance(last, ModelRequest) else []
        if parts:
            seen.append(parts[0])
            return ModelResponse(parts=[TextPart("Поиск недоступен, отвечаю сам.")])
        return ModelResponse(parts=[ToolCallPart("grammar_search", {"query": "хотеть"})])

    agent = Agent(FunctionModel(fn), deps_type=TutorDeps, toolsets=[HydeSearchToolset(max_retries=0)])
    deps = TutorDeps(retriever=hr, monitor=monitor)
    assert agent.run_sync("x", deps=deps).output == "Поиск недоступен, отвечаю сам."  # searched fine once
    seen.clear()
    shutil.rmtree(tmp_path / "edge" / "grammar")  # a real failure: the collection's files are gone
    out = agent.run_sync("x", deps=deps)
    assert out.output == "Поиск недоступен, отвечаю сам."  # the turn goes on (max_retries=0: no retry spent)
    told = seen[0].model_response_str() if hasattr(seen[0], "model_response_str") else str(seen[0].content)
    assert "grammar_search is unavailable right now" in told and "--recreate" in told
    assert str(tmp_path) not in told and "shard" not in told.lower()  # no paths, no engine internals
    assert [r.error for r in monitor.records()] == [None, "StoreUnavailableError"]
    hr.close()


def test_hyde_failure_never_fails_the_turn(tmp_path: Path, hash_embedder, bm25) -> None:
    store = EdgeStore(tmp_path / "e")
    ingest_documents(DOCS, IngestRequest(collection="grammar", progress=False), store, hash_embedder, bm25)
    dead = simulated_model(1, fail_rate=1.0)
    hr = HydeRetriever(Retriever(store, hash_embedder, bm25),
                       lambda d: HypothesisGenerator(dead, "dead", d, hyde=HydeSettings()), HydeSettings())
    seen: list = []
    monitor = Monitor()
    Agent(_tool_then_answer({"query": "хотеть", "use_hyde": True}, seen), deps_type=TutorDeps,
          toolsets=[HydeSearchToolset()]).run_sync("x", deps=TutorDeps(retriever=hr, monitor=monitor))
    assert seen[0].content["used_hyde"] is False and seen[0].content["fallback_reason"] == "llm_error"
    assert seen[0].content["results"] and monitor.records()[0].fallback_reason == "llm_error"
    hr.close()


# -- A/B assignment -----------------------------------------------------------------------------

def test_assignment_is_sticky_and_deterministic() -> None:
    exp = Experiment("exp-a", hyde_share=0.5)
    arms = [exp.arm(f"user-{i}") for i in range(1000)]
    assert arms == [Experiment("exp-a", hyde_share=0.5).arm(f"user-{i}") for i in range(1000)]
    salted = [Experiment("exp-a", hyde_share=0.5, salt="s2").arm(f"user-{i}") for i in range(1000)]
    assert arms != salted  # the salt reshuffles
    assert exp.arm(None) == "unassigned" and exp.arm("") == "unassigned"


@pytest.mark.parametrize("share", [0.5, 0.9, 0.1])
def test_split_within_two_percent_over_100k_subjects(share: float) -> None:
    exp = Experiment("split", hyde_share=share)
    hyde = sum(exp.arm(f"subject-{i}") == "hyde" for i in range(100_000))
    assert abs(hyde / 100_000 - share) <= 0.02


def test_precedence_arm_then_explicit_then_default() -> None:
    exp = Experiment("p", hyde_share=1.0)  # everyone in the hyde arm
    assert decide(False, exp, "u", default=True) == decide(False, exp, "u", True)
    d = decide(False, exp, "u", default=True)  # (issue 13) an enrolled subject's arm beats an explicit request
    assert (d.use_hyde, d.arm, d.reason, d.requested, d.overridden) == (True, "hyde", "experiment", False, False)
    debug = Experiment("p", hyde_share=1.0, explicit_wins=True)
    d = decide(False, debug, "u", default=True)
    assert (d.use_hyde, d.arm, d.reason, d.requested, d.overridden) == (False, "hyde", "explicit", False, True)
    d = decide(None, exp, "u", default=False)
    assert (d.use_hyde, d.reason) == (True, "experiment")
    d = decide(None, exp, None, default=False)
    assert (d.use_hyde, d.arm, d.reason) == (False, "unassigned", "default")
    off = Experiment("p", hyde_share=1.0, enabled=False)
    d = decide(None, off, "u", default=False)
    assert (d.use_hyde, d.arm, d.reason) == (False, "unassigned", "experiment_off")
    d = decide(None, None, "u", default=True)
    assert (d.use_hyde, d.reason) == (True, "default")
    with pytest.raises(ValueError):
        Experiment(hyde_share=1.5)


def test_experiment_switches_off_by_editing_dotenv(isolated_env: Path) -> None:
    import os
    import time

    from hyde_tutor import ReloadableExperiment

    env = isolated_env / ".env"
    env.write_text("HYDE_EXPERIMENT__ENABLED=true\nHYDE_EXPERIMENT__HYDE_SHARE=1.0\n")
    live = ReloadableExperiment(env, check_every_s=0)
    assert live.current().arm("u") == "hyde"
    env.write_text("HYDE_EXPERIMENT__ENABLED=false\n")
    os.utime(env, (time.time() + 5, time.time() + 5))
    assert live.current().enabled is False and live.current().arm("u") == "unassigned"


# -- load --------------------------------------------------------------------------------------

def test_200_concurrent_tool_calls(hyde_retriever, tmp_path: Path) -> None:
    monitor = Monitor(tmp_path / "metrics.jsonl")
    agent = Agent(_tool_then_answer({"query": "хотеть 가고 싶어요"}, []), deps_type=TutorDeps, toolsets=[HydeSearchToolset()])
    exp = Experiment("load", hyde_share=0.5)

    async def main():
        return await asyncio.gather(*(
            agent.run("q", deps=TutorDeps(retriever=hyde_retriever, experiment=exp, monitor=monitor, subject_id=f"s{i}"))
            for i in range(200)
        ))

    results = asyncio.run(main())
    assert all(r.output.startswith("Ответ") for r in results)
    records = monitor.records()
    assert len(records) == 200 == monitor.total
    assert all(r.error is None for r in records)
    monitor.flush()  # the JSONL is written by the monitor's writer thread
    lines = (tmp_path / "metrics.jsonl").read_text().splitlines()
    assert len(lines) == 200
    aggs = monitor.aggregates()
    assert sum(a.count for a in aggs.values()) == 200
    for arm, agg in aggs.items():
        arm_recs = [r for r in records if r.arm == arm]
        assert agg.count == len(arm_recs)
        assert agg.mean_results == pytest.approx(sum(r.results for r in arm_recs) / len(arm_recs))
        assert agg.fallback_rate == pytest.approx(sum(1 for r in arm_recs if r.use_hyde and r.fallback_reason) / len(arm_recs))
    assert {r.arm for r in records} == {"hyde", "raw"}
    assert all(r.use_hyde == (r.arm == "hyde") for r in records)
    assert all(r.used_hyde for r in records if r.arm == "hyde")


# -- README example ----------------------------------------------------------------------------

def _agent_block() -> str:
    """The agent example: the README's block and the agent page's are the same code, run here once each way."""
    readme, page = example("readme-agent"), example("agent")
    assert readme.code == page.code, "README.md and docs/agent.md show different agent examples"
    assert len(readme.code.strip().splitlines()) <= 15
    return readme.code


def _ingest_small_bundled(root: Path) -> None:
    from typer.testing import CliRunner

    from hyde_tutor.cli import app

    for name, lines in (("grammar", 40), ("docs", 15)):
        small = root / f"{name}.jsonl"
        small.write_text("\n".join((ROOT / "data" / f"{name}.jsonl").read_text(encoding="utf-8").splitlines()[:lines])
                         + "\n", encoding="utf-8")
        assert CliRunner().invoke(app, ["ingest", "--collection", name, "--file", str(small)]).exit_code == 0


def test_readme_example_runs_verbatim(isolated_env: Path, monkeypatch: pytest.MonkeyPatch, capsys) -> None:
    code = _agent_block()
    _ingest_small_bundled(isolated_env)
    with chat_stub() as (base_url, log):
        monkeypatch.setenv("HYDE_LLM__BASE_URL", base_url)
        monkeypatch.setenv("HYDE_LLM__MODEL", "stub")
        exec(compile(code, "docs/agent.md", "exec"), {})
    out = capsys.readouterr().out
    assert "Используйте конструкцию из статьи g-b01" in out  # the answer came from the tool result
    assert "ArmAggregate(count=1" in out
    assert any(not body.get("tools") for body in log)  # hypotheses were generated through the same LLM
    assert any(m.get("role") == "tool" for body in log for m in body["messages"])


@pytest.mark.slow
def test_readme_example_runs_with_default_settings_on_the_embedded_model(default_model_env: Path, capsys) -> None:
    """No LLM settings at all: the embedded Qwen model, search-first, HyDE off by default."""
    code = _agent_block()
    _ingest_small_bundled(default_model_env)
    exec(compile(code, "docs/agent.md", "exec"), {})
    out = capsys.readouterr().out.strip().splitlines()
    answer, aggregates = "\n".join(out[:-1]), out[-1]
    assert len(answer) > 20 and re.search("[а-яё]", answer.lower())  # an answer in Russian was printed
    assert "'unassigned': ArmAggregate(count=2" in aggregates  # both collections searched, no experiment arm


def test_spans_nest_under_the_agent_tool_span(hyde_retriever, capfire) -> None:
    import logfire

    logfire.instrument_pydantic_ai()
    try:
        Agent(_tool_then_answer({"query": "хотеть", "use_hyde": True}, []), deps_type=TutorDeps,
              toolsets=[HydeSearchToolset()]).run_sync("x", deps=TutorDeps(retriever=hyde_retriever))
    finally:
        Agent.instrument_all(False)
    spans = capfire.exporter.exported_spans_as_dict()
    by_id = {s["context"]["span_id"]: s for s in spans}

    def ancestors(span):
        while span.get("parent"):
            span = by_id[span["parent"]["span_id"]]
            yield span["name"]

    search = next(s for s in spans if s["name"] == "hyde.search {collection}")
    chain = list(ancestors(search))
    assert any("grammar_search" in name for name in chain), chain
    generate = next(s for s in spans if s["name"] == "hyde.generate")
    assert "hyde.search {collection}" in list(ancestors(generate))


@pytest.mark.slow
def test_readme_streaming_example_runs_with_default_settings(default_model_env: Path, capsys) -> None:
    """The streaming block, verbatim, on the embedded model: text arrives and is printed."""
    block = example("agent-stream")
    _ingest_small_bundled(default_model_env)
    run(block)
    out = capsys.readouterr().out
    assert len(out.strip()) > 10 and re.search("[а-яё가-힣]", out.lower())
