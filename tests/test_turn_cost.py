"""What a served turn costs the server's CPU (issue 40): work done once instead of every turn."""

from __future__ import annotations

from pydantic_ai import Agent
from pydantic_ai.messages import ModelResponse, TextPart
from pydantic_ai.models.function import AgentInfo, FunctionModel

from hyde_tutor.plugin import capabilities, toolset
from hyde_tutor.plugin.capabilities import HydeTutor
from hyde_tutor.plugin.deps import TutorDeps


def test_the_tutor_builds_its_search_toolset_once_not_every_run(monkeypatch) -> None:
    """Was: every run built a new HydeSearchToolset, its tool schemas included (~5 ms of CPU a turn)."""
    built: list[int] = []
    original = toolset.HydeSearchToolset.__init__

    def counting(self, *args, **kwargs) -> None:  # type: ignore[no-untyped-def]
        built.append(1)
        original(self, *args, **kwargs)

    monkeypatch.setattr(toolset.HydeSearchToolset, "__init__", counting)
    tutor = HydeTutor(mode="tools")
    assert len(built) == 1

    seen: list[list[str]] = []

    def model(messages, info: AgentInfo) -> ModelResponse:  # type: ignore[no-untyped-def]
        seen.append(sorted(t.name for t in info.function_tools))
        return ModelResponse(parts=[TextPart("ответ")])

    agent = Agent(FunctionModel(model), deps_type=TutorDeps, capabilities=[tutor])
    for _ in range(3):
        agent.run_sync("Как сказать «хочу»?", deps=TutorDeps(retriever=None))
    assert len(built) == 1  # no toolset built by the runs
    assert seen == [["docs_search", "grammar_search"]] * 3  # and every run still has both tools
    assert HydeTutor(mode="retrieve-first").get_toolset() is None
    assert capabilities.HydeTutor(mode="tools").get_toolset() is not tutor.get_toolset()  # one per tutor
