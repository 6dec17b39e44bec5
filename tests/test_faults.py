"""Fault drills: every fault gives a fallback or a clear, actionable error, never a crash, hang or silent wrong answer.

The full list, and where each fault is covered:

=====================================================  ==========================================================
fault                                                  expected / test
=====================================================  ==========================================================
LLM backend down (base URL -> closed 127.0.0.1 port)   fallback ``llm_error``: generator level in
                                                       ``test_llm.py::test_server_down_gives_llm_error_fallback_reason``;
                                                       end to end through the tool here (``test_llm_backend_down...``)
LLM backend that cannot start                          fallback ``llm_error``: ``test_hyde.py::test_llm_backend_that_cannot_start_falls_back``
LLM raises / hangs (in-process model)                  ``test_hyde.py::test_fallbacks_return_raw_results``,
                                                       ``test_hyde.py::test_timeout_falls_back``,
                                                       ``test_hypotheses.py::test_failure_reasons``
LLM slow (server accepts, never answers)               fallback ``timeout`` within the HyDE timeout: here
LLM garbage / empty text                               ``empty_hypotheses`` (garbage = no Hangul, dropped by the guard):
                                                       ``test_hypotheses.py::test_garbage_without_korean_is_rejected``,
                                                       ``test_hyde.py::test_fallbacks_return_raw_results`` (empty);
                                                       over real HTTP through the tool here, plus a non-JSON body (``llm_error``)
LLM fails on every call during a chat turn             ``test_toolset.py::test_hyde_failure_never_fails_the_turn``,
                                                       ``test_chat_and_report.py::test_chat_loop_survives_a_failing_model_and_a_looping_one``
store failure inside the tool                          tool result "unavailable": ``test_toolset.py::test_store_failure_is_a_clear_tool_result_not_a_crash``
embedded store locked by another process               ``StoreLockedError`` ("Stop the other hyde-tutor process"):
                                                       store level in ``test_store.py::test_store_locked_by_another_process``
                                                       (edge and qdrant-client local); CLI and tool here
shard folder deleted while closed                      ``StoreUnavailableError`` naming ``--recreate``:
                                                       ``test_store.py::test_edge_store_with_deleted_shard_folder``
storage folder deleted mid-run (store open)            ``StoreUnavailableError`` naming ``--recreate``, then
                                                       re-ingest recovers: here (in a subprocess, so a segfault or hang shows)
embedder of another dimension vs existing collection   ``EmbedderMismatchError`` naming ``--recreate``: store level in
                                                       ``test_store.py::test_embedder_mismatch_names_the_fix``; tool and CLI here
missing collection                                     ``CollectionNotFoundError`` naming ``hyde-tutor ingest``:
                                                       ``test_store.py::test_missing_collection_is_a_clear_error``,
                                                       ``test_cli.py::test_search_errors_are_clear``
malformed / oversized / non-UTF-8 corpus lines         reported with line numbers: ``test_documents.py::test_bad_lines_are_reported_with_line_numbers``,
                                                       ``test_cli.py::test_ingest_reports_malformed_lines_and_exits_nonzero``
ingest killed half-way                                 re-run completes, no duplicates: ``test_ingest_kill.py``
bad tool / CLI arguments                               ``ModelRetry`` / exit 2, never a traceback: ``test_fuzz.py``,
                                                       ``test_toolset.py::test_bad_arguments_come_back_as_retry_messages``
1,000 calls with 20 % LLM errors and 10 % hangs        no failed call, every fallback recorded: ``test_reliability.py``
=====================================================  ==========================================================
"""

from __future__ import annotations

import asyncio
import json
import shutil
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager
from http.server import BaseHTTPRequestHandler
from pathlib import Path
from typing import Any

import pytest
from typer.testing import CliRunner

from hyde_tutor import (
    Bm25Encoder,
    EdgeStore,
    HydeSearchToolset,
    KoreanAwareAnalyzer,
    Monitor,
    Settings,
    TutorDeps,
)
from hyde_tutor.cli import app
from hyde_tutor.config import HydeSettings, LLMSettings
from hyde_tutor.hyde import HydeRetriever
from hyde_tutor.corpus.ingest import IngestRequest, ingest_documents
from hyde_tutor.retrieval.retriever import Retriever

from .chat_stub import completion, send_json, serve
from .conftest import ROOT, HashEmbedder
from .test_reliability import call_tool, tool_context
from .test_store import DOCS

runner = CliRunner()
QUERY = "хотеть 가고 싶어요"


def _ingested(root: Path, embedder: HashEmbedder, bm25: Bm25Encoder, collection: str = "grammar") -> EdgeStore:
    store = EdgeStore(root)
    ingest_documents(DOCS, IngestRequest(collection=collection, progress=False), store, embedder, bm25)
    return store


def _search_tool(hr: HydeRetriever, monitor: Monitor | None = None, **args: Any) -> Any:
    from pydantic_ai.exceptions import ToolFailed

    ctx = tool_context(TutorDeps(retriever=hr, monitor=monitor))
    try:
        return asyncio.run(call_tool(HydeSearchToolset(), ctx, "grammar_search", {"query": QUERY, **args}))
    except ToolFailed as failed:  # a store failure: the failed tool result the model sees
        return {"results": [], "error": failed.message}


def _hyde_over_http(base_url: str, retriever: Retriever, timeout_s: float = 30.0, n: int = 2) -> HydeRetriever:
    """The production wiring (``from_settings``: OpenAI-compatible backend) over a test retriever."""
    settings = Settings(llm=LLMSettings(base_url=base_url, model="stub"),
                        hyde=HydeSettings(timeout_s=timeout_s, n_hypotheses=n, cache="off"))
    return HydeRetriever.from_settings(settings, retriever=retriever)


def _closed_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])  # closed when the block ends: connections are refused


@pytest.fixture()
def retriever(tmp_path: Path, hash_embedder, bm25) -> Iterator[Retriever]:
    r = Retriever(_ingested(tmp_path / "edge", hash_embedder, bm25), hash_embedder, bm25)
    yield r
    r.close()


# -- LLM faults over real HTTP ------------------------------------------------------------------

def test_llm_backend_down_falls_back_with_llm_error(isolated_env: Path, retriever: Retriever) -> None:
    hr = _hyde_over_http(f"http://127.0.0.1:{_closed_port()}/v1", retriever)
    monitor = Monitor()
    out = _search_tool(hr, monitor, use_hyde=True)
    assert (out["used_hyde"], out["fallback_reason"]) == (False, "llm_error")
    assert out["results"][0]["id"] == "g1"  # the raw results, not an empty answer
    (rec,) = monitor.records()
    assert (rec.fallback_reason, rec.error, rec.used_hyde) == ("llm_error", None, False)
    res = asyncio.run(hr.search("grammar", QUERY, use_hyde=True))
    assert res.errors and all("Connection" in e for e in res.errors)  # the reason is kept for diagnosis


def test_slow_llm_server_times_out_and_falls_back(isolated_env: Path, retriever: Retriever) -> None:
    with socket.socket() as silent:  # accepts connections (kernel backlog) but never answers
        silent.bind(("127.0.0.1", 0))
        silent.listen(64)
        hr = _hyde_over_http(f"http://127.0.0.1:{silent.getsockname()[1]}/v1", retriever, timeout_s=0.5)
        monitor = Monitor()
        started = time.perf_counter()
        out = _search_tool(hr, monitor, use_hyde=True)
        elapsed = time.perf_counter() - started
    assert (out["used_hyde"], out["fallback_reason"]) == (False, "timeout")
    assert out["results"][0]["id"] == "g1"
    assert elapsed < 10  # bounded by the HyDE timeout, not by the server
    assert monitor.records()[0].fallback_reason == "timeout"


class _StubLLM(BaseHTTPRequestHandler):
    """An OpenAI-compatible chat endpoint whose answer the test picks (``reply``)."""

    reply: str | bytes = ""

    def do_POST(self) -> None:
        self.rfile.read(int(self.headers["Content-Length"]))
        reply = self.reply
        send_json(self, reply if isinstance(reply, bytes) else completion({"role": "assistant", "content": reply}))

    def log_message(self, *args: object) -> None:
        pass


@contextmanager
def stub_llm(reply: str | bytes) -> Iterator[str]:
    with serve(type("Handler", (_StubLLM,), {"reply": reply})) as url:
        yield url


@pytest.mark.parametrize(
    ("reply", "reason"),
    [
        ("Lorem ipsum dolor sit amet, consectetur adipiscing elit; no Korean at all.", "empty_hypotheses"),
        ("Ответ без единого корейского слога, только русский текст.", "empty_hypotheses"),
        ("", "empty_hypotheses"),
        ("   \n\t  ", "empty_hypotheses"),
        (b"<html>502 Bad Gateway</html>", "llm_error"),  # not JSON at all
    ],
    ids=["latin-garbage", "russian-only", "empty", "whitespace", "not-json"],
)
def test_garbage_or_empty_llm_text_falls_back(isolated_env: Path, retriever: Retriever, reply, reason) -> None:
    with stub_llm(reply) as base_url:
        hr = _hyde_over_http(base_url, retriever)
        monitor = Monitor()
        out = _search_tool(hr, monitor, use_hyde=True)
        direct = asyncio.run(hr.search("grammar", QUERY, use_hyde=True))
    assert (out["used_hyde"], out["fallback_reason"]) == (False, reason)
    assert out["results"][0]["id"] == "g1"
    assert monitor.records()[0].fallback_reason == reason
    assert direct.hypotheses == []  # nothing of the garbage reached the search


def test_korean_reply_from_the_same_stub_is_used(isolated_env: Path, retriever: Retriever) -> None:
    """Control for the test above: the stub wiring works, so the fallbacks there are the guard's doing."""
    with stub_llm("Конструкция: -고 싶다 — желание. Пример: 가고 싶어요. — Хочу пойти.") as base_url:
        out = _search_tool(_hyde_over_http(base_url, retriever), use_hyde=True)
    assert (out["used_hyde"], out["fallback_reason"]) == (True, None)


# -- store faults -------------------------------------------------------------------------------

_HOLDER = """
import time
from hyde_tutor.retrieval.store import EdgeStore
store = EdgeStore({root!r})
store.count("grammar")
print("holding", flush=True)
time.sleep(120)
"""


@pytest.fixture()
def hash_cli(monkeypatch: pytest.MonkeyPatch, bm25: Bm25Encoder) -> None:
    """The CLI embeds with the 64-d HashEmbedder instead of USE (so a test collection matches), and reuses the
    session's BM25 encoder (same analyser and parameters) instead of loading the Korean model per command."""
    monkeypatch.setattr("hyde_tutor.retrieval.retriever.make_dense_embedder", lambda settings: HashEmbedder())
    monkeypatch.setattr("hyde_tutor.retrieval.retriever.Bm25Encoder", lambda **kwargs: bm25)


def test_store_locked_by_another_process_cli_and_tool(isolated_env: Path, hash_cli, hash_embedder, bm25) -> None:
    root = isolated_env / "data-dir" / "edge"
    _ingested(root, hash_embedder, bm25).close()
    holder = subprocess.Popen([sys.executable, "-c", _HOLDER.format(root=str(root))], stdout=subprocess.PIPE, text=True,
                              cwd=ROOT)
    try:
        assert holder.stdout is not None and holder.stdout.readline().strip() == "holding"
        for args in (["search", QUERY, "--collection", "grammar", "--no-hyde", "--json"],
                     ["search", QUERY, "--collection", "grammar", "--mode", "sparse"]):
            out = runner.invoke(app, args)
            assert out.exit_code == 2, out.output
            assert "locked by another process" in out.output and "Stop the other hyde-tutor process" in out.output
            assert out.exception is None or isinstance(out.exception, SystemExit)
            assert "Traceback" not in out.output
        corpus = isolated_env / "c.jsonl"
        corpus.write_text('{"_id": "n1", "title": "t", "text": "새 문서"}\n', encoding="utf-8")
        out = runner.invoke(app, ["ingest", "--collection", "grammar", "--file", str(corpus)])
        assert out.exit_code == 2 and "locked by another process" in out.output

        monitor = Monitor()
        hr = HydeRetriever(Retriever(EdgeStore(root), hash_embedder, bm25), lambda d: None, HydeSettings(enabled=False))  # type: ignore[arg-type,return-value]
        result = _search_tool(hr, monitor)
        assert result["results"] == [] and "locked by another process" in result["error"]
        assert monitor.records()[0].error == "StoreLockedError"
    finally:
        holder.kill()
        holder.wait()
    out = runner.invoke(app, ["search", QUERY, "--collection", "grammar", "--no-hyde", "--json"])
    assert out.exit_code == 0, out.output  # the lock goes with the process that held it


def deleted_mid_run_scenario(workdir: str) -> None:
    """Runs in a subprocess (a segfault or a hang must not take pytest down): prints one JSON line."""
    from hyde_tutor import CollectionNotFoundError, StoreUnavailableError

    embedder, bm25 = HashEmbedder(), Bm25Encoder(KoreanAwareAnalyzer())
    root = Path(workdir) / "storage"
    hr = HydeRetriever(Retriever(_ingested(root / "edge", embedder, bm25), embedder, bm25), lambda d: None,  # type: ignore[arg-type,return-value]
                       HydeSettings(enabled=False))
    report: dict[str, Any] = {"before": _search_tool(hr)["results"][0]["id"]}
    shutil.rmtree(root)
    report["tool_after"] = _search_tool(hr)
    errors = []
    for _ in range(2):
        try:
            hr.retriever.search("grammar", QUERY)
            errors.append(None)
        except (StoreUnavailableError, CollectionNotFoundError) as exc:
            errors.append(f"{type(exc).__name__}: {exc}")
    report["search_after"] = errors
    again = ingest_documents(DOCS, IngestRequest(collection="grammar", progress=False), hr.retriever.store, embedder,
                             bm25)
    report["reingest"] = {"written": again.written, "points": again.points_in_collection}
    report["after_reingest"] = hr.retriever.search("grammar", QUERY)[0].doc_id
    hr.close()
    reopened = EdgeStore(root / "edge")
    report["persisted"] = reopened.count("grammar")  # the re-ingest went to disk, not to unlinked files
    reopened.close()
    print(json.dumps(report, ensure_ascii=False))


def test_storage_folder_deleted_mid_run(tmp_path: Path) -> None:
    code = f"from tests.test_faults import deleted_mid_run_scenario; deleted_mid_run_scenario({str(tmp_path)!r})"
    proc = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, timeout=180, check=False)
    assert proc.returncode == 0, proc.stderr[-3000:]  # not a segfault (-11), not an exception
    report = json.loads(proc.stdout.strip().splitlines()[-1])
    assert report["before"] == "g1"
    tool = report["tool_after"]
    assert tool["results"] == [] and "unavailable" in tool["error"]
    assert "deleted" in tool["error"] and "--recreate" in tool["error"]  # says what happened and what to do
    for error in report["search_after"]:  # later calls: still an error, still actionable, never stale results
        assert error is not None and error.startswith("CollectionNotFoundError")
        assert "hyde-tutor ingest --collection grammar" in error
    assert report["reingest"] == {"written": len(DOCS), "points": len(DOCS)}
    assert report["after_reingest"] == "g1" and report["persisted"] == len(DOCS)


def test_embedder_of_another_dimension_is_a_clear_tool_error_and_cli_error(isolated_env: Path, hash_embedder, bm25) -> None:
    root = isolated_env / "data-dir" / "edge"
    store = _ingested(root, hash_embedder, bm25)  # built with hash-test (64-d)
    swapped = HashEmbedder(dim=32, name="swapped-model")
    hr = HydeRetriever(Retriever(store, swapped, bm25), lambda d: None, HydeSettings(enabled=False))  # type: ignore[arg-type,return-value]
    monitor = Monitor()
    out = _search_tool(hr, monitor)
    assert out["results"] == []
    assert "hash-test (64-d)" in out["error"] and "swapped-model (32-d)" in out["error"] and "--recreate" in out["error"]
    assert monitor.records()[0].error == "EmbedderMismatchError"
    store.close()
    # the CLI is configured with USE (512-d): it refuses the 64-d collection before embedding anything
    cli = runner.invoke(app, ["search", QUERY, "--collection", "grammar", "--no-hyde", "--json"])
    assert cli.exit_code == 2 and "use-multilingual-v3 (512-d)" in cli.output and "--recreate" in cli.output
    assert "Traceback" not in cli.output and not cli.output.lstrip().startswith("{")
