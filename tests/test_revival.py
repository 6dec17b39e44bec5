"""A dead part does not stay dead: the embedded model server (a failed start is not kept; a server killed in
use is started again on the next request, with a backoff after a failed restart), and the questions channel
(a questions collection deleted after first use drops that channel, not the search)."""

from __future__ import annotations

import asyncio
import logging
import os
import signal
import time
from pathlib import Path

import pytest

from hyde_tutor.config import HydeSettings, LLMSettings, Settings
from hyde_tutor.errors import LLMUnavailableError
from hyde_tutor.hyde.cache import NoCache
from hyde_tutor.hyde.hypotheses import HypothesisGenerator
from hyde_tutor.llm import server as server_module
from hyde_tutor.llm.backends import make_llm
from hyde_tutor.llm.server import local_server, release_local_server, smollm2_path

QUESTION = "Как сказать, что я хочу поехать в Пусан?"


def _settings(model: Path) -> Settings:
    return Settings(llm=LLMSettings(provider="local", local_model=str(model), max_tokens=8, threads=1,
                                    startup_timeout_s=60))


def _wait_dead(pid: int) -> None:
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline:
        try:
            os.kill(pid, 0)
        except ProcessLookupError:
            return
        time.sleep(0.05)


def test_a_failed_start_is_not_kept_and_the_next_use_starts_afresh(isolated_env: Path) -> None:
    model = isolated_env / "model.gguf"
    model.write_bytes(b"not a model")  # the server exits while loading it
    settings = _settings(model)
    with pytest.raises(LLMUnavailableError, match="exited"):
        local_server(settings)
    assert not [k for k in server_module._local_servers if k[0] == str(model)]  # nothing cached
    model.unlink()
    model.symlink_to(smollm2_path())  # the operator fixed it
    server = local_server(settings)
    try:
        assert server._proc is not None and server._proc.poll() is None and server.users == 1
    finally:
        release_local_server(server)


async def test_a_server_killed_in_use_starts_again_on_the_next_call_with_a_backoff(
        isolated_env: Path, caplog: pytest.LogCaptureFixture) -> None:
    model = isolated_env / "model.gguf"
    model.symlink_to(smollm2_path())
    settings = _settings(model)
    backend = make_llm(settings)
    gen = HypothesisGenerator(backend.model, backend.name, "grammar", cache=NoCache(), llm=settings.llm,
                              hyde=HydeSettings(timeout_s=60, min_hangul_chars=0), options=backend.call_options)
    server = backend.server
    assert server is not None and server._proc is not None
    try:
        assert (await gen.generate(QUESTION, n=1)).failure_reason is None
        first = server._proc.pid
        os.kill(first, signal.SIGKILL)  # out of memory, or an operator's kill
        _wait_dead(first)
        with caplog.at_level(logging.WARNING, logger="hyde_tutor"):
            again = await gen.generate(QUESTION, n=1)
        assert again.failure_reason is None, again.errors
        assert server._proc.pid != first and server.users == 1
        said = [r.getMessage() for r in caplog.records if "embedded model server" in r.getMessage()]
        assert len(said) == 1 and "exited with code -9" in said[0]  # the reason, once

        os.kill(server._proc.pid, signal.SIGKILL)  # killed again, and this time it cannot load
        _wait_dead(server._proc.pid)
        model.unlink()
        model.write_bytes(b"not a model")
        failed = await gen.generate(QUESTION, n=1)
        assert failed.failure_reason == "llm_error"
        started = time.monotonic()
        during = await gen.generate(QUESTION, n=1)  # within the backoff: no new start, a fast failure
        assert during.failure_reason == "llm_error" and time.monotonic() - started < 3.0
        model.unlink()
        model.symlink_to(smollm2_path())
        await asyncio.sleep(5.2)  # the first backoff: 5 s
        assert (await gen.generate(QUESTION, n=1)).failure_reason is None
    finally:
        backend.close()
    assert server._proc is None


async def test_a_questions_collection_deleted_after_first_use_drops_that_channel_not_the_search(
        tmp_path: Path, hash_embedder, bm25) -> None:  # type: ignore[no-untyped-def]
    """``ingest --questions K --recreate`` deletes ``grammar__questions`` and regenerates it for minutes: the
    searches meanwhile keep their raw hits, say why the channel went, and name no wrong collection."""
    from pydantic_ai.exceptions import ToolFailed

    from hyde_tutor import EdgeStore
    from hyde_tutor.plugin.toolset import TutorDeps, search_with_deps
    from hyde_tutor.retrieval.store import questions_collection

    from .test_questions import _generator, _ingest_all, _model, _pipeline

    store = EdgeStore(tmp_path / "edge")
    try:
        _ingest_all(store, hash_embedder, bm25, _generator(_model([]), None))
        hr = _pipeline(store, hash_embedder, bm25, enabled=True)
        assert (await hr.search("grammar", "хочу поехать", use_hyde=False)).used_questions  # first use: found
        store.delete_collection(questions_collection("grammar"))
        later = await hr.search("grammar", "хочу поехать", use_hyde=False)
        assert later.results and not later.used_questions
        assert any("questions channel dropped" in e and "grammar__questions" in e for e in later.errors), later.errors
        found = await search_with_deps(TutorDeps(retriever=hr), "grammar_search", "grammar", "хочу", 3, False)
        assert found["results"]  # the tool too: raw hits, no failure
        store.delete_collection("grammar")  # the searched collection itself gone: the message names it
        hr.retriever.forget("grammar")
        with pytest.raises(ToolFailed, match="collection 'grammar' does not exist"):
            await search_with_deps(TutorDeps(retriever=hr), "grammar_search", "grammar", "хочу", 3, False)
    finally:
        store.close()


def test_a_tool_failure_names_the_collection_the_error_names() -> None:
    from hyde_tutor.errors import CollectionNotFoundError
    from hyde_tutor.plugin.failures import tool_failure_message

    message = tool_failure_message(CollectionNotFoundError("grammar__questions"), "grammar_search", "grammar")
    assert "'grammar__questions' does not exist" in message and "'grammar' does" not in message
