"""What a served turn costs the server's CPU (issue 40): work done once instead of every turn."""

from __future__ import annotations

from pydantic_ai import Agent
from pydantic_ai.messages import ModelResponse, TextPart
from pydantic_ai.models.function import AgentInfo, FunctionModel

from hyde_tutor.plugin import toolset
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
    assert HydeTutor(mode="tools").get_toolset() is not tutor.get_toolset()  # one per tutor


def _three_turns_counting_history_reads(tmp_path, **stub):  # type: ignore[no-untyped-def]
    """Three turns of one chat on the stub server; the parts, the history reads of its store, the replies."""
    from starlette.testclient import TestClient

    from hyde_tutor.server import create_app

    from .served_stub import stub_parts
    from .test_server_api import _settings, ask

    parts = stub_parts(tmp_path, _settings(tmp_path), **stub)
    reads: list[str | None] = []
    inner = parts.store.read_history

    async def counting(head_id, *, limit=None):  # type: ignore[no-untyped-def]
        reads.append(head_id)
        return await inner(head_id, limit=limit)

    parts.store.read_history = counting  # type: ignore[method-assign]
    replies = []
    with TestClient(create_app(parts)) as client:
        for text in ("Как сказать «хочу»?", "А в прошедшем времени?", "А вежливо?"):
            response, chunks = ask(client, text)
            reply = next(c for c in chunks if c["type"] == "data-reply")["data"]
            assert response.status_code == 200 and not reply["failed"]
            replies.append(reply["text"])
    return parts, reads, replies


def test_a_served_turn_reads_its_conversation_once_not_twice(tmp_path) -> None:
    """Was: the server loaded the conversation to open the turn, then the UI adapter loaded and parsed it again."""
    parts, reads, _ = _three_turns_counting_history_reads(tmp_path)
    assert len(reads) == 2  # turns 2 and 3 read the stored history once each (turn 1 has none stored)
    (turn3,) = [t for t in parts.tutor.log.turns() if t.question_chars == len("А вежливо?")]
    assert turn3.agent_requests == 2  # the run saw the stored conversation and added only its own requests


async def test_the_handed_over_conversation_goes_to_one_matching_load_only() -> None:
    from pydantic_ai.conversation import Conversation
    from pydantic_ai.conversation_store import InMemoryConversationStore
    from pydantic_ai.messages import ModelRequest, UserPromptPart

    from hyde_tutor.server.history import LoadedOnce

    inner = InMemoryConversationStore()
    await inner.save(Conversation(messages=[ModelRequest(parts=[UserPromptPart("раз")])], conversation_id="c1"),
                     scope="s1")
    stored = await inner.load("c1", scope="s1")
    handed = Conversation(messages=[], conversation_id="c1")
    assert await LoadedOnce(inner, "c1", "s1", handed).load("c1", scope="s1") is handed
    once = LoadedOnce(inner, "c1", "s1", handed)
    await once.load("c1", scope="s1")
    again = await once.load("c1", scope="s1")  # the second load reads the store
    assert again is not handed and again.messages == stored.messages
    for other in (LoadedOnce(inner, "c1", "s2", handed), LoadedOnce(inner, "c2", "s1", handed)):
        assert await other.load("c1", scope="s1") is not handed  # another conversation or scope: read
    assert await LoadedOnce(inner, "c1", "s1", handed).load("c1", scope="s1", limit=1) is not handed


def test_the_reply_kept_as_shown_is_written_without_reading_the_history_again(tmp_path) -> None:
    """Was: replacing the stored reply with the one the learner read (every structured turn, and a grounded
    reply) loaded the conversation and saved it, two more reads and parses of the whole history a turn. Now it is
    one record read and one write; the model's own reply stays on a branch, and the next turn continues from the
    reply as read."""
    import asyncio

    parts, reads, replies = _three_turns_counting_history_reads(tmp_path, structured=True)
    assert len(reads) == 2  # turns 2 and 3 read the stored history once each, the kept replies read nothing
    (record,) = asyncio.run(parts.store.read_records())
    stored = asyncio.run(parts.store.load(record.conversation_id)).messages
    shown = [m.parts[0].content for m in stored if m.kind == "response" and len(m.parts) == 1
             and m.parts[0].part_kind == "text"]
    assert shown == replies  # every turn's reply as the learner read it, in order, on the conversation's head
    assert len(record.branches) == 3  # each model's own reply kept on a branch
    left = asyncio.run(parts.store.read_entry(record.branches[0])).message
    assert '"entry"' in left.parts[0].content  # the structured answer the model wrote


async def test_a_reply_saved_over_meanwhile_is_not_replaced(tmp_path) -> None:
    """The record moved on since this request's save (another tab's turn): the shown reply is not written over
    it, and the other save stays."""
    from pydantic_ai.conversation import Conversation
    from pydantic_ai.conversation_store import InMemoryConversationStore
    from pydantic_ai.messages import ModelRequest, ModelResponse, TextPart, UserPromptPart

    from hyde_tutor.server.history import LoadedOnce, keep_as_shown

    inner = InMemoryConversationStore()
    store = LoadedOnce(inner, "c1", "s1", None)
    first = Conversation(messages=[ModelRequest(parts=[UserPromptPart("раз")]),
                                   ModelResponse(parts=[TextPart('{"entry": 1}')])], conversation_id="c1")
    await store.save(first, scope="s1")
    other = await inner.load("c1", scope="s1")
    other.messages.append(ModelRequest(parts=[UserPromptPart("два")]))
    await inner.save(other, scope="s1")
    assert await keep_as_shown(store, "c1", "s1", "Подойдёт -고 싶다") is False
    assert [m.parts[0].content for m in (await inner.load("c1")).messages] == ["раз", '{"entry": 1}', "два"]
    assert await keep_as_shown(LoadedOnce(inner, "c1", "s1", None), "c1", "s1", "x") is False  # last is no reply


def test_the_tutor_agent_is_named_so_a_run_does_not_look_for_its_name() -> None:
    """An agent with no name looks for itself among its caller's local and global variables on every run (the
    served drill's profile: ~1 ms of a turn's CPU in pydantic-ai's ``_infer_name``); the tutor is named."""
    from pydantic_ai.models.test import TestModel

    from hyde_tutor.tutor.chat import AGENT_NAME, build_tutor_agent

    for mode in ("tools", "retrieve-first"):
        assert build_tutor_agent(TestModel(), mode=mode, grounded=mode == "retrieve-first").name == AGENT_NAME


def test_a_served_app_tunes_the_garbage_collector_while_it_serves_and_puts_it_back(tmp_path) -> None:
    """Was: Python's default threshold (700) ran the collector about twice a turn and every full collection
    walked the objects loaded at startup: ~10 % of a worker's CPU (issue 40). While the app serves, the young
    threshold is the setting's and the startup objects are frozen; after shutdown both are as they were; 0 leaves
    the collector alone."""
    import gc

    from starlette.testclient import TestClient

    from hyde_tutor.server import create_app

    from .served_stub import stub_parts
    from .test_server_api import _settings, ask

    before = gc.get_threshold()
    settings = _settings(tmp_path)
    assert settings.server.gc_threshold == 20_000  # the default
    with TestClient(create_app(stub_parts(tmp_path, settings))) as client:
        assert gc.get_threshold() == (20_000, *before[1:])
        assert gc.get_freeze_count() > 10_000  # the models, the corpus, the modules
        response, chunks = ask(client, "Как сказать «хочу»?")
        assert response.status_code == 200
        assert [c["data"]["failed"] for c in chunks if c["type"] == "data-reply"] == [False]
    assert gc.get_threshold() == before
    assert gc.get_freeze_count() == 0

    settings.server.gc_threshold = 0
    with TestClient(create_app(stub_parts(tmp_path / "off", settings))) as client:
        assert gc.get_threshold() == before and gc.get_freeze_count() == 0


def test_apps_that_stop_in_any_order_leave_the_collector_as_python_had_it() -> None:
    """Two apps in one process (tests; an app embedding another): the first one out must not put Python's
    settings back under the other, nor the last one out leave the served threshold behind."""
    import gc

    from hyde_tutor.server.collector import tune_collector

    before = gc.get_threshold()
    first = tune_collector(20_000)
    second = tune_collector(5_000)
    assert gc.get_threshold() == (5_000, *before[1:])
    first()  # the first app stops while the second still serves: still tuned
    assert gc.get_threshold() == (5_000, *before[1:]) and gc.get_freeze_count() > 0
    first()  # twice is once
    second()
    assert gc.get_threshold() == before and gc.get_freeze_count() == 0
