"""Commands that measure: eval (IR metrics per arm), bench (throughput, latency, pipeline overhead), ab-report."""

from __future__ import annotations

import json
from collections import Counter
from contextlib import ExitStack
from dataclasses import asdict, replace
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any

import typer

from ..config import Settings
from ..corpus.documents import iter_jsonl_documents
from ..errors import HydeTutorError
from .app import app, check_fusion, fail, open_hyde


if TYPE_CHECKING:
    from ..evaluation.beir import BeirDataset


@app.command("eval")
def evaluate(
    collection: Annotated[str, typer.Option(help="Collection to evaluate; ingested from DIR/corpus.jsonl if missing.")],
    dataset: Annotated[Path, typer.Option(help="BEIR folder: corpus.jsonl, queries.jsonl, qrels/test.tsv.")],
    arms: Annotated[str, typer.Option(
        help="Comma-separated: raw, rrf, dbsf, dense, sparse, context, condensed, hyde, hyde_only, questions, "
             "hyde+questions. For queries with a history (follow-ups): raw = the last message alone, context = the "
             "previous question + the last message, condensed = the LLM's standalone rewrite of the follow-up; "
             "hyde arms get the conversation; fused = the last message alone and with the previous question, "
             "fused; reply = fused + the message after the tutor's last reply; conversation = the chat's default "
             "(reply for a message that reads as a follow-up, the message alone otherwise).")] = "raw",
    k: Annotated[int, typer.Option("--k", min=10, max=100, help="Retrieval depth (metrics use @1/5/10).")] = 10,
    hypotheses: Annotated[int | None, typer.Option("--hypotheses", min=1, max=8)] = None,
    fusion: Annotated[str | None, typer.Option(help="rrf | max | mean | score for the hyde arms.")] = None,
    limit: Annotated[int | None, typer.Option(help="Evaluate N queries spread evenly over the set.")] = None,
    as_json: Annotated[bool, typer.Option("--json")] = False,
    plot: Annotated[Path | None, typer.Option(help="Write a PNG of nDCG@10 and recall@5 per arm and query group.")] = None,
    by: Annotated[str | None, typer.Option(help="Group the queries by this metadata field (e.g. kind: followup | "
                                                "new); unset: named/unnamed.")] = None,
    half: Annotated[str | None, typer.Option(help="Only this half of the queries: tune | heldout (by a hash of the "
                                                  "query id; hyde_tutor.evaluation.splits).")] = None,
) -> None:
    """Score arms on the same queries: recall@1/5/10, precision@5, MRR@10, nDCG@10, per query group."""
    from ..evaluation.arms import (ARM_NAMES, CONTEXT_ARMS, CONVERSATION_ARMS, HYDE_ARMS, CondensedArm, ContextArm,
                                   ConversationArm, HydeArm, RAW_ARMS, raw_arm)
    from ..evaluation.beir import evaluate_arms, report_json, report_table
    from ..hyde.domains import DOMAINS
    check_fusion(fusion)
    names = [a.strip() for a in arms.split(",") if a.strip()]
    unknown = [a for a in names if a not in ARM_NAMES]
    if unknown or not names:
        fail(f"Unknown arm(s) {unknown or arms!r}; choose from {', '.join(ARM_NAMES)}.")
    data = _load(dataset, limit, by, half)
    hr = open_hyde()
    hyde_arms: dict[str, HydeArm] = {}
    try:
        with ExitStack() as stack:
            _ensure_collection(hr.retriever, collection, data, dataset, as_json)
            runs: dict[str, Any] = {}
            for a in names:
                if a in RAW_ARMS:
                    runs[a] = raw_arm(hr.retriever, collection, k, *RAW_ARMS[a])
                elif a == "condensed":
                    runs[a] = condensed = stack.enter_context(CondensedArm(
                        hr.retriever, collection, k, _condenser(stack)))
                    hyde_arms[a] = condensed  # type: ignore[assignment]  # its fallbacks are reported too
                elif a in CONTEXT_ARMS:
                    runs[a] = ContextArm(hr.retriever, collection, k)
                elif a in CONVERSATION_ARMS:
                    runs[a] = ConversationArm(hr.retriever, collection, k, CONVERSATION_ARMS[a],
                                              name_field=DOMAINS[hr.domain_of(collection)].name_field)
                else:
                    runs[a] = hyde_arms[a] = stack.enter_context(
                        HydeArm(hr, collection, k, HYDE_ARMS[a], hypotheses, fusion))  # type: ignore[arg-type]
            results = evaluate_arms(data, runs)
    except HydeTutorError as exc:
        fail(str(exc))
    finally:
        hr.close()
    fallbacks = {a: arm.fallbacks() for a, arm in hyde_arms.items()}
    zero = {"llm_calls": 0.0, "tokens_in": 0.0, "tokens_out": 0.0, "skipped": 0.0, "counted": "none"}
    costs = {a: hyde_arms[a].cost() if a in hyde_arms else zero for a in names}
    if plot is not None:
        _plot(results, plot, dataset, data)
    if as_json:
        typer.echo(json.dumps({**report_json(results, len(data.queries)), "fallbacks": fallbacks, "cost": costs},
                              ensure_ascii=False))
        return
    typer.echo(f"{dataset} -> collection {collection!r}, {len(data.queries)} queries")
    typer.echo(report_table(results, dict(Counter(q.group for q in data.queries))))
    typer.echo("cost per search: " + "; ".join(
        f"{a} {c['llm_calls']:.2f} LLM calls, {c['tokens_in']:.0f} in + {c['tokens_out']:.0f} out tokens"
        + (f", {100 * c['skipped']:.0f} % skipped by the cascade" if c["skipped"] else "")
        + (f" ({c['counted']})" if c["counted"] != "none" else "") for a, c in costs.items()))
    for a, reasons in fallbacks.items():
        typer.echo(f"{a}: fallbacks {reasons or 'none'}")


def _condenser(stack: ExitStack) -> Any:
    """The ``condensed`` arm's rewriter, on the configured LLM backend (closed with the stack)."""
    from ..config import Settings
    from ..hyde.conversation import Condenser
    from ..hyde.requests import render_recording
    from ..llm.backends import make_llm

    settings = Settings()
    backend = make_llm(settings, render=render_recording)
    stack.callback(backend.close)
    typer.echo(f"condensed: follow-ups rewritten by {backend.name}", err=True)
    return Condenser.for_backend(backend, settings.llm)


def _load(dataset: Path, limit: int | None, by: str | None = None, half: str | None = None) -> BeirDataset:
    from ..evaluation.beir import load_beir
    from ..evaluation.splits import HALVES, in_half
    if half is not None and half not in (*HALVES, "all"):
        fail(f"Unknown half {half!r}; choose tune, heldout or all.")
    try:
        data = load_beir(dataset, group_by=by)
    except HydeTutorError as exc:
        fail(str(exc))
    data = replace(data, queries=[q for q in data.queries if in_half(q.id, half)])
    if not data.queries:
        fail(f"No query of {dataset} is in the {half} half.")
    if limit and limit < len(data.queries):
        step = len(data.queries) / limit  # evenly spaced: every slice of the set is represented
        data = replace(data, queries=[data.queries[int(i * step)] for i in range(limit)])
    return data


def _ensure_collection(r: Any, collection: str, data: BeirDataset, dataset: Path, quiet: bool) -> None:
    from ..corpus.ingest import IngestRequest, ingest_file
    if collection in r.store.list_collections():
        return
    if not data.corpus_path.is_file():
        fail(f"Collection {collection!r} does not exist, and {dataset} has no corpus.jsonl to build it from. "
             f"Ingest it first: hyde-tutor ingest --collection {collection} --file PATH "
             f"(the bundled sets: data/grammar.jsonl, data/docs.jsonl).")
    report = ingest_file(data.corpus_path, IngestRequest(collection=collection, progress=not quiet), r.store, r.dense,
                         r.sparse)
    typer.echo(report.summary(), err=True)


def _plot(results: Any, plot: Path, dataset: Path, data: BeirDataset) -> None:
    from ..evaluation.plots import plot_eval

    try:
        chart = plot_eval(results, plot, title=f"{dataset.name}: {len(data.queries)} queries",
                          group_counts=Counter(q.group for q in data.queries))
    except HydeTutorError as exc:
        fail(str(exc))
    typer.echo(f"chart: {chart}", err=True)


@app.command()
def bench(
    sizes: Annotated[str, typer.Option(help="Comma-separated point counts for the latency test.")] = "10000,100000",
    corpus: Annotated[Path, typer.Option(help="Corpus used for embedding / ingest throughput.")] = Path("data/grammar.jsonl"),
    llm_latency_ms: Annotated[float | None, typer.Option("--llm-latency-ms", min=0, help="Benchmark the HyDE pipeline with a simulated LLM of this latency instead.")] = None,
    queries: Annotated[int, typer.Option(help="Queries per setting in the pipeline benchmark.")] = 9,
    load: Annotated[bool, typer.Option("--load", help="The load drill: concurrent tool calls against the configured "
                                                      "embedder and store, a simulated flaky LLM.")] = False,
    calls: Annotated[int, typer.Option("--calls", min=1, help="--load: tool calls in all.")] = 400,
    concurrency: Annotated[int, typer.Option("--concurrency", min=1, help="--load: concurrent tasks.")] = 50,
    as_json: Annotated[bool, typer.Option("--json")] = False,
) -> None:
    """Throughput and latency benchmarks; with --llm-latency-ms, HyDE pipeline overhead vs ideal and sequential;
    with --load, the load drill (calls/s, p50/p95, max event-loop stall, failed calls, records; last line JSON).

    Everything is built in a temporary folder: your data dir is never written."""
    from ..evaluation.bench import format_rows, run_all
    from ..retrieval.embedders import make_dense_embedder
    from ..retrieval.sparse import Bm25Encoder

    settings = Settings()
    if load:
        return _bench_load(settings, calls, concurrency, 2.0 if llm_latency_ms is None else llm_latency_ms, as_json)
    docs = [p.document for p in iter_jsonl_documents(corpus) if p.document is not None] if corpus.is_file() else []
    if not docs:
        fail(f"No documents in {corpus}.")
    if llm_latency_ms is not None:
        return _bench_pipeline(settings, docs, llm_latency_ms, queries, as_json)
    try:
        n_sizes = [int(s) for s in sizes.split(",") if s.strip()]
    except ValueError:
        fail(f"--sizes must be integers, got {sizes!r}.")
    try:
        rows = run_all(docs, make_dense_embedder(settings), Bm25Encoder(), settings.retrieval, n_sizes,
                       settings.dense.batch_size, progress=not as_json)
    except HydeTutorError as exc:
        fail(str(exc))
    if as_json:
        typer.echo(json.dumps({r.name: {"value": round(r.value, 3), "unit": r.unit} for r in rows}, ensure_ascii=False))
    else:
        typer.echo(format_rows(rows))


def _bench_load(settings: Settings, calls: int, concurrency: int, latency_ms: float, as_json: bool) -> None:
    from ..evaluation.load import SimulatedLLM, load_drill

    say = (lambda m: typer.echo(m, err=True))
    try:
        report = load_drill(settings, calls=calls, concurrency=concurrency, llm=SimulatedLLM(latency_ms=latency_ms),
                            progress=say)
    except HydeTutorError as exc:
        fail(str(exc))
    if not as_json:
        typer.echo(f"{report.calls} calls from {report.concurrency} tasks on {report.embedder} + {report.store}: "
                   f"{report.calls_per_s:.1f} calls/s, p50 {report.p50_ms:.0f} ms, p95 {report.p95_ms:.0f} ms, "
                   f"max event-loop stall {report.max_loop_stall_ms:.0f} ms, {report.failed_calls} failed calls, "
                   f"{report.records} records; fallbacks {report.fallbacks}")
    typer.echo(report.to_json())


def _bench_pipeline(settings: Settings, docs: list[Any], latency_ms: float, n_queries: int, as_json: bool) -> None:
    from ..evaluation.beir import load_beir
    from ..evaluation.pipeline_bench import run_pipeline_bench

    try:
        data = load_beir(Path("data/eval/grammar")) if Path("data/eval/grammar").is_dir() else None
        texts = [q.text for q in data.queries[:n_queries]] if data else ["Как сказать, что я хочу пойти?"] * n_queries
        out = run_pipeline_bench(settings, docs, latency_ms, texts, progress=not as_json)
    except HydeTutorError as exc:
        fail(str(exc))
    if not as_json:
        typer.echo(f"simulated LLM latency {latency_ms:.0f} ms; ideal = one LLM call + embed + search = {out['ideal_ms']:.0f} ms")
        for n in (1, 3, 8):
            typer.echo(f"  concurrent N={n}: p50 {out[f'n{n}_p50_ms']:.0f} ms = {out[f'n{n}_over_ideal']:.2f}x ideal")
        typer.echo(f"  sequential N=3: p50 {out['sequential_n3_p50_ms']:.0f} ms = {out['sequential_n3_over_ideal']:.2f}x ideal")
    typer.echo(json.dumps({k: round(v, 3) for k, v in out.items()}))


def _served_database(settings: Settings) -> str | None:
    """The served tutor's database URL when one is configured or its SQLite file exists."""
    from ..experiment.sqlstore import DB_FILE, database_url

    return database_url(settings) if settings.server.database_url or (settings.data_dir / DB_FILE).is_file() else None


@app.command("ab-report")
def ab_report(
    file: Annotated[Path | None, typer.Option(help="Metrics JSONL (default: HYDE_DATA_DIR/metrics.jsonl).")] = None,
    db: Annotated[str | None, typer.Option(
        "--db", help="The served tutor's database URL (sqlite:///… or postgresql://…): the outcome report "
                     "(ratings, judged relevance, grounded, rephrase, SRM, power) instead of the retrieval view.")] = None,
    experiment: Annotated[str | None, typer.Option(help="With --db: the experiment (default: the latest one).")] = None,
    mde: Annotated[float, typer.Option(min=0.001, max=0.999,
                                       help="With --db: the difference to power for (0.05 = 5 points).")] = 0.05,
    plot: Annotated[Path | None, typer.Option(help="Write a PNG chart here (with the served database: outcomes "
                                                   "per arm and turn latency of the latest period).")] = None,
    as_json: Annotated[bool, typer.Option("--json")] = False,
) -> None:
    """Does HyDE help the learners? With --db: outcomes per arm and period, with clustered 95% intervals, an SRM
    check and power. Without --db and --file: the served tutor's database when there is one
    (HYDE_SERVER__DATABASE_URL, or HYDE_DATA_DIR/served.db), else the retrieval view of the metrics JSONL
    (latency, fallbacks, HyDE cost per arm), which --file always gives. The SRM check tests the split the
    configured arms make (HYDE_EXPERIMENT__ARMS)."""
    settings = Settings()
    if db is None and file is None:
        db = _served_database(settings)  # a served tutor's database, where there is one: the outcome report
    if db is not None:
        if file is not None:
            fail("--db reads the served tutor's event log; --file is for the metrics JSONL. Pass one.")
        from ..experiment.assignment import experiment_from_settings

        try:
            arms = experiment_from_settings(settings).arms  # the split the server assigned by
        except ValueError as exc:
            fail(f"HYDE_EXPERIMENT__ARMS: {exc}")
        _outcome_report(db, experiment, mde, as_json, arms, plot)
        return
    from ..experiment.abreport import arm_rows, differences, format_report
    from ..experiment.abreport import plot as draw
    from ..plugin.monitor import load_records

    path = file or settings.data_dir / "metrics.jsonl"
    if not path.is_file():
        fail(f"No metrics file at {path}: run the chat or your agent with a Monitor(jsonl path) first.")
    loaded = load_records(path)
    records = loaded.records
    for reason in loaded.skipped[:5]:
        typer.echo(f"warning: {path}: {reason} (skipped)", err=True)
    if not records:
        fail(f"{path} holds no records ({len(loaded.skipped)} lines skipped).")
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
        typer.echo(format_report(received, received_diffs, "by treatment received (hyde = HyDE shaped the results; "
                                                           "an attempt that fell back is raw)"))
    if plot is not None:
        typer.echo(f"chart: {draw(rows, plot)}", err=as_json)


def _outcome_report(url: str, experiment: str | None, mde: float, as_json: bool, arms: tuple[str, ...],
                    plot: Path | None = None) -> None:
    from ..experiment.abreport import format_outcome_report, outcome_report

    try:
        from ..experiment.sqlstore import open_event_log  # type: ignore[import-not-found, unused-ignore]
    except ImportError as exc:
        fail(f"--db needs the served tutor's SQL event log (hyde_tutor.experiment.sqlstore), which this install lacks "
             f"({exc}). Update hyde-tutor, or report from a metrics JSONL with --file.")
    from ..config import redact_url

    try:
        log = open_event_log(url)
        try:
            report = outcome_report(log, experiment, mde=mde, arms=arms)
        finally:
            close = getattr(log, "close", None)
            if callable(close):
                close()
    except Exception as exc:  # noqa: BLE001 - a bad URL, an unreachable server, a database of another program
        fail(f"Cannot read the served tutor's event log at {redact_url(url)}: {type(exc).__name__}: {exc}. Check "
             "the URL (sqlite:///path/served.db or postgresql://user:password@host/db) and that the server wrote it.")
    if not report["turns"]:
        fail(f"No served turns in {url}" + (f" for experiment {experiment!r}" if experiment else "")
             + ": serve the tutor (hyde-tutor serve) and let learners ask first.")
    typer.echo(json.dumps(report, ensure_ascii=False) if as_json else format_outcome_report(report))
    if plot is not None:
        from ..evaluation.plots import plot_outcomes

        try:
            typer.echo(f"chart: {plot_outcomes(report, plot)}", err=as_json)
        except HydeTutorError as exc:
            fail(str(exc))
