"""Recorded generations: record -> replay round trip, not_recorded fallback, prompt refs, resumable record,
replay through an OpenAI-compatible server, the bundled recordings, and per-domain guards."""

from __future__ import annotations

import asyncio
import json
import shutil
from collections.abc import Iterator
from contextlib import contextmanager
from http.server import BaseHTTPRequestHandler
from pathlib import Path

import pytest
from pydantic_ai.messages import ModelResponse, TextPart
from pydantic_ai.models.function import FunctionModel

from hyde_tutor.config import HydeSettings, Settings
from hyde_tutor.evaluation.beir import load_beir
from hyde_tutor.hyde import HydeRetriever
from hyde_tutor.hyde.hypotheses import DOMAINS, HypothesisGenerator, HypothesisPrompts, MemoryCache
from hyde_tutor.hyde.requests import load_recordings
from hyde_tutor.llm.backends import make_llm, replay_backend
from hyde_tutor.llm.prompts import default_prompts_dir, load_prompt
from hyde_tutor.llm.recorder import RecordingWriter, record_hypotheses
from hyde_tutor.llm.recordings import Recording, RecordingBook, RecordingFormatError, ReplayModel, iter_recordings

from .chat_stub import completion, send_json, serve
from .conftest import ROOT

QUERIES = ["Как сказать, что я хочу поехать в Пусан?", "Как сказать «но» между двумя предложениями?"]


def _writer_model(calls: list[str] | None = None) -> FunctionModel:
    """A stand-in 'live' LLM: a grammar entry that names the question it answers."""

    async def fn(messages, info):
        user = str(messages[-1].parts[-1].content)
        if calls is not None:
            calls.append(user)
        return ModelResponse(parts=[TextPart(f"Конструкция: -고 싶다. Пример: 가고 싶어요. [{user[-50:]}]")])

    return FunctionModel(fn)


def _generator(model, name: str = "live", domain: str = "grammar", prompts_dir: Path | None = None,
               **hyde) -> HypothesisGenerator:
    hs = HydeSettings(**{"n_hypotheses": 2, "timeout_s": 5.0, **hyde})
    kw = {}
    if prompts_dir is not None:
        profile = DOMAINS[domain]
        kw = {"prompts": HypothesisPrompts(system=load_prompt(profile.prompt, directory=prompts_dir),
                                           request=load_prompt(profile.request, directory=prompts_dir))}
    return HypothesisGenerator(model, name, domain, cache=MemoryCache(), hyde=hs, **kw)  # type: ignore[arg-type]


def _record(path: Path, model, queries=QUERIES, n: int = 2, generator=None):
    gen = generator or _generator(model)
    return asyncio.run(record_hypotheses(gen, queries, RecordingWriter(path), n=n, model="test-writer",
                                         timeout_s=5, progress=False))


def test_record_then_replay_serves_the_same_texts(tmp_path: Path) -> None:
    path = tmp_path / "rec.jsonl"
    report = _record(path, _writer_model())
    assert (report.recorded, report.skipped, report.failed) == (4, 0, [])
    rows = [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines()]
    assert {r["perspective"] for r in rows} == {"rule", "example"}
    assert all(r["model"] == "test-writer" and r["kind"] == "hypothesis" and r["created"].endswith("Z") for r in rows)
    assert rows[0]["prompt_refs"] == ["hypothesis_grammar@v1", "hypothesis_request@v1", "perspectives@v1"]

    live = asyncio.run(_generator(_writer_model()).generate(QUERIES[0]))
    book = RecordingBook.load([path])
    assert len(book) == 4 and book.stale == 0 and book.models == ("test-writer",)
    replayed = asyncio.run(_generator(ReplayModel(book), name="replay").generate(QUERIES[0]))
    assert [h.text for h in replayed.hypotheses] == [h.text for h in live.hypotheses]
    assert replayed.failure_reason is None


def test_unrecorded_request_falls_back_with_not_recorded(tmp_path: Path, retriever) -> None:
    path = tmp_path / "rec.jsonl"
    _record(path, _writer_model(), queries=QUERIES[:1])
    model = ReplayModel(RecordingBook.load([path]))
    hs = HydeSettings(n_hypotheses=2, timeout_s=5.0)
    hr = HydeRetriever(retriever, lambda d: _generator(model, "replay"), hs)
    hit = asyncio.run(hr.search("grammar", QUERIES[0], top_k=3))
    miss = asyncio.run(hr.search("grammar", "Какой вопрос никто не записал?", top_k=3))
    assert hit.used_hyde and hit.fallback_reason is None and len(hit.hypotheses) == 2
    assert not miss.used_hyde and miss.fallback_reason == "not_recorded" and miss.results  # raw results still come back
    # a perspective beyond the recorded two is not recorded either: those channels are simply missing
    partial = asyncio.run(hr.search("grammar", QUERIES[0], top_k=3, n_hypotheses=3))
    assert partial.used_hyde and len(partial.hypotheses) == 2


def test_prompt_version_mismatch_and_edited_prompt_are_not_served(tmp_path: Path) -> None:
    prompts = tmp_path / "prompts"
    shutil.copytree(default_prompts_dir(), prompts)
    path = tmp_path / "rec.jsonl"
    _record(path, _writer_model(), generator=_generator(_writer_model(), prompts_dir=prompts))

    # a new request template version: the recorded answers were made for v1, so v2 requests are not recorded
    (prompts / "hypothesis_request.v2.md").write_text("Вопрос: {query}\nАкцент: {perspective}\n", encoding="utf-8")
    book = RecordingBook.load([path], prompts_dir=prompts)
    assert len(book) == 4  # still valid for v1
    v2 = _generator(ReplayModel(book), "replay", prompts_dir=prompts)
    assert v2.request.version == 2
    result = asyncio.run(v2.generate(QUERIES[0]))
    assert result.hypotheses == [] and result.failure_reason == "not_recorded" and result.not_recorded == 2

    # the v1 system prompt edited in place: same ref, other text -> every record is stale, nothing is served
    system = prompts / "hypothesis_grammar.v1.md"
    system.write_text(system.read_text(encoding="utf-8") + "\nДобавленная строка.\n", encoding="utf-8")
    stale = load_recordings([path], prompts_dir=prompts)
    assert len(stale) == 0 and stale.stale == 4


def test_a_book_without_a_renderer_matches_by_the_recorded_hash_and_never_serves_an_edited_prompt(tmp_path: Path) -> None:
    """The llm layer knows no request format: without a renderer a record is found by the hash it carries. One
    made with a system prompt edited since stays in the book but no live request matches it; one with no hash,
    or naming a prompt version that is gone, is stale."""
    prompts = tmp_path / "prompts"
    shutil.copytree(default_prompts_dir(), prompts)
    path = tmp_path / "rec.jsonl"
    _record(path, _writer_model(), generator=_generator(_writer_model(), prompts_dir=prompts))
    system = prompts / "hypothesis_grammar.v1.md"
    system.write_text(system.read_text(encoding="utf-8") + "\nДобавленная строка.\n", encoding="utf-8")
    book = RecordingBook.load([path], prompts_dir=prompts)
    assert len(book) == 4 and book.stale == 0
    result = asyncio.run(_generator(ReplayModel(book), "replay", prompts_dir=prompts).generate(QUERIES[0]))
    assert result.hypotheses == [] and result.failure_reason == "not_recorded"
    rows = [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines()]
    rows[0]["prompt_sha256"] = ""
    rows[1]["prompt_refs"] = ["hypothesis_grammar@v9", *rows[1]["prompt_refs"][1:]]
    path.write_text("".join(json.dumps(r, ensure_ascii=False) + "\n" for r in rows), encoding="utf-8")
    book = RecordingBook.load([path], prompts_dir=prompts)
    assert len(book) == 2 and book.stale == 2


def test_record_is_resumable_and_survives_a_torn_line(tmp_path: Path) -> None:
    path = tmp_path / "rec.jsonl"
    calls: list[str] = []
    _record(path, _writer_model(calls), queries=QUERIES[:1])
    assert len(calls) == 2
    with path.open("ab") as fh:  # a run killed mid-append leaves half a line
        fh.write(b'{"kind": "hypothesis", "query": "obre')
    report = _record(path, _writer_model(calls))  # both queries now: only the new one is generated
    assert (report.recorded, report.skipped) == (2, 2) and len(calls) == 4
    again = _record(path, _writer_model(calls))
    assert (again.recorded, again.skipped) == (0, 4) and len(calls) == 4
    assert len(list(iter_recordings(path))) == 4  # the torn line was closed off and is skipped


def test_a_bad_recordings_line_is_reported_with_file_and_line(tmp_path: Path) -> None:
    path = tmp_path / "bad.jsonl"
    path.write_text('{"query": "q"}\n{"kind": "hypothesis"}\n', encoding="utf-8")
    with pytest.raises(RecordingFormatError, match=r"bad\.jsonl:1: not a recording \(missing perspective"):
        RecordingBook.load([path])


def test_replay_provider_is_explicit_and_clear_when_empty(isolated_env: Path) -> None:
    empty = isolated_env / "none.jsonl"
    empty.write_text("", encoding="utf-8")
    from hyde_tutor.llm.backends import LLMUnavailableError, resolve_provider

    assert resolve_provider(Settings().llm) == "local"  # auto never picks replay
    with pytest.raises(LLMUnavailableError, match="hold no usable generation"):
        make_llm(Settings(llm={"provider": "replay", "recordings": str(empty)}))
    with pytest.raises(Exception, match="does not exist"):
        make_llm(Settings(llm={"provider": "replay", "recordings": str(isolated_env / "missing.jsonl")}))
    backend = make_llm(Settings(llm={"provider": "replay", "recordings": str(ROOT / "data" / "recordings")}))
    assert backend.kind == "replay" and backend.name == "replay:frontier-llm-stand-in"
    policy = HydeRetriever.from_settings(Settings(llm={"provider": "replay"}), retriever=object()).policy  # type: ignore[arg-type]
    assert policy.n_hypotheses == 1 and policy.fusion == "score"  # replay stands in for a capable model


def test_bundled_recordings_cover_every_eval_query_with_four_perspectives() -> None:
    book = load_recordings(sorted((ROOT / "data" / "recordings").glob("*.jsonl")))
    assert book.stale == 0 and book.models == ("frontier-llm-stand-in",)
    recorded = {(r.domain, r.query, r.perspective) for r in book.by_request.values()}
    for name, domain in (("grammar", "grammar"), ("docs", "docs"), ("grammar_holdout", "grammar")):
        queries = load_beir(ROOT / "data" / "eval" / name).queries
        missing = [(q.id, p) for q in queries for p in ("rule", "example", "mistake", "contrast")
                   if (domain, q.text.strip(), p) not in recorded]
        assert not missing, f"{name}: {missing[:5]}"


@contextmanager
def _compatible_server(book: RecordingBook) -> Iterator[str]:
    """An OpenAI-compatible chat-completions server that answers from recordings (the transport-level double)."""

    class Handler(BaseHTTPRequestHandler):
        def do_POST(self) -> None:  # noqa: N802
            body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
            system = "\n\n".join(m["content"] for m in body["messages"] if m["role"] == "system")
            user = next(m["content"] for m in reversed(body["messages"]) if m["role"] == "user")
            rec = book.lookup(system, user)
            send_json(self, completion({"role": "assistant", "content": rec.text if rec else "no recording"}))

        def log_message(self, *args: object) -> None:
            pass

    with serve(Handler) as url:
        yield url


def test_bundled_recordings_replay_the_same_through_an_openai_compatible_server(isolated_env: Path) -> None:
    book = load_recordings(sorted((ROOT / "data" / "recordings").glob("*.jsonl")))
    query = load_beir(ROOT / "data" / "eval" / "grammar_holdout").queries[0].text

    def hypotheses(settings: Settings) -> list[str]:
        backend = make_llm(settings)
        gen = HypothesisGenerator(backend.model, backend.name, "grammar", hyde=settings.hyde, llm=settings.llm,
                                  options=backend.call_options)
        result = asyncio.run(gen.generate(query, 4))
        assert result.failure_reason is None
        return [h.text for h in result.hypotheses]

    replayed = hypotheses(Settings(llm={"provider": "replay"}))
    with _compatible_server(book) as url:
        served = hypotheses(Settings(llm={"provider": "openai-compatible", "base_url": url, "model": "stand-in"}))
    assert len(replayed) == 4 and served == replayed


def test_replay_backend_rejects_a_file_of_non_recordings(tmp_path: Path) -> None:
    path = tmp_path / "x.jsonl"
    path.write_text("[1, 2]\n", encoding="utf-8")
    with pytest.raises(RecordingFormatError, match="not a JSON object"):
        replay_backend(str(path))


def test_recording_round_trips_through_json() -> None:
    rec = Recording(kind="hypothesis", query="q", perspective="rule", text="t", model="m",
                    prompt_refs=("a@v1", "b@v1", "c@v1"), domain="grammar")
    assert Recording.from_obj(json.loads(rec.to_json())) == rec


# -- guards belong to the collection's domain --------------------------------------------------------

ENGLISH = "The Treaty of Westphalia was signed in 1648 and ended the Thirty Years' War in Europe."


def _english_model() -> FunctionModel:
    async def fn(messages, info):
        return ModelResponse(parts=[TextPart(ENGLISH)])

    return FunctionModel(fn)


def test_passage_domain_keeps_english_hypotheses_that_the_korean_domains_drop() -> None:
    passage = asyncio.run(_generator(_english_model(), domain="passage").generate("When did the war end?"))
    grammar = asyncio.run(_generator(_english_model(), domain="grammar").generate("When did the war end?"))
    assert [h.text for h in passage.hypotheses] == [ENGLISH] and passage.failure_reason is None  # 2 identical -> 1
    assert grammar.hypotheses == [] and grammar.rejected == 2 and grammar.failure_reason == "empty_hypotheses"
    pinned = asyncio.run(_generator(_english_model(), domain="grammar", min_hangul_chars=0).generate("q"))
    assert len(pinned.hypotheses) == 1  # an explicit setting still wins over the domain


def test_collections_get_their_domain_from_settings(retriever) -> None:
    seen: list[str] = []

    def factory(domain):
        seen.append(domain)
        return _generator(_english_model(), domain=domain)

    hs = HydeSettings(domains={"grammar": "grammar", "squad": "passage"})
    hr = HydeRetriever(retriever, factory, hs)
    hr.generator("grammar"), hr.generator("squad"), hr.generator("anything_else")
    assert seen == ["grammar", "passage"]  # anything_else -> default_domain passage, already built
    assert HydeRetriever(retriever, factory, HydeSettings(default_domain="docs")).generator("x").domain == "docs"
    gen = _generator(_english_model(), domain="passage")
    assert gen.prompt_refs == ("hypothesis_passage@v1", "hypothesis_passage_request@v1", "perspectives_passage@v1")


def test_unknown_domain_is_a_clear_error() -> None:
    from hyde_tutor.errors import HydeTutorError

    with pytest.raises(HydeTutorError, match="Unknown HyDE domain 'finance'; choose one of grammar, docs, passage"):
        HypothesisGenerator(_english_model(), "m", "finance")  # type: ignore[arg-type]
    with pytest.raises(Exception, match="domains"):
        Settings(hyde={"domains": {"x": "finance"}})


# -- the CLI ----------------------------------------------------------------------------------------

def test_cli_record_is_resumable_and_its_output_replays(isolated_env: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from typer.testing import CliRunner

    from hyde_tutor.cli import app

    from .chat_stub import HYPOTHESIS, chat_stub

    queries = isolated_env / "q.jsonl"
    queries.write_text('{"_id": "a", "text": "Как сказать, что я хочу?"}\n{"_id": "b", "text": "  Как сказать «но»?  "}\n',
                       encoding="utf-8")
    out = isolated_env / "rec" / "mine.jsonl"
    runner = CliRunner()
    with chat_stub() as (url, log):
        monkeypatch.setenv("HYDE_LLM__BASE_URL", url)
        args = ["record", "--collection", "grammar", "--queries", str(queries), "--hypotheses", "3", "--out", str(out)]
        first = runner.invoke(app, args, catch_exceptions=False)
        assert first.exit_code == 0, first.output
        assert "6 recorded, 0 already there, 0 failed" in first.output and len(log) == 6
        again = runner.invoke(app, [*args[:-4], "--hypotheses", "4", "--out", str(out)], catch_exceptions=False)
        assert "2 recorded, 6 already there" in again.output and len(log) == 8  # only the 4th perspective is new
    rows = [json.loads(line) for line in out.read_text(encoding="utf-8").splitlines()]
    assert {r["query"] for r in rows} == {"Как сказать, что я хочу?", "Как сказать «но»?"}  # stripped, as searched
    assert all(r["text"] == HYPOTHESIS and r["model"].endswith(":gpt-4.1") for r in rows)

    monkeypatch.delenv("HYDE_LLM__BASE_URL")
    monkeypatch.setenv("HYDE_LLM__PROVIDER", "replay")
    monkeypatch.setenv("HYDE_LLM__RECORDINGS", str(out))
    refused = runner.invoke(app, args)
    assert refused.exit_code == 2 and "replay provider would copy recordings" in refused.output
    book = RecordingBook.load([out])
    assert len(book) == 8


def test_cli_record_needs_queries_or_questions(isolated_env: Path) -> None:
    from typer.testing import CliRunner

    from hyde_tutor.cli import app

    result = CliRunner().invoke(app, ["record", "--collection", "grammar"])
    assert result.exit_code == 2 and "Give --queries FILE" in result.output
    result = CliRunner().invoke(app, ["record", "--questions", "3"])
    assert result.exit_code == 2 and "--questions K needs --file CORPUS" in result.output


def test_write_time_questions_record_and_replay(tmp_path: Path) -> None:
    from hyde_tutor.corpus.documents import Document
    from hyde_tutor.hyde.questions import QuestionGenerator
    from hyde_tutor.llm.recorder import record_questions

    async def fn(messages, info):
        return ModelResponse(parts=[TextPart("Как сказать, что я хочу поехать?\nЧем -고 싶다 отличается от -고 싶어하다?")])

    docs = [Document(id="g1", text="-고 싶다 — хотеть. Пример: 가고 싶어요.", payload={}),
            Document(id="g2", text="-지만 — но. Пример: 비싸지만 좋아요.", payload={})]
    path = tmp_path / "q.jsonl"
    live = QuestionGenerator(FunctionModel(fn), "live")
    report = asyncio.run(record_questions(live, docs, RecordingWriter(path), k=2, model="w", timeout_s=5, progress=False))
    assert report.recorded == 2
    replay = QuestionGenerator(ReplayModel(RecordingBook.load([path])), "replay")
    run = asyncio.run(replay.generate(docs, 2))
    assert run.results["g1"].questions == ["Как сказать, что я хочу поехать?", "Чем -고 싶다 отличается от -고 싶어하다?"]
    other = asyncio.run(replay.generate([Document(id="g3", text="Новый документ без записи.", payload={})], 2))
    assert other.results["g3"].failure == "not_recorded"


def test_a_hypothesis_record_naming_too_few_prompt_files_is_stale_not_a_crash(tmp_path: Path) -> None:
    path = tmp_path / "rec.jsonl"
    _record(path, _writer_model(), queries=QUERIES[:1])
    rows = [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines()]
    rows[0]["prompt_refs"] = rows[0]["prompt_refs"][:2]  # the perspectives file left out
    path.write_text("".join(json.dumps(r, ensure_ascii=False) + "\n" for r in rows), encoding="utf-8")
    book = load_recordings([path])
    assert len(book) == len(rows) - 1 and book.stale == 1
