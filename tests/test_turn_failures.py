"""Exceptions that used to leave a tool call or end a chat turn: the experiment's decision outside the tool's
``try`` (a lone surrogate subject id), the prefetch's unavailability forgotten by the run, and the chat's
searches that ignored the agent's own collections."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
from pydantic_ai import Agent
from pydantic_ai.exceptions import ToolFailed
from pydantic_ai.messages import ModelResponse, TextPart
from pydantic_ai.models.function import AgentInfo, FunctionModel

from hyde_tutor import EdgeStore
from hyde_tutor.corpus.ingest import IngestRequest, ingest_documents
from hyde_tutor.hyde import HydeRetriever
from hyde_tutor.tutor.chat import answer_turn
from hyde_tutor.experiment.assignment import Experiment
from hyde_tutor.plugin.monitor import Monitor
from hyde_tutor.plugin.toolset import TutorDeps, search_with_deps
from hyde_tutor.plugin.capabilities import HydeTutor
from hyde_tutor.retrieval.retriever import Retriever

from .test_store import DOCS

LONE_SURROGATE = "\udcff"


@pytest.fixture()
def ko_grammar(tmp_path: Path, hash_embedder, bm25) -> Iterator[HydeRetriever]:  # type: ignore[no-untyped-def]
    """A tutor's store whose grammar collection is called ``ko_grammar`` (no ``grammar``, no ``docs``)."""
    store = EdgeStore(tmp_path / "edge")
    ingest_documents(DOCS, IngestRequest(collection="ko_grammar", progress=False), store, hash_embedder, bm25)
    hr = HydeRetriever(Retriever(store, hash_embedder, bm25), lambda d: None)  # type: ignore[arg-type, return-value]
    yield hr
    hr.close()


def _answering(seen: list[AgentInfo]) -> FunctionModel:
    def answer(messages, info: AgentInfo) -> ModelResponse:  # type: ignore[no-untyped-def]
        seen.append(info)
        return ModelResponse(parts=[TextPart("Скажите: 부산에 가고 싶어요.")])

    return FunctionModel(answer)


async def test_a_lone_surrogate_subject_gets_an_arm_not_a_crash(retriever) -> None:  # type: ignore[no-untyped-def]
    hr = HydeRetriever(retriever, lambda d: None)  # type: ignore[arg-type, return-value]
    monitor = Monitor()
    deps = TutorDeps(hr, Experiment(hyde_share=0.0), monitor, subject_id=LONE_SURROGATE)
    found = await search_with_deps(deps, "grammar_search", "grammar", "хочу", 3, None)
    assert found["results"] and [r.arm for r in monitor.records()] == ["raw"]


async def test_an_experiment_that_cannot_be_read_fails_the_tool_call_cleanly(retriever) -> None:  # type: ignore[no-untyped-def]
    hr = HydeRetriever(retriever, lambda d: None)  # type: ignore[arg-type, return-value]
    deps = TutorDeps(hr, subject_id="u1")

    async def broken() -> None:
        raise OSError("experiment.json: permission denied")

    deps.acurrent_experiment = broken  # type: ignore[method-assign]
    with pytest.raises(ToolFailed, match="grammar_search is unavailable right now"):
        await search_with_deps(deps, "grammar_search", "grammar", "хочу", 3, None)


def test_a_chat_turn_whose_prefetch_fails_still_answers(ko_grammar: HydeRetriever) -> None:
    seen: list[AgentInfo] = []
    deps = TutorDeps(ko_grammar, subject_id="u1")

    async def broken() -> None:
        raise OSError("experiment.json: permission denied")

    deps.acurrent_experiment = broken  # type: ignore[method-assign]
    agent = Agent(_answering(seen), deps_type=TutorDeps, capabilities=[HydeTutor(mode="retrieve-first",
                                                                                  grammar_collection="ko_grammar")])
    turn = answer_turn(agent, deps, "хочу поехать", on_found=lambda entries, records: None)
    assert turn.model_error is None and turn.text
    assert "недоступен" in (seen[0].instructions or "")


def test_the_chat_with_the_store_down_tells_the_model_the_reference_is_unavailable(
        ko_grammar: HydeRetriever, monkeypatch: pytest.MonkeyPatch) -> None:
    """The prefetch (the CLI chat's path) found the store unusable; the run must not forget it and tell the
    model that nothing was found."""
    seen: list[AgentInfo] = []
    from hyde_tutor.errors import StoreUnavailableError

    def down(*args, **kwargs):  # type: ignore[no-untyped-def]
        raise StoreUnavailableError("connection refused")

    monkeypatch.setattr(ko_grammar.retriever.store, "search_batch", down)  # down: every search fails
    agent = Agent(_answering(seen), deps_type=TutorDeps, capabilities=[HydeTutor(mode="retrieve-first",
                                                                                  grammar_collection="ko_grammar")])
    shown: list[list[dict]] = []
    turn = answer_turn(agent, TutorDeps(ko_grammar), "хочу поехать", on_found=lambda e, r: shown.append(e))
    assert shown == [[]] and turn.text
    instructions = seen[0].instructions or ""
    assert "недоступен" in instructions and "ничего не нашёл" not in instructions


def test_the_chat_prefetch_searches_the_agents_collections(ko_grammar: HydeRetriever) -> None:
    seen: list[AgentInfo] = []
    agent = Agent(_answering(seen), deps_type=TutorDeps, capabilities=[HydeTutor(mode="retrieve-first",
                                                                                  grammar_collection="ko_grammar",
                                                                                  docs_collection=None)])
    shown: list[list[dict]] = []
    monitor = Monitor()
    turn = answer_turn(agent, TutorDeps(ko_grammar, monitor=monitor), "хочу поехать",
                       on_found=lambda e, r: shown.append(e))
    assert shown[0] and any(e.get("pattern") == "-고 싶다" for e in shown[0])
    assert [(r.tool, r.collection) for r in monitor.records()] == [("grammar_search", "ko_grammar")]
    assert turn.model_error is None and "-고 싶다" in (seen[0].instructions or "")


def test_a_failed_model_turn_shows_entries_from_the_agents_collections(ko_grammar: HydeRetriever) -> None:
    def fails(messages, info):  # type: ignore[no-untyped-def]
        raise RuntimeError("model crashed before any search")

    agent = Agent(FunctionModel(fails), deps_type=TutorDeps,
                  capabilities=[HydeTutor(mode="tools", grammar_collection="ko_grammar", docs_collection=None)])
    turn = answer_turn(agent, TutorDeps(ko_grammar), "хочу поехать")
    assert turn.model_error is not None and "Вот что нашлось" in turn.text and "-고 싶다" in turn.text
