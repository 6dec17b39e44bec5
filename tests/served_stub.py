"""A served tutor on a stub model (pydantic-ai ``FunctionModel``) for the server tests, and uvicorn's factory
for the multi-worker test (``tests.served_stub:worker_app``, settings from the environment).

The stub streams like a capable tools-mode model: a ``grammar_search`` call carrying its own hypothesis, then
a reply naming the top entry's pattern, token by token (``HYDE_STUB_TOKEN_S`` seconds apart)."""

from __future__ import annotations

import asyncio
import json
import os
from pathlib import Path
from typing import Any

from pydantic_ai.messages import ModelRequest, ModelResponse, TextPart, ToolCallPart, ToolReturnPart, UserPromptPart
from pydantic_ai.models.function import AgentInfo, DeltaToolCall, FunctionModel

from hyde_tutor.config import Settings
from hyde_tutor.corpus.documents import Document

HYPOTHESIS = "Конструкция: -고 싶다\nНазвание: желание\nПример: 가고 싶어요. — Хочу пойти."
XSS = "<script>document.title='pwned'</script><img src=x onerror=\"document.title='pwned'\">"
XSS_HYPOTHESIS = "Пример: 위험해요, 스크립트. — Опасная статья, скрипт."
"""What the stub writes for the XSS entry's question: a capable model's hypothesis fits the question (the named
lead would otherwise put the -고 싶다 of :data:`HYPOTHESIS` first for any question)."""
XSS_DOC = Document("g-xss", f"{XSS} опасная статья 위험해요 скрипт", {"pattern": XSS, "name_ru": XSS,
                                                                       "examples": [{"ko": XSS, "ru": XSS}]})


def _question(messages: list[Any]) -> str:
    for message in reversed(messages):
        if isinstance(message, ModelRequest):
            for part in message.parts:
                if isinstance(part, UserPromptPart) and isinstance(part.content, str):
                    return part.content
    return ""


def _hypothesis(messages: list[Any]) -> str:
    return XSS_HYPOTHESIS if "скрипт" in _question(messages) else HYPOTHESIS


def _tool_result(messages: list[Any]) -> dict[str, Any] | None:
    last = messages[-1]
    if isinstance(last, ModelRequest):
        for part in last.parts:
            if isinstance(part, ToolReturnPart):
                return part.content if isinstance(part.content, dict) else {}
    return None


def _reply(result: dict[str, Any]) -> list[str]:
    top = (result.get("results") or [{}])[0]
    pattern = str(top.get("pattern") or "-고 싶다")
    return ["Скажите так: ", "부산에 ", "가고 ", "싶어요", f" — это {pattern}", "."]


ANSWER = {"entry": 1, "korean": "부산에 가고 싶어요.", "russian": "Я хочу поехать в Пусан."}


def stub_model(token_s: float = 0.0, fail: bool = False, structured: bool = False) -> FunctionModel:
    """The stub: ``fail`` raises on the first request (a model that is down); ``structured``: a retrieve-first
    model answering in one request with a :class:`~hyde_tutor.tutor.grounding.GroundedAnswer`'s JSON, streamed."""

    def call(messages: list[Any], info: AgentInfo) -> ModelResponse:
        if fail:
            raise ConnectionError("secret-internal-host:8443 refused")
        if structured:
            return ModelResponse(parts=[TextPart(json.dumps(ANSWER, ensure_ascii=False))])
        result = _tool_result(messages)
        if result is None:
            return ModelResponse(parts=[ToolCallPart("grammar_search", {"query": _question(messages), "hypothesis": _hypothesis(messages)})])
        return ModelResponse(parts=[TextPart("".join(_reply(result)))])

    async def stream(messages: list[Any], info: AgentInfo):  # type: ignore[no-untyped-def]
        if fail:
            raise ConnectionError("secret-internal-host:8443 refused")
        if structured:
            text = json.dumps(ANSWER, ensure_ascii=False)
            for start in range(0, len(text), 16):
                if token_s:
                    await asyncio.sleep(token_s)
                yield text[start:start + 16]
            return
        result = _tool_result(messages)
        if result is None:
            if token_s:
                await asyncio.sleep(token_s * 5)
            args = json.dumps({"query": _question(messages), "hypothesis": _hypothesis(messages)}, ensure_ascii=False)
            yield {0: DeltaToolCall(name="grammar_search", json_args=args, tool_call_id=f"call-{len(messages)}")}
            return
        for piece in _reply(result):
            if token_s:
                await asyncio.sleep(token_s)
            yield piece

    return FunctionModel(call, stream_function=stream)


STRUCTURED_ANSWER = {"entry": 1, "korean": "부산에 갈 수 있어요.", "russian": 'Я могу поехать в &#34;Пусан&#34;.'}
"""The structured stub's answer (on the test corpus's top entry, -(으)ㄹ 수 있다): its translation writes quotes as
HTML entities (the embedded model has)."""


def structured_model(token_s: float = 0.0, answer: dict[str, Any] | None = None) -> FunctionModel:
    """A stub of the embedded model's structured answer (retrieve-first, no tools): its JSON, a few characters
    at a time (``token_s`` apart: the head of the reply must reach the page before the JSON is complete)."""
    text = json.dumps(answer or STRUCTURED_ANSWER, ensure_ascii=False)

    def call(messages: list[Any], info: AgentInfo) -> ModelResponse:
        return ModelResponse(parts=[TextPart(text)])

    async def stream(messages: list[Any], info: AgentInfo):  # type: ignore[no-untyped-def]
        for i in range(0, len(text), 4):
            if token_s:
                await asyncio.sleep(token_s)
            yield text[i:i + 4]

    return FunctionModel(call, stream_function=stream)


def stub_parts(root: Path, settings: Settings, *, token_s: float = 0.0, fail: bool = False, extra_docs=(),
               database_url: str | None = None, mode: str = "tools",
               structured: bool = False):  # type: ignore[no-untyped-def]
    """Server parts over the four test documents (hash embedder, simulated HyDE) and a stub model (``mode``:
    ``tools``, or ``retrieve-first`` with a structured answer as the embedded model gives, in one piece per
    request; ``structured``: the embedded model's shape streamed a few characters at a time, its translation
    with HTML entities, :func:`structured_model`)."""
    from hyde_tutor.tutor.chat import build_tutor_agent
    from hyde_tutor.experiment.assignment import experiment_from_settings
    from hyde_tutor.tutor.served import ServedTutor
    from hyde_tutor.experiment.sqlconversations import SqlConversationStore
    from hyde_tutor.experiment.sqlstore import SqlEventLog, open_database
    from hyde_tutor.server import ServerParts
    from hyde_tutor.server.learners import LearnerIdentity, server_secret

    from .conftest import HashEmbedder
    from .test_toolset import simulated_hyde

    from hyde_tutor import Bm25Encoder, KoreanAwareAnalyzer
    from hyde_tutor.corpus.ingest import IngestRequest, ingest_documents

    embedder, bm25 = HashEmbedder(), Bm25Encoder(KoreanAwareAnalyzer())
    retriever = simulated_hyde(root, embedder, bm25, latency_ms=5)
    if extra_docs:
        ingest_documents(list(extra_docs), IngestRequest(collection="grammar", progress=False), retriever.retriever.store, embedder, bm25)
    database = open_database(database_url or settings)
    first = structured or mode == "retrieve-first"
    model = structured_model(token_s) if structured else stub_model(token_s, fail, structured=first)
    agent = build_tutor_agent(model, mode="retrieve-first", grounded=True) if first else build_tutor_agent(model)
    tutor = ServedTutor(agent, retriever, SqlEventLog(database), experiment_from_settings(settings),
                        retrieve_first=first)
    identity = LearnerIdentity(server_secret(None, settings.data_dir),
                               settings.server.host_secret.get_secret_value() if settings.server.host_secret else None)
    from hyde_tutor.server.build import outcome_report

    return ServerParts(tutor, SqlConversationStore(database), settings, identity, report=outcome_report,
                       closers=[retriever.close, database.close])


def worker_app():  # type: ignore[no-untyped-def]
    """uvicorn factory: one worker's app, its own store copy under ``HYDE_DATA_DIR/worker-<pid>``."""
    from hyde_tutor.server import create_app

    settings = Settings()
    root = settings.data_dir / f"worker-{os.getpid()}"
    root.mkdir(parents=True, exist_ok=True)
    return create_app(stub_parts(root, settings, token_s=float(os.environ.get("HYDE_STUB_TOKEN_S", "0"))))
