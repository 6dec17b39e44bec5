"""Property-based fuzzing (hypothesis) of the tool arguments and the CLI: no unhandled exception, ever.

* Tools: any query (empty, huge, control characters, any non-surrogate unicode) and any ``top_k`` (any int,
  wrong types). A call returns a result or raises ``ModelRetry`` (which the agent sends back to the model);
  which one is decided by the documented rules, so a wrong answer fails too. Through the argument schema
  (as an agent calls it), a ``pydantic.ValidationError`` is the third allowed outcome (also a retry prompt).
* CLI: ``search --no-hyde --json`` with fuzzed queries, ``--top-k``, ``--mode`` and queries files: exit code
  0, 1 or 2 with a message, never a traceback; exit 0 exactly when the arguments are valid, with valid JSON.
"""

from __future__ import annotations

import asyncio
import json
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, event, given, settings
from hypothesis import strategies as st
from pydantic import ValidationError
from pydantic_ai import ModelRetry
from typer.testing import CliRunner

from hyde_tutor import EdgeStore, HydeSearchToolset, TutorDeps
from hyde_tutor.cli import app
from hyde_tutor.config import RetrievalSettings
from hyde_tutor.corpus.ingest import IngestRequest, ingest_documents
from hyde_tutor.plugin.toolset import MAX_TOOL_TOP_K

from .conftest import HashEmbedder
from .test_reliability import call_tool, tool_context
from .test_store import DOCS
from .test_toolset import simulated_hyde

MAX_CHARS = RetrievalSettings().max_query_chars
FUZZ = settings(max_examples=80, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])


def _half(valid: st.SearchStrategy[Any], edge: st.SearchStrategy[Any]) -> st.SearchStrategy[Any]:
    """``valid`` half of the time (one_of would flatten ``edge``'s branches and drown it)."""
    return st.booleans().flatmap(lambda pick: valid if pick else edge)


# any text: control characters included, surrogates excluded (they cannot be encoded, and JSON never carries them)
ANY_TEXT = st.text(st.characters(exclude_categories=["Cs"]), max_size=60)
QUERIES = _half(
    st.text(st.characters(exclude_categories=["Cs"]), min_size=1, max_size=200),  # mostly valid, any characters
    st.one_of(
        ANY_TEXT,
        st.text(st.characters(codec="utf-8"), min_size=MAX_CHARS - 5, max_size=MAX_CHARS + 5),  # around the limit
        st.builds(lambda s, n: s * n, st.text(min_size=1, max_size=4), st.integers(1, 30_000)),  # huge
        st.sampled_from(["", " ", "\x00", "\t\n\r", "\u200b", "\ufeff", "\u2028", "가고 싶어요",
                         "\u0000가\u0007고\x1b[31m"]),
    ),
)
TOP_KS = _half(
    st.integers(1, MAX_TOOL_TOP_K),
    st.one_of(st.integers(), st.integers(-2, MAX_TOOL_TOP_K + 2), st.booleans(), st.none(), st.floats(allow_nan=True),
              ANY_TEXT, st.lists(st.integers(), max_size=2), st.dictionaries(ANY_TEXT, st.integers(), max_size=1)),
)


def _valid_query(q: Any) -> bool:
    return isinstance(q, str) and bool(q.strip()) and len(q.strip()) <= MAX_CHARS


@pytest.fixture(scope="module")
def fuzz_retriever(tmp_path_factory: pytest.TempPathFactory, bm25):
    hr = simulated_hyde(tmp_path_factory.mktemp("fuzz"), HashEmbedder(), bm25, latency_ms=0)
    yield hr
    hr.close()


@FUZZ
@given(query=QUERIES, top_k=TOP_KS, use_hyde=st.sampled_from([None, True, False]),
       tool=st.sampled_from(["grammar_search", "docs_search"]))
def test_tool_functions_return_a_result_or_ask_for_a_retry(fuzz_retriever, query, top_k, use_hyde, tool) -> None:
    function = HydeSearchToolset().tools[tool].function
    ctx = tool_context(TutorDeps(retriever=fuzz_retriever))
    valid_k = isinstance(top_k, int) and not isinstance(top_k, bool) and 1 <= top_k <= MAX_TOOL_TOP_K
    event("valid arguments" if _valid_query(query) and valid_k else "invalid arguments")
    try:
        out = asyncio.run(function(ctx, query=query, top_k=top_k, use_hyde=use_hyde))
    except ModelRetry as exc:
        assert not (_valid_query(query) and valid_k), f"valid arguments were refused: {exc}"
        assert f"Call {tool} again" in str(exc)  # the model is told what to do
        return
    assert _valid_query(query) and valid_k, "invalid arguments were accepted"
    out = out.return_value  # the tool returns a ToolReturn: this is what the model is shown
    assert "error" not in out and isinstance(out["results"], list) and len(out["results"]) <= top_k
    assert out["used_hyde"] == (out["fallback_reason"] is None)
    json.dumps(out)  # what goes back to the model serialises


@FUZZ
@given(args=st.fixed_dictionaries({"query": st.one_of(QUERIES, st.integers(), st.none())},
                                  optional={"top_k": TOP_KS, "use_hyde": st.one_of(st.booleans(), st.none(), ANY_TEXT),
                                            "rerank_top_k": TOP_KS, "collection": ANY_TEXT}))
def test_tool_calls_through_the_schema_never_crash(fuzz_retriever, args) -> None:
    ctx = tool_context(TutorDeps(retriever=fuzz_retriever))
    try:
        out = asyncio.run(call_tool(HydeSearchToolset(), ctx, "docs_search", args))
    except (ValidationError, ModelRetry):
        return  # both become a retry prompt for the model
    assert "collection" not in args  # an unknown argument never gets through
    assert isinstance(out["results"], list) and "error" not in out


# -- CLI ------------------------------------------------------------------------------------------

runner = CliRunner()
MODES = _half(st.sampled_from(["hybrid", "dense", "sparse"]), ANY_TEXT)
TOP_K_ARGS = _half(st.integers(1, 100).map(str),
                       st.one_of(st.integers(-5, 120).map(str), ANY_TEXT, st.sampled_from(["5", " 7", "+3", "1_0", "٣", "1e3"])))


@pytest.fixture()
def cli_env(isolated_env: Path, monkeypatch: pytest.MonkeyPatch, bm25) -> Path:
    """A grammar collection in HYDE_DATA_DIR; the CLI embeds with HashEmbedder and the session's BM25."""
    monkeypatch.setattr("hyde_tutor.retrieval.retriever.make_dense_embedder", lambda s: HashEmbedder())
    monkeypatch.setattr("hyde_tutor.retrieval.retriever.Bm25Encoder", lambda **kw: bm25)
    with EdgeStore(isolated_env / "data-dir" / "edge") as store:
        ingest_documents(DOCS, IngestRequest(collection="grammar", progress=False), store, HashEmbedder(), bm25)
    return isolated_env


def _int_or_none(text: str) -> int | None:
    try:
        return int(text)  # what click's INT type does
    except ValueError:
        return None


def _check_clean_exit(result: Any) -> None:
    assert result.exit_code in (0, 1, 2), result.output
    assert result.exception is None or isinstance(result.exception, SystemExit), repr(result.exception)
    assert "Traceback" not in result.output


@FUZZ
@given(query=QUERIES, top_k=TOP_K_ARGS, mode=MODES)
def test_cli_search_never_shows_a_traceback(cli_env: Path, query: str, top_k: str, mode: str) -> None:
    result = runner.invoke(app, ["search", "--collection", "grammar", "--no-hyde", "--json",
                                 "--top-k", top_k, "--mode", mode, "--", query])
    _check_clean_exit(result)
    k = _int_or_none(top_k)
    valid = _valid_query(query) and k is not None and 1 <= k <= 100 and mode in ("hybrid", "dense", "sparse")
    event("valid arguments" if valid else "invalid arguments")
    if result.exit_code == 0:
        assert valid, "invalid arguments were accepted"
    else:  # valid arguments are refused only where click reads digits its own way (non-ASCII digits like "١")
        assert result.exit_code == 2 and (not valid or not top_k.isascii()), (result.exit_code, result.output[-500:])
    if result.exit_code == 0:
        (row,) = [json.loads(line) for line in result.stdout.splitlines() if line.strip()]
        assert row["query"] in (query, query.strip()) and len(row["results"]) <= k
    else:
        assert result.output.strip()  # a message says what was wrong


@FUZZ
@given(lines=st.lists(st.one_of(ANY_TEXT, st.builds(lambda t: json.dumps({"_id": t, "text": t}), ANY_TEXT),
                                st.sampled_from(["{", '{"_id": 1}', "[]", "{}"])), max_size=4))
def test_cli_queries_file_never_shows_a_traceback(cli_env: Path, lines: list[str]) -> None:
    path = cli_env / "queries.txt"
    path.write_text("\n".join(lines), encoding="utf-8")
    result = runner.invoke(app, ["search", "--collection", "grammar", "--no-hyde", "--json", "--queries-file", str(path)])
    _check_clean_exit(result)
    if result.exit_code == 0:
        rows = [json.loads(line) for line in result.stdout.splitlines() if line.strip()]
        assert all(isinstance(r["results"], list) for r in rows)
    else:
        assert result.exit_code == 2 and "error:" in result.output
