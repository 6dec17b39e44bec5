"""The ``hyde-tutor`` command line: ingest, search, eval, bench, export-beir."""

from __future__ import annotations

import asyncio
import json
import sys
from collections import Counter
from collections.abc import Iterator
from dataclasses import asdict, dataclass, replace
from contextlib import contextmanager
from pathlib import Path
from typing import Annotated, Any, get_args

import typer
from pydantic import ValidationError

from .config import Settings
from .documents import Document, iter_jsonl_documents
from .errors import HydeTutorError
from .evaluation import evaluate_arms, load_beir, report_json, report_table
from .ingest import ingest_documents, ingest_file, read_documents
from .question_index import ingest_questions
from .questions import question_generator_from_settings
from .hyde import FusionMode, HydeResult, HydeRetriever, RetrievedDoc
from .retriever import Retriever, SearchMode
from .store import Hit
from .rendering import payload_label
from .validation import validate_query

app = typer.Typer(add_completion=False, no_args_is_help=True, help="HyDE retrieval for Korean-tutor agents.")

# arm -> (channels, fusion override). "raw" uses the configured fusion.
RAW_ARMS: dict[str, tuple[SearchMode, str | None]] = {
    "raw": ("hybrid", None),
    "rrf": ("hybrid", "rrf"),
    "dbsf": ("hybrid", "dbsf"),
    "dense": ("dense", None),
    "sparse": ("sparse", None),
}


@app.callback()
def _check_settings() -> None:
    """HyDE retrieval for Korean-tutor agents."""
    try:
        Settings()
    except ValidationError as exc:
        _fail(settings_error_message(exc))


def settings_error_message(exc: ValidationError) -> str:
    """One line per bad setting, named as the environment variable a user sets."""
    parts = []
    for err in exc.errors():
        var = "HYDE_" + "__".join(str(p).upper() for p in err["loc"])
        parts.append(f"{var}={err.get('input')!r}: {err['msg']}")
    return "bad setting " + "; ".join(parts) + " (environment or .env; .env.example lists every key and its range)"


def _fail(message: str, code: int = 2) -> None:
    typer.secho(f"error: {message}", err=True, fg=typer.colors.RED)
    raise typer.Exit(code)


def _check_fusion(fusion: str | None) -> None:
    if fusion not in (None, *get_args(FusionMode)):
        _fail(f"--fusion must be one of {', '.join(get_args(FusionMode))}, not {fusion!r}.")


@contextmanager
def _retriever() -> Iterator[Retriever]:
    retriever: Retriever | None = None
    try:
        retriever = Retriever.from_settings(Settings())
        yield retriever
    except HydeTutorError as exc:
        _fail(str(exc))
    finally:
        if retriever is not None:
            retriever.close()


@app.command()
def ingest(
    collection: Annotated[str, typer.Option(help="Collection to write into.")],
    file: Annotated[Path, typer.Option(help="JSONL: grammar entries, documents, or BEIR corpus.jsonl.")],
    recreate: Annotated[bool, typer.Option("--recreate", help="Drop and rebuild the collection.")] = False,
    questions: Annotated[int | None, typer.Option(
        "--questions", min=1, max=10,
        help="Also write K learner questions per document with the LLM (write-time HyDE), searched as the questions channel.",
    )] = None,
    regenerate: Annotated[bool, typer.Option("--regenerate", help="With --questions: ignore the question cache.")] = False,
    sync: Annotated[bool, typer.Option(
        "--sync", help="Also delete the points of documents that are no longer in the file (reports how many).")] = False,
) -> None:
    """Ingest a JSONL file. Re-running writes only new or changed documents (and their questions)."""
    settings = Settings()
    with _retriever() as r:
        report = ingest_file(file, collection, r.store, r.dense, r.sparse, recreate=recreate,
                             batch_size=settings.index.batch_size, sync=sync)
        typer.echo(report.summary())
        if questions:
            typer.echo(_ingest_questions(settings, r, file, collection, questions, regenerate, recreate))
    if not report.ok:
        raise typer.Exit(1)


def _ingest_questions(settings: Settings, r: Retriever, file: Path, collection: str, k: int, regenerate: bool,
                      recreate: bool) -> str:
    documents, _ = read_documents(file)
    generator, close = question_generator_from_settings(settings)
    try:
        report = ingest_questions(documents, collection, r.store, r.dense, r.sparse, generator, k,
                                  regenerate=regenerate, recreate=recreate, batch_size=settings.index.batch_size)
    finally:
        close()
    return report.summary()


def _read_queries(path: Path) -> list[tuple[str, str]]:
    """BEIR queries.jsonl (``_id``, ``text``) or one query per line."""
    if not path.is_file():
        _fail(f"Queries file {path} does not exist.")
    out: list[tuple[str, str]] = []
    for n, line in enumerate(path.read_text(encoding="utf-8").splitlines(), start=1):
        if not line.strip():
            continue
        if line.lstrip().startswith("{"):
            try:
                obj = json.loads(line)
                out.append((str(obj["_id"]), str(obj["text"])))
                continue
            except (json.JSONDecodeError, KeyError, TypeError):
                _fail(f"{path}:{n}: expected a BEIR query object with _id and text.")
        out.append((str(n), line.strip()))
    return out


_LINE_BREAKS = {"\u0085": "\\u0085", "\u2028": "\\u2028", "\u2029": "\\u2029"}


def _json_line(obj: Any) -> str:
    """One JSON object on one line: the line breaks JSON leaves raw (NEL, U+2028/9) are escaped too."""
    text = json.dumps(obj, ensure_ascii=False)
    for raw, escaped in _LINE_BREAKS.items():
        text = text.replace(raw, escaped)
    return text


def _hit_json(hit: Hit) -> dict[str, Any]:
    return {"id": hit.doc_id, "score": round(hit.score, 6), "payload": hit.payload}


def _hit_line(rank: int, hit: Hit) -> str:
    p = hit.payload
    title = payload_label(p, long=True)
    return f"{rank:>2}. {hit.doc_id:<10} {hit.score:.4f}  {title}"


def _hyde(settings: Settings | None = None) -> HydeRetriever:
    from .llm import describe_backend

    settings = settings or Settings()
    typer.echo(f"LLM for HyDE: {describe_backend(settings)} (pin with HYDE_LLM__PROVIDER)", err=True)
    try:
        return HydeRetriever.from_settings(settings)
    except HydeTutorError as exc:
        _fail(str(exc))
        raise  # unreachable


async def _search_all(
    hr: HydeRetriever, collection: str, texts: list[str], concurrency: int = 4, **kwargs: Any
) -> list[HydeResult]:
    gate = asyncio.Semaphore(concurrency)

    async def one(text: str) -> HydeResult:
        async with gate:
            return await hr.search(collection, text, **kwargs)

    return list(await asyncio.gather(*(one(t) for t in texts)))


def _result_json(qid: str, res: HydeResult, verbose: bool) -> dict[str, Any]:
    line: dict[str, Any] = {
        "query_id": qid, "query": res.query, "used_hyde": res.used_hyde, "fallback_reason": res.fallback_reason,
        "results": [{"id": d.id, "score": round(d.score, 6), "payload": d.payload} for d in res.results],
    }
    if verbose:
        line["hypotheses"] = [{"perspective": h.perspective, "text": h.text, "cached": h.cached} for h in res.hypotheses]
        line["channels"] = {d.id: list(d.channels) for d in res.results}
        line["used_questions"] = res.used_questions
        line["timings_ms"] = {k: round(v, 1) for k, v in asdict(res.timings).items()}
        line["usage"] = asdict(res.usage)
    return line


@app.command()
def search(
    query: Annotated[str | None, typer.Argument(help="The learner's question.")] = None,
    collection: Annotated[str, typer.Option(help="Collection to search (bundled: grammar, docs).")] = "grammar",
    top_k: Annotated[int, typer.Option("--top-k", min=1, max=100)] = 5,
    hyde: Annotated[bool | None, typer.Option("--hyde/--no-hyde", help="Force HyDE on/off (default: HYDE_HYDE__ENABLED).")] = None,
    hypotheses: Annotated[int | None, typer.Option("--hypotheses", min=1, max=8, help="Hypotheses per query.")] = None,
    questions: Annotated[bool | None, typer.Option(
        "--questions/--no-questions", help="Add the write-time questions channel (default: HYDE_QUESTIONS__ENABLED).")] = None,
    fusion: Annotated[str | None, typer.Option(help="rrf | max | mean | score (channel fusion).")] = None,
    mode: Annotated[str, typer.Option(help="hybrid | dense | sparse (dense/sparse imply --no-hyde).")] = "hybrid",
    queries_file: Annotated[Path | None, typer.Option("--queries-file", help="BEIR queries.jsonl or one query per line.")] = None,
    as_json: Annotated[bool, typer.Option("--json", help="One JSON object per query per line.")] = False,
    show_hypotheses: Annotated[bool, typer.Option("--show-hypotheses", help="Add hypotheses, channels, timings to --json.")] = False,
    compare: Annotated[bool, typer.Option("--compare", help="Print raw and HyDE results side by side.")] = False,
) -> None:
    """Search a collection (HyDE per settings or flags) and print results or JSON lines."""
    if (query is None) == (queries_file is None):
        _fail("Give either a QUERY or --queries-file.")
    if mode not in ("hybrid", "dense", "sparse"):
        _fail(f"--mode must be hybrid, dense or sparse, not {mode!r}.")
    _check_fusion(fusion)
    queries = _read_queries(queries_file) if queries_file else [("q1", query or "")]
    if mode != "hybrid":
        return _plain_search(queries, collection, top_k, mode, as_json)  # type: ignore[arg-type]
    hr = _hyde()
    texts = [q for _, q in queries]
    try:
        results = asyncio.run(_search_all(hr, collection, texts, top_k=top_k, use_hyde=True if compare else hyde,
                                          n_hypotheses=hypotheses, fusion=fusion, use_questions=questions))
        raw = asyncio.run(_search_all(hr, collection, texts, top_k=top_k, use_hyde=False)) if compare else []
    except HydeTutorError as exc:
        _fail(str(exc))
    finally:
        hr.close()
    if compare:
        for (qid, _), res_raw, res_hyde in zip(queries, raw, results, strict=True):
            _print_side_by_side(qid, res_raw, res_hyde)
        return
    for (qid, _), res in zip(queries, results, strict=True):
        if as_json:
            typer.echo(_json_line(_result_json(qid, res, show_hypotheses)))
        else:
            _print_result(qid, res)


def _print_result(qid: str, res: HydeResult) -> None:
    how = "HyDE" if res.used_hyde else f"raw (fallback: {res.fallback_reason})"
    typer.echo(f"\n[{qid}] {res.query}  -> {how}, {res.timings.total_ms:.0f} ms")
    for h in res.hypotheses:
        typer.echo(f"   hypothesis [{h.perspective}]: {h.text[:160]}{'…' if len(h.text) > 160 else ''}")
    for rank, d in enumerate(res.results, start=1):
        typer.echo(_hit_line(rank, Hit(d.id, d.score, d.payload)) + f"   via {'+'.join(d.channels)}")
    if not res.results:
        typer.echo("   (no results)")


def _short(d: RetrievedDoc, width: int) -> str:
    p = d.payload
    label = payload_label(p)
    return f"{d.id} {label}"[:width]


def _print_side_by_side(qid: str, raw: HydeResult, hyde: HydeResult, width: int = 44) -> None:
    typer.echo(f"\n[{qid}] {raw.query}")
    for h in hyde.hypotheses:
        typer.echo(f"   hypothesis [{h.perspective}]: {h.text[:200]}{'…' if len(h.text) > 200 else ''}")
    status = "HyDE" if hyde.used_hyde else f"fallback: {hyde.fallback_reason}"
    typer.echo(f"   {'raw (' + format(raw.timings.total_ms, '.0f') + ' ms)':<{width}} | {status} ({hyde.timings.total_ms:.0f} ms)")
    for i in range(max(len(raw.results), len(hyde.results))):
        left = _short(raw.results[i], width) if i < len(raw.results) else ""
        right = _short(hyde.results[i], width) if i < len(hyde.results) else ""
        typer.echo(f"{i + 1:>2} {left:<{width}} | {right}")


def _plain_search(queries: list[tuple[str, str]], collection: str, top_k: int, mode: SearchMode, as_json: bool) -> None:
    with _retriever() as r:
        try:
            results = r.search_many(collection, [q for _, q in queries], top_k, mode)
        except HydeTutorError as exc:
            _fail(str(exc))
    for (qid, text), hits in zip(queries, results, strict=True):
        if as_json:
            line = {"query_id": qid, "query": text, "used_hyde": False, "fallback_reason": "disabled",
                    "results": [_hit_json(h) for h in hits]}
            typer.echo(_json_line(line))
        else:
            typer.echo(f"\n[{qid}] {text}  ({mode}, no HyDE)")
            for rank, hit in enumerate(hits, start=1):
                typer.echo(_hit_line(rank, hit))
            if not hits:
                typer.echo("   (no results)")


@dataclass(frozen=True, slots=True)
class PipelineArm:
    """An eval arm run through the HyDE pipeline: which channels it fuses."""

    use_hyde: bool
    include_raw: bool = True
    use_questions: bool = False


HYDE_ARMS: dict[str, PipelineArm] = {
    "hyde": PipelineArm(True),
    "hyde_only": PipelineArm(True, include_raw=False),
    "questions": PipelineArm(False, use_questions=True),
    "hyde+questions": PipelineArm(True, use_questions=True),
}


@app.command("eval")
def evaluate(
    collection: Annotated[str, typer.Option(help="Collection to evaluate; ingested from DIR/corpus.jsonl if missing.")],
    dataset: Annotated[Path, typer.Option(help="BEIR folder: corpus.jsonl, queries.jsonl, qrels/test.tsv.")],
    arms: Annotated[str, typer.Option(
        help="Comma-separated: raw, rrf, dbsf, dense, sparse, hyde, hyde_only, questions, hyde+questions.")] = "raw",
    k: Annotated[int, typer.Option("--k", min=10, max=100, help="Retrieval depth (metrics use @1/5/10).")] = 10,
    hypotheses: Annotated[int | None, typer.Option("--hypotheses", min=1, max=8)] = None,
    fusion: Annotated[str | None, typer.Option(help="rrf | max | mean | score for the hyde arms.")] = None,
    limit: Annotated[int | None, typer.Option(help="Evaluate N queries spread evenly over the set.")] = None,
    as_json: Annotated[bool, typer.Option("--json")] = False,
    plot: Annotated[Path | None, typer.Option(help="Write a PNG of nDCG@10 and recall@5 per arm and query group.")] = None,
) -> None:
    """Score arms on the same queries: recall@1/5/10, precision@5, MRR@10, nDCG@10, per query group."""
    _check_fusion(fusion)
    names = [a.strip() for a in arms.split(",") if a.strip()]
    unknown = [a for a in names if a not in RAW_ARMS and a not in HYDE_ARMS]
    if unknown or not names:
        _fail(f"Unknown arm(s) {unknown or arms!r}; choose from {', '.join([*RAW_ARMS, *HYDE_ARMS])}.")
    try:
        data = load_beir(dataset)
    except HydeTutorError as exc:
        _fail(str(exc))
    if limit and limit < len(data.queries):
        step = len(data.queries) / limit  # evenly spaced: every slice of the set is represented
        data = replace(data, queries=[data.queries[int(i * step)] for i in range(limit)])
    hr = _hyde()
    reasons: dict[str, dict[str, list[str]]] = {}
    try:
        r = hr.retriever
        if collection not in r.store.list_collections():
            if not data.corpus_path.is_file():
                _fail(f"Collection {collection!r} does not exist, and {dataset} has no corpus.jsonl to build it from. "
                      f"Ingest it first: hyde-tutor ingest --collection {collection} --file PATH "
                      f"(the bundled sets: data/grammar.jsonl, data/docs.jsonl).")
            report = ingest_file(data.corpus_path, collection, r.store, r.dense, r.sparse, progress=not as_json)
            typer.echo(report.summary(), err=True)
        arm_fns: dict[str, Any] = {}
        for a in names:
            if a in RAW_ARMS:
                arm_fns[a] = _raw_arm(r, collection, k, *RAW_ARMS[a])
            else:
                reasons[a] = {}
                arm_fns[a] = _hyde_arm(hr, collection, k, HYDE_ARMS[a], hypotheses, fusion, reasons[a])
        results = evaluate_arms(data, arm_fns)
    except HydeTutorError as exc:
        _fail(str(exc))
    finally:
        hr.close()
    fallbacks = {a: _count_reasons(per_query) for a, per_query in reasons.items()}
    if plot is not None:
        from .plots import plot_eval

        try:
            chart = plot_eval(results, plot, title=f"{dataset.name}: {len(data.queries)} queries",
                              group_counts=Counter(q.group for q in data.queries))
        except HydeTutorError as exc:
            _fail(str(exc))
        typer.echo(f"chart: {chart}", err=True)
    if as_json:
        out = report_json(results, len(data.queries))
        out["fallbacks"] = fallbacks
        typer.echo(json.dumps(out, ensure_ascii=False))
        return
    counts: dict[str, int] = {}
    for q in data.queries:
        counts[q.group] = counts.get(q.group, 0) + 1
    typer.echo(f"{dataset} -> collection {collection!r}, {len(data.queries)} queries")
    typer.echo(report_table(results, counts))
    for a, reasons in fallbacks.items():
        typer.echo(f"{a}: fallbacks {reasons or 'none'}")


def _raw_arm(r: Retriever, collection: str, k: int, mode: SearchMode, fusion: str | None):  # type: ignore[no-untyped-def]
    settings = r.settings if fusion is None else r.settings.model_copy(update={"fusion": fusion})

    def run(texts):  # type: ignore[no-untyped-def]
        return [[h.doc_id for h in hits] for hits in r.search_many(collection, texts, k, mode, settings=settings)]

    return run


def _hyde_arm(hr: HydeRetriever, collection: str, k: int, arm: PipelineArm, n: int | None, fusion: str | None,
              reasons: dict[str, list[str]]):  # type: ignore[no-untyped-def]
    """``reasons`` gets each query's fallback reasons, keyed by its text (so the warm-up query is counted once)."""
    loop = asyncio.new_event_loop()  # one loop for all batches: HTTP clients stay bound to it

    def run(texts):  # type: ignore[no-untyped-def]
        results = loop.run_until_complete(_search_all(
            hr, collection, list(texts), top_k=k, use_hyde=arm.use_hyde, n_hypotheses=n, fusion=fusion,
            include_raw=arm.include_raw, use_questions=arm.use_questions,
        ))
        for text, res in zip(texts, results, strict=True):
            reasons[text] = (["no_questions_index"] if arm.use_questions and not res.used_questions else []) + (
                [res.fallback_reason] if res.fallback_reason and arm.use_hyde else [])
        return [[d.id for d in res.results] for res in results]

    return run


def _count_reasons(per_query: dict[str, list[str]]) -> dict[str, int]:
    return dict(Counter(reason for found in per_query.values() for reason in found))


@app.command()
def bench(
    sizes: Annotated[str, typer.Option(help="Comma-separated point counts for the latency test.")] = "10000,100000",
    corpus: Annotated[Path, typer.Option(help="Corpus used for embedding / ingest throughput.")] = Path("data/grammar.jsonl"),
    llm_latency_ms: Annotated[float | None, typer.Option("--llm-latency-ms", min=0, help="Benchmark the HyDE pipeline with a simulated LLM of this latency instead.")] = None,
    queries: Annotated[int, typer.Option(help="Queries per setting in the pipeline benchmark.")] = 9,
    as_json: Annotated[bool, typer.Option("--json")] = False,
) -> None:
    """Throughput and latency benchmarks; with --llm-latency-ms, HyDE pipeline overhead vs ideal and sequential."""
    from .bench import format_rows, run_all
    from .embedders import make_dense_embedder
    from .sparse import Bm25Encoder

    settings = Settings()
    docs = [p.document for p in iter_jsonl_documents(corpus)] if corpus.is_file() else []
    docs = [d for d in docs if d is not None]
    if not docs:
        _fail(f"No documents in {corpus}.")
    if llm_latency_ms is not None:
        return _bench_pipeline(settings, docs, llm_latency_ms, queries, as_json)
    try:
        n_sizes = [int(s) for s in sizes.split(",") if s.strip()]
    except ValueError:
        _fail(f"--sizes must be integers, got {sizes!r}.")
    try:
        rows = run_all(docs, make_dense_embedder(settings), Bm25Encoder(), settings.retrieval, n_sizes,
                       settings.dense.batch_size, progress=not as_json)
    except HydeTutorError as exc:
        _fail(str(exc))
    if as_json:
        typer.echo(json.dumps({r.name: {"value": round(r.value, 3), "unit": r.unit} for r in rows}, ensure_ascii=False))
    else:
        typer.echo(format_rows(rows))


def _bench_pipeline(settings: Settings, docs: list[Document], latency_ms: float, n_queries: int, as_json: bool) -> None:
    from .bench import hyde_pipeline_bench
    from .hypotheses import HypothesisGenerator
    from .hypothesis_cache import NoCache
    from .simulated import simulated_model

    model = simulated_model(latency_ms)
    retriever = Retriever.from_settings(settings)
    hyde_settings = settings.hyde.model_copy(update={"cache": "off", "timeout_s": max(30.0, latency_ms / 100)})
    hr = HydeRetriever(
        retriever,
        lambda domain: HypothesisGenerator(model, "simulated", domain, cache=NoCache(), hyde=hyde_settings, llm=settings.llm),
        hyde_settings,
    )
    collection = "bench_pipeline"
    try:
        ingest_documents(docs, collection, retriever.store, retriever.dense, retriever.sparse, progress=not as_json)
        data = load_beir(Path("data/eval/grammar")) if Path("data/eval/grammar").is_dir() else None
        texts = [q.text for q in data.queries[:n_queries]] if data else ["Как сказать, что я хочу пойти?"] * n_queries
        out = hyde_pipeline_bench(hr, collection, texts, latency_ms)
    except HydeTutorError as exc:
        _fail(str(exc))
    finally:
        hr.close()
    if not as_json:
        typer.echo(f"simulated LLM latency {latency_ms:.0f} ms; ideal = one LLM call + embed + search = {out['ideal_ms']:.0f} ms")
        for n in (1, 3, 8):
            typer.echo(f"  concurrent N={n}: p50 {out[f'n{n}_p50_ms']:.0f} ms = {out[f'n{n}_over_ideal']:.2f}x ideal")
        typer.echo(f"  sequential N=3: p50 {out['sequential_n3_p50_ms']:.0f} ms = {out['sequential_n3_over_ideal']:.2f}x ideal")
    typer.echo(json.dumps({k: round(v, 3) for k, v in out.items()}))


@app.command("ab-report")
def ab_report(
    file: Annotated[Path | None, typer.Option(help="Metrics JSONL (default: HYDE_DATA_DIR/metrics.jsonl).")] = None,
    plot: Annotated[Path | None, typer.Option(help="Write a PNG chart here.")] = None,
    as_json: Annotated[bool, typer.Option("--json")] = False,
) -> None:
    """Per-arm latency / fallback table and hyde-minus-raw differences with bootstrap 95% CIs."""
    from .abreport import arm_rows, differences, format_report
    from .abreport import plot as draw
    from .monitor import load_records

    path = file or Settings().data_dir / "metrics.jsonl"
    if not path.is_file():
        _fail(f"No metrics file at {path}: run the chat or your agent with a Monitor(jsonl path) first.")
    loaded = load_records(path)
    records = loaded.records
    for reason in loaded.skipped[:5]:
        typer.echo(f"warning: {path}: {reason} (skipped)", err=True)
    if not records:
        _fail(f"{path} holds no records ({len(loaded.skipped)} lines skipped).")
    rows, diffs = arm_rows(records), differences(records)
    received, received_diffs = arm_rows(records, "received"), differences(records, "received")
    if as_json:
        typer.echo(json.dumps({"arms": [asdict(r) for r in rows], "differences": [asdict(d) for d in diffs],
                               "by_treatment_received": {"arms": [asdict(r) for r in received],
                                                         "differences": [asdict(d) for d in received_diffs]},
                               "n_records": len(records), "skipped_lines": len(loaded.skipped)}, ensure_ascii=False))
    else:
        typer.echo(f"{path}: {len(records)} retrievals" + (f", {len(loaded.skipped)} lines skipped" if loaded.skipped else ""))
        typer.echo(format_report(rows, diffs, "by assigned arm (intention to treat)"))
        typer.echo("")
        typer.echo(format_report(received, received_diffs, "by treatment received (hyde = HyDE attempted)"))
    if plot is not None:
        typer.echo(f"chart: {draw(rows, plot)}", err=as_json)


@app.command()
def chat(
    subject_id: Annotated[str | None, typer.Option("--subject-id", help="User/session id for A/B assignment.")] = None,
    mode: Annotated[str, typer.Option(
        help="auto | tools | retrieve-first. auto: retrieve-first with the embedded model, tools otherwise.")] = "auto",
) -> None:
    """Chat with the example tutor (shows searches and whether HyDE was used).

    Reads questions from standard input when it is not a terminal, one per line, prints each answer
    and exits 0 at the end: printf 'вопрос\n' | hyde-tutor chat
    """
    from .chat import CHAT_MODES, build_tutor_agent, chat_loop, default_chat_mode
    from .experiment import ReloadableExperiment
    from .llm import describe_backend, make_llm
    from .monitor import Monitor, configure_logfire
    from .toolset import TutorDeps

    if mode not in ("auto", *CHAT_MODES):
        _fail(f"--mode must be auto, tools or retrieve-first, not {mode!r}.")
    settings = Settings()
    token = settings.monitor.logfire_token
    configure_logfire(token.get_secret_value() if token else None)
    interactive = sys.stdin.isatty()
    try:
        llm = make_llm(settings)
    except HydeTutorError as exc:
        _fail(str(exc))
    hr = _hyde(settings)
    monitor = Monitor(settings.data_dir / "metrics.jsonl" if settings.monitor.jsonl else None, settings.monitor.window)
    deps = TutorDeps(hr, ReloadableExperiment(), monitor, subject_id)
    chosen = default_chat_mode(llm) if mode == "auto" else mode
    agent = build_tutor_agent(llm, mode=chosen)  # type: ignore[arg-type]
    hyde_default = "on" if hr.policy.enabled else "off (the embedded model: HyDE is slow and does not help it)"
    typer.echo(f"hyde-tutor chat — model {llm.name}, mode {chosen}, HyDE by default {hyde_default}, "
               f"subject {subject_id or '(none)'}" + ("; /exit to quit" if interactive else ""), err=not interactive)

    def read() -> str | None:
        if not interactive:
            line = sys.stdin.readline()
            if not line:
                return None
            if line.strip():
                typer.echo(f"вы> {line.strip()}")  # a transcript shows the question above its answer
            return line
        try:
            return input("вы> ")
        except EOFError:
            return None

    try:
        chat_loop(agent, deps, read, typer.echo, show_time=True)
    finally:
        monitor.flush()
        hr.close()
        llm.close()


@app.command()
def record(
    collection: Annotated[str, typer.Option(help="Whose domain writes the hypotheses (HYDE_HYDE__DOMAINS).")] = "grammar",
    queries: Annotated[Path | None, typer.Option(help="BEIR queries.jsonl or one query per line.")] = None,
    hypotheses: Annotated[int, typer.Option("--hypotheses", min=1, max=8, help="Perspectives per query.")] = 4,
    questions: Annotated[int | None, typer.Option(
        "--questions", min=1, max=10, help="Record write-time questions (K per document) for --file instead.")] = None,
    file: Annotated[Path | None, typer.Option(help="With --questions: the corpus JSONL.")] = None,
    out: Annotated[Path | None, typer.Option(help="JSONL to append to (default data/recordings/<collection>.jsonl).")] = None,
    model_label: Annotated[str | None, typer.Option(
        "--model-label", help="The model field of each record (default: the backend's name).")] = None,
    concurrency: Annotated[int, typer.Option(min=1, max=64, help="Concurrent LLM calls.")] = 4,
) -> None:
    """Record the configured LLM's generations once, to replay offline (HYDE_LLM__PROVIDER=replay).

    Resumable: a re-run skips every (query, perspective, prompt files) already in --out.
    """
    from .hypotheses import HypothesisGenerator
    from .llm import describe_backend, make_llm
    from .recorder import RecordingWriter, record_hypotheses, record_questions

    if (questions is None) == (queries is None):
        _fail("Give --queries FILE (hypotheses) or --questions K --file CORPUS (write-time questions).")
    if questions is not None and file is None:
        _fail("--questions K needs --file CORPUS (the JSONL whose documents get questions).")
    settings = Settings()
    if settings.llm.provider == "replay":
        _fail("Recording from the replay provider would copy recordings; set a live LLM (HYDE_LLM__PROVIDER).")
    target = out or Path("data/recordings") / f"{collection}{'.questions' if questions else ''}.jsonl"
    try:
        writer = RecordingWriter(target)
        typer.echo(f"LLM: {describe_backend(settings)}", err=True)
        backend = make_llm(settings)
    except HydeTutorError as exc:
        _fail(str(exc))
    label = model_label or backend.name
    try:
        if questions is not None:
            from .questions import QuestionGenerator

            documents, bad = read_documents(file)  # type: ignore[arg-type]
            gen = QuestionGenerator.for_backend(backend, settings)
            report = asyncio.run(record_questions(gen, documents, writer, k=questions, model=label,
                                                  timeout_s=settings.questions.timeout_s, concurrency=concurrency))
        else:
            texts = [validate_query(q, settings.retrieval.max_query_chars) for _, q in _read_queries(queries)]  # type: ignore[arg-type]
            domain = settings.hyde.domains.get(collection, settings.hyde.default_domain)
            hgen = HypothesisGenerator.for_backend(backend, domain, hyde=settings.hyde, llm=settings.llm)
            report = asyncio.run(record_hypotheses(hgen, texts, writer, n=hypotheses, model=label,
                                                   timeout_s=settings.hyde.timeout_s, concurrency=concurrency))
    except HydeTutorError as exc:
        _fail(str(exc))
    finally:
        backend.close()
    typer.echo(report.summary())
    if report.failed:
        raise typer.Exit(1)


@app.command()
def demo(
    live: Annotated[bool, typer.Option("--live/--no-live", help="Also run one live HyDE search with the configured LLM.")] = True,
    eval_dir: Annotated[Path, typer.Option("--eval-dir", help="BEIR sets: grammar, grammar_holdout, docs.")] = Path("data/eval"),
) -> None:
    """Show what HyDE does: recorded capable-model HyDE vs plain search, then one live search."""
    from .demo import run_demo

    try:
        run_demo(Settings(), typer.echo, eval_dir=eval_dir, live=live)
    except HydeTutorError as exc:
        _fail(str(exc))


@app.command("inspect")
def inspect_command(
    collection: Annotated[str, typer.Option(help="Collection to describe.")],
) -> None:
    """Show a collection's vectors, sizes, modifiers, point count and a sample payload, and whether
    hyde-tutor can search it as configured (if not, the settings to add). Exit 1 when it cannot."""
    from .inspection import inspect_report

    with _retriever() as r:
        report, ok = inspect_report(r, collection)
    typer.echo(report)
    if not ok:
        raise typer.Exit(1)


@app.command("export-beir")
def export_beir(
    file: Annotated[Path, typer.Option(help="Project JSONL (grammar or docs).")],
    out: Annotated[Path, typer.Option(help="Where to write the BEIR corpus.jsonl.")],
) -> None:
    """Write a BEIR corpus.jsonl whose title + text equals what ingest embeds."""
    from .documents import to_beir_record

    lines = []
    for parsed in iter_jsonl_documents(file):
        if parsed.error:
            _fail(f"{file}: {parsed.error}")
        assert parsed.document is not None
        lines.append(json.dumps(to_beir_record(parsed.document), ensure_ascii=False))
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text("\n".join(lines) + "\n", encoding="utf-8")
    typer.echo(f"wrote {len(lines)} records to {out}")


def main() -> None:  # pragma: no cover
    app()


if __name__ == "__main__":  # pragma: no cover
    sys.exit(app())
