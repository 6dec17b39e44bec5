"""The ``hyde-tutor`` command line: ingest, search, eval, bench, export-beir."""

from __future__ import annotations

import json
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Annotated, Any

import typer

from .config import Settings
from .documents import iter_jsonl_documents
from .errors import HydeTutorError
from .evaluation import evaluate_arms, load_beir, report_json, report_table
from .ingest import ingest_file
from .retriever import Retriever, SearchMode
from .store import Hit

app = typer.Typer(add_completion=False, no_args_is_help=True, help="HyDE retrieval for Korean-tutor agents.")

# arm -> (channels, fusion override). "raw" uses the configured fusion.
RAW_ARMS: dict[str, tuple[SearchMode, str | None]] = {
    "raw": ("hybrid", None),
    "rrf": ("hybrid", "rrf"),
    "dbsf": ("hybrid", "dbsf"),
    "dense": ("dense", None),
    "sparse": ("sparse", None),
}


def _fail(message: str, code: int = 2) -> None:
    typer.secho(f"error: {message}", err=True, fg=typer.colors.RED)
    raise typer.Exit(code)


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
) -> None:
    """Ingest a JSONL file. Re-running writes only new or changed documents."""
    with _retriever() as r:
        report = ingest_file(file, collection, r.store, r.dense, r.sparse, recreate=recreate, batch_size=Settings().index.batch_size)
    typer.echo(report.summary())
    if not report.ok:
        raise typer.Exit(1)


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


def _hit_json(hit: Hit) -> dict[str, Any]:
    return {"id": hit.doc_id, "score": round(hit.score, 6), "payload": hit.payload}


def _hit_line(rank: int, hit: Hit) -> str:
    p = hit.payload
    title = f"{p.get('pattern', '')} — {p.get('name_ru', '')}" if "pattern" in p else f"{p.get('topic', '')}: {p.get('subtopic', p.get('title', ''))}"
    return f"{rank:>2}. {hit.doc_id:<10} {hit.score:.4f}  {title}"


@app.command()
def search(
    query: Annotated[str | None, typer.Argument(help="The learner's question.")] = None,
    collection: Annotated[str, typer.Option(help="Collection to search (bundled: grammar, docs).")] = "grammar",
    top_k: Annotated[int, typer.Option("--top-k", min=1, max=100)] = 5,
    no_hyde: Annotated[bool, typer.Option("--no-hyde", help="Plain retrieval (the only mode until the HyDE engine lands).")] = False,
    mode: Annotated[str, typer.Option(help="hybrid | dense | sparse")] = "hybrid",
    queries_file: Annotated[Path | None, typer.Option("--queries-file", help="BEIR queries.jsonl or one query per line.")] = None,
    as_json: Annotated[bool, typer.Option("--json", help="One JSON object per query per line.")] = False,
) -> None:
    """Search a collection and print the results (or JSON lines)."""
    if (query is None) == (queries_file is None):
        _fail("Give either a QUERY or --queries-file.")
    if mode not in ("hybrid", "dense", "sparse"):
        _fail(f"--mode must be hybrid, dense or sparse, not {mode!r}.")
    queries = _read_queries(queries_file) if queries_file else [("q1", query or "")]
    with _retriever() as r:
        try:
            results = r.search_many(collection, [q for _, q in queries], top_k, mode)  # type: ignore[arg-type]
        except HydeTutorError as exc:
            _fail(str(exc))
    for (qid, text), hits in zip(queries, results, strict=True):
        if as_json:
            line = {"query_id": qid, "query": text, "used_hyde": False, "fallback_reason": "disabled", "results": [_hit_json(h) for h in hits]}
            typer.echo(json.dumps(line, ensure_ascii=False))
        else:
            typer.echo(f"\n[{qid}] {text}  ({mode}, no HyDE)")
            for rank, hit in enumerate(hits, start=1):
                typer.echo(_hit_line(rank, hit))
            if not hits:
                typer.echo("   (no results)")


@app.command("eval")
def evaluate(
    collection: Annotated[str, typer.Option(help="Collection to evaluate; ingested from DIR/corpus.jsonl if missing.")],
    dataset: Annotated[Path, typer.Option(help="BEIR folder: corpus.jsonl, queries.jsonl, qrels/test.tsv.")],
    arms: Annotated[str, typer.Option(help="Comma-separated arms: raw (hybrid, configured fusion), rrf, dbsf, dense, sparse.")] = "raw",
    k: Annotated[int, typer.Option("--k", min=10, max=100, help="Retrieval depth (metrics use @1/5/10).")] = 10,
    as_json: Annotated[bool, typer.Option("--json")] = False,
) -> None:
    """Score retrieval arms with recall@1/5/10, precision@5, MRR@10 and nDCG@10."""
    names = [a.strip() for a in arms.split(",") if a.strip()]
    unknown = [a for a in names if a not in RAW_ARMS]
    if unknown or not names:
        _fail(f"Unknown arm(s) {unknown or arms!r}; choose from {', '.join(RAW_ARMS)}.")
    try:
        data = load_beir(dataset)
    except HydeTutorError as exc:
        _fail(str(exc))
    with _retriever() as r:
        if collection not in r.store.list_collections():
            report = ingest_file(data.corpus_path, collection, r.store, r.dense, r.sparse, progress=not as_json)
            typer.echo(report.summary(), err=True)
        try:
            arm_fns = {a: _raw_arm(r, collection, k, *RAW_ARMS[a]) for a in names}
            results = evaluate_arms(data, arm_fns)
        except HydeTutorError as exc:
            _fail(str(exc))
    if as_json:
        typer.echo(json.dumps(report_json(results, len(data.queries)), ensure_ascii=False))
        return
    counts: dict[str, int] = {}
    for q in data.queries:
        counts[q.group] = counts.get(q.group, 0) + 1
    typer.echo(f"{dataset} -> collection {collection!r}, {len(data.queries)} queries")
    typer.echo(report_table(results, counts))


def _raw_arm(r: Retriever, collection: str, k: int, mode: SearchMode, fusion: str | None):  # type: ignore[no-untyped-def]
    settings = r.settings if fusion is None else r.settings.model_copy(update={"fusion": fusion})

    def run(texts):  # type: ignore[no-untyped-def]
        return [[h.doc_id for h in hits] for hits in r.search_many(collection, texts, k, mode, settings=settings)]

    return run


@app.command()
def bench(
    sizes: Annotated[str, typer.Option(help="Comma-separated point counts for the latency test.")] = "10000,100000",
    corpus: Annotated[Path, typer.Option(help="Corpus used for embedding / ingest throughput.")] = Path("data/grammar.jsonl"),
    as_json: Annotated[bool, typer.Option("--json")] = False,
) -> None:
    """Embedding and ingest throughput; hybrid query latency p50/p95 at each size."""
    from .bench import format_rows, run_all
    from .embedders import make_dense_embedder
    from .sparse import Bm25Encoder

    settings = Settings()
    docs = [p.document for p in iter_jsonl_documents(corpus) if p.document is not None]
    if not docs:
        _fail(f"No documents in {corpus}.")
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
