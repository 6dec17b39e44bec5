"""Resources and lifetimes: the shared embedded server, its one-request gate, closing what a retriever holds."""

from __future__ import annotations

import asyncio
import gc
from pathlib import Path

import pytest

from hyde_tutor.llm import server as server_module
from hyde_tutor.llm.backends import LLMBackend
from hyde_tutor.llm.server import LocalLlamaServer, LoopGates, release_local_server


def test_closing_one_backend_does_not_stop_the_shared_server_for_the_others(monkeypatch, tmp_path: Path) -> None:
    stopped: list[int] = []
    server = LocalLlamaServer(tmp_path / "m.gguf")
    monkeypatch.setattr(server, "stop", lambda: stopped.append(1))
    monkeypatch.setitem(server_module._local_servers, ("k",), server)
    server.users = 2  # two backends (HyDE's and the chat's) hold it
    first, second = LLMBackend(None, "a", "local", server), LLMBackend(None, "b", "local", server)
    first.close()
    first.close()  # idempotent: a second close does not release twice
    assert stopped == [] and server.users == 1 and ("k",) in server_module._local_servers
    second.close()
    assert stopped == [1] and ("k",) not in server_module._local_servers
    release_local_server(server)  # a stray release never goes negative or stops twice
    assert server.users == 0


def test_closing_a_local_backend_closes_the_http_client_it_made(monkeypatch, tmp_path: Path) -> None:
    import asyncio

    import httpx2

    server = LocalLlamaServer(tmp_path / "m.gguf")
    monkeypatch.setattr(server, "stop", lambda: None)
    monkeypatch.setitem(server_module._local_servers, ("c",), server)
    server.users = 2
    client = httpx2.AsyncClient()
    LLMBackend(None, "a", "local", server, http_client=client).close()  # no loop running: closed at once
    assert client.is_closed and server.users == 1

    async def inside_a_loop() -> httpx2.AsyncClient:
        other = httpx2.AsyncClient()
        LLMBackend(None, "b", "local", server, http_client=other).close()  # from a running loop: a task
        await asyncio.sleep(0.05)
        return other

    assert asyncio.run(inside_a_loop()).is_closed and server.users == 0


def test_generators_on_one_backend_share_one_gate_per_loop() -> None:
    from hyde_tutor.config import HydeSettings, LLMSettings
    from hyde_tutor.hyde.hypotheses import HypothesisGenerator

    backend = LLMBackend("test", "m", "local", gates=LoopGates(1), max_concurrency=1)
    grammar = HypothesisGenerator.for_backend(backend, "grammar", hyde=HydeSettings(), llm=LLMSettings())
    docs = HypothesisGenerator.for_backend(backend, "docs", hyde=HydeSettings(), llm=LLMSettings())

    async def gates() -> tuple:
        return grammar.call.options.gate(), docs.call.options.gate()

    first, second = asyncio.run(gates())
    assert first is not None and first is second  # was: one gate per domain, so both queued inside the server


async def test_the_agent_and_the_generators_of_one_embedded_server_never_send_two_requests_at_once() -> None:
    """The chat agent (``backend.agent_model``), the hypothesis generator and the question generator of one
    single-slot server queue at ONE gate; before, the agent and the question generator had none of their own
    at the server's, so requests overlapped there and timed out behind each other."""
    from pydantic_ai import Agent
    from pydantic_ai.messages import ModelResponse, TextPart
    from pydantic_ai.models.function import FunctionModel

    from hyde_tutor.config import HydeSettings, LLMSettings, Settings
    from hyde_tutor.corpus.documents import Document
    from hyde_tutor.hyde.hypotheses import HypothesisGenerator
    from hyde_tutor.hyde.questions import QuestionGenerator

    in_flight, most = [0], [0]

    async def server(messages, info):
        in_flight[0] += 1
        most[0] = max(most[0], in_flight[0])
        await asyncio.sleep(0.05)
        in_flight[0] -= 1
        return ModelResponse(parts=[TextPart("Конструкция: -고 싶다. Пример: 가고 싶어요.\n1. Как сказать «хочу»?")])

    backend = LLMBackend(FunctionModel(server), "m", "local", gates=LoopGates(1), max_concurrency=1)
    hypotheses = HypothesisGenerator.for_backend(backend, "grammar", hyde=HydeSettings(timeout_s=10), llm=LLMSettings())
    questions = QuestionGenerator.for_backend(backend, Settings())
    agent = Agent(backend.agent_model)
    docs = [Document(f"g{i}", f"-고 싶다 хотеть {i}", {}) for i in range(3)]
    await asyncio.gather(agent.run("Привет"), agent.run("Как дела?"), hypotheses.generate("хочу поехать", 1),
                         questions.generate(docs, 1))
    assert most[0] == 1 and backend.agent_model is backend.agent_model
    assert LLMBackend(FunctionModel(server), "m", "openai").agent_model.__class__ is FunctionModel  # no gate: as is


def test_a_finished_loops_gate_is_forgotten() -> None:
    gates = LoopGates(1)

    async def use() -> None:
        gates.get()

    for _ in range(5):
        asyncio.run(use())
    gc.collect()
    assert len(gates) == 0  # was: one entry per asyncio.run, forever


def test_closing_a_retriever_closes_its_embedder(tmp_path: Path, hash_embedder, bm25) -> None:
    from hyde_tutor import EdgeStore, Retriever

    closed: list[str] = []
    hash_embedder.close = lambda: closed.append("dense")  # type: ignore[attr-defined]
    Retriever(EdgeStore(tmp_path / "s"), hash_embedder, bm25).close()
    assert closed == ["dense"]


def test_two_processes_joining_the_model_use_different_partial_files(monkeypatch, tmp_path: Path) -> None:
    """The parts were joined through one fixed '.partial' name: two processes corrupted each other's join."""
    seen: list[str] = []
    real_open = Path.open

    def spy(self, mode="r", *a, **k):
        if "w" in mode:
            seen.append(self.name)
            raise OSError("stop after naming the file")
        return real_open(self, mode, *a, **k)

    monkeypatch.setattr(Path, "open", spy)
    try:
        server_module.qwen_path(tmp_path)
    except (OSError, Exception):
        pass
    if seen:  # the parts are installed here: the join's temporary file names this process
        import os

        assert str(os.getpid()) in seen[0] and seen[0].endswith(".partial")


def test_a_full_disk_during_the_model_join_leaves_no_partial_file_and_says_what_to_do(monkeypatch,
                                                                                     tmp_path: Path) -> None:
    """A CI run filled the disk while joining the 1.1 GB model: the OSError came raw and the half-written
    '.partial' file stayed behind, holding the space the next run needed."""
    import errno

    from hyde_tutor.errors import LLMUnavailableError

    def full_disk(src, out, length=0):
        out.write(src.read(4096))
        raise OSError(errno.ENOSPC, "No space left on device")

    from hyde_tutor.llm import weights

    monkeypatch.setattr(weights.shutil, "copyfileobj", full_disk)
    with pytest.raises(LLMUnavailableError) as caught:
        server_module.qwen_path(tmp_path / "models")
    message = str(caught.value)
    assert "No space left on device" in message and "1.1 GB" in message and "HYDE_DATA_DIR" in message
    assert list((tmp_path / "models").iterdir()) == []  # neither a half file nor a model


async def test_a_missing_or_broken_questions_index_is_looked_up_once_and_never_fails_the_search(retriever,
                                                                                                 monkeypatch) -> None:
    from hyde_tutor.config import HydeSettings
    from hyde_tutor.errors import StoreUnavailableError
    from hyde_tutor.hyde import HydeRetriever

    lookups: list[str] = []
    real = retriever.check_collection

    def counting(name):
        lookups.append(name)
        if name.endswith("__questions"):
            raise StoreUnavailableError("the questions collection's files are unreadable")
        return real(name)

    monkeypatch.setattr(retriever, "check_collection", counting)
    hr = HydeRetriever(retriever, lambda d: None, HydeSettings(enabled=False))  # type: ignore[arg-type,return-value]
    for _ in range(3):
        res = await hr.search("grammar", "хочу поехать", use_questions=True)
        assert res.results and not res.used_questions
    assert lookups.count("grammar__questions") == 1  # was: every search listed the collections, on the loop


async def test_a_tool_call_reads_dotenv_off_the_event_loop(isolated_env: Path, retriever) -> None:
    import threading

    from hyde_tutor import ReloadableExperiment
    from hyde_tutor.config import HydeSettings
    from hyde_tutor.hyde import HydeRetriever
    from hyde_tutor.plugin.toolset import TutorDeps, search_with_deps

    env = isolated_env / ".env"
    env.write_text("HYDE_EXPERIMENT__ENABLED=true\n")
    live = ReloadableExperiment(env, check_every_s=0)
    threads: list[str] = []
    real = live._stat

    def spy() -> float | None:
        threads.append(threading.current_thread().name)
        return real()

    live._stat = spy  # type: ignore[method-assign]
    hr = HydeRetriever(retriever, lambda d: None, HydeSettings(enabled=False))  # type: ignore[arg-type,return-value]
    await search_with_deps(TutorDeps(hr, live, None, "u1"), "grammar_search", "grammar", "хочу поехать", 3, False)
    assert threads and threading.main_thread().name not in threads  # the stat ran on a worker thread


def test_metrics_lines_of_several_writers_never_tear_and_a_failed_write_is_retried(tmp_path: Path,
                                                                                      monkeypatch) -> None:
    import json
    import os
    import threading

    from hyde_tutor.plugin import monitor as monitor_module
    from hyde_tutor.plugin.monitor import Monitor, RetrievalRecord

    path = tmp_path / "metrics.jsonl"
    real_open = os.open
    failures = {"left": 1}

    def flaky_open(p, flags, mode=0o777):
        if str(p) == str(path) and failures["left"]:
            failures["left"] -= 1
            raise OSError(28, "No space left on device")
        return real_open(p, flags, mode)

    monkeypatch.setattr(monitor_module.os, "open", flaky_open)
    monitors = [Monitor(path) for _ in range(3)]

    def fill(m: Monitor, tag: int) -> None:
        for i in range(1500):
            m.record(RetrievalRecord("e", "hyde", True, "x" * 300, f"tool{tag}", "grammar", results=i))

    threads = [threading.Thread(target=fill, args=(m, n)) for n, m in enumerate(monitors)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert all(m.flush() for m in monitors)
    lines = path.read_text(encoding="utf-8").splitlines()
    assert len(lines) == 4500 and all(json.loads(line)["experiment"] == "e" for line in lines)
    assert failures["left"] == 0  # the write that failed was tried again, and nothing was lost


def test_a_crash_while_writing_questions_never_leaves_a_document_marked_current(tmp_path: Path, hash_embedder,
                                                                               bm25) -> None:
    """Question ingest wrote the 'done' stamp with a document's first question, in the first batch: a crash
    after it left the document marked current with its other questions missing, and never regenerated."""
    from hyde_tutor import EdgeStore
    from hyde_tutor.corpus.ingest import IngestRequest, ingest_documents
    from hyde_tutor.hyde.question_index import question_point_id
    from hyde_tutor.hyde.question_index import ingest_questions
    from hyde_tutor.retrieval.store import questions_collection

    from .test_questions import DOCS, _generator, _model

    store = EdgeStore(tmp_path / "edge")
    ingest_documents(DOCS, IngestRequest(collection="grammar", progress=False), store, hash_embedder, bm25)
    real = store.upsert
    writes = {"n": 0}

    def crashing_upsert(name, points):
        writes["n"] += 1
        if writes["n"] == 2:  # the second batch of question points: the process dies here
            raise KeyboardInterrupt("power cut")
        return real(name, points)

    store.upsert = crashing_upsert  # type: ignore[method-assign]
    try:
        ingest_questions(DOCS, IngestRequest(collection="grammar", questions=3, progress=False, batch_size=2), store,
                         hash_embedder, bm25, _generator(_model([]), None))
    except KeyboardInterrupt:
        pass
    store.upsert = real  # type: ignore[method-assign]
    target = questions_collection("grammar")
    stamps = store.stored_hashes(target, [question_point_id(d.id, 0) for d in DOCS])
    stored = set(store.point_ids(target))
    for d in DOCS:
        if stamps.get(question_point_id(d.id, 0)):  # marked current: then all of its questions are there
            from .test_questions import QUESTIONS_FOR

            assert all(question_point_id(d.id, i) in stored for i in range(len(QUESTIONS_FOR[d.id])))
    calls: list[str] = []
    again = ingest_questions(DOCS, IngestRequest(collection="grammar", questions=3, progress=False), store, hash_embedder,
                             bm25, _generator(_model(calls), None))
    assert again.points_in_collection == 6 and sorted(calls) == ["g1", "g2", "g3"]  # all redone: none was stamped
    store.close()


def test_collection_json_is_written_atomically(tmp_path: Path, monkeypatch) -> None:
    from hyde_tutor import EdgeStore
    from hyde_tutor.retrieval.store import CollectionSpec
    from hyde_tutor.retrieval.store import edge

    writes: list[str] = []
    real_replace = edge.os.replace
    monkeypatch.setattr(edge.os, "replace", lambda a, b: (writes.append(Path(b).name), real_replace(a, b)))
    store = EdgeStore(tmp_path / "s")
    store.create_collection("c", CollectionSpec("hash-test", 8, "kiwi"))
    store.close()
    assert writes == ["collection.json"] and not list((tmp_path / "s" / "c").glob("*.tmp"))


def test_closing_the_embedder_while_a_call_starts_never_leaves_it_waiting() -> None:
    import threading

    from hyde_tutor.errors import EmbedderError
    from hyde_tutor.retrieval.embedders.use import UseEmbedder

    class Racy(UseEmbedder):
        def _event_loop(self, coro):
            loop = super()._event_loop(coro)
            self.close()  # another thread's close() lands right here
            return loop

    embedder = Racy()
    outcome: list[str] = []

    def call() -> None:
        try:
            embedder.embed(["текст"])
            outcome.append("returned")
        except EmbedderError as exc:
            outcome.append(str(exc))

    worker = threading.Thread(target=call, daemon=True)
    worker.start()
    worker.join(timeout=10)
    assert not worker.is_alive(), "the call waited forever on a closed embedder"
    assert outcome and "closed" in outcome[0]
