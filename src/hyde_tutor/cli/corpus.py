"""Commands that build and describe collections: ingest, inspect, export-beir, record."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path
from typing import TYPE_CHECKING, Annotated

import typer

from ..config import Settings
from ..corpus.documents import iter_jsonl_documents, to_beir_record
from ..errors import HydeTutorError
from .app import app, fail, open_retriever, read_queries


if TYPE_CHECKING:
    from ..corpus.ingest import IngestRequest
    from ..retrieval.retriever import Retriever


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
    from ..corpus.ingest import IngestRequest, ingest_file
    from ..hyde.question_index import sync_questions
    settings = Settings()
    request = IngestRequest(collection=collection, recreate=recreate, batch_size=settings.index.batch_size, sync=sync,
                            on_sync=sync_questions, questions=questions or 0, regenerate=regenerate)
    with open_retriever() as r:
        report = ingest_file(file, request, r.store, r.dense, r.sparse)
        typer.echo(report.summary())
        if request.questions:
            typer.echo(_ingest_questions(settings, r, file, request))
    if not report.ok:
        raise typer.Exit(1)


def _ingest_questions(settings: Settings, r: Retriever, file: Path, request: IngestRequest) -> str:
    from ..corpus.ingest import read_documents
    from ..hyde.question_index import ingest_questions
    from ..hyde.questions import question_generator_from_settings

    documents, _ = read_documents(file)
    generator, close = question_generator_from_settings(settings)
    try:
        report = ingest_questions(documents, request, r.store, r.dense, r.sparse, generator)
    finally:
        close()
    return report.summary()


@app.command("inspect")
def inspect_command(
    collection: Annotated[str, typer.Option(help="Collection to describe.")],
) -> None:
    """Show a collection's vectors, sizes, modifiers, point count and a sample payload, and whether
    hyde-tutor can search it as configured (if not, the settings to add). Exit 1 when it cannot."""
    from ..corpus.inspection import inspect_report

    with open_retriever() as r:
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
    lines = []
    for parsed in iter_jsonl_documents(file):
        if parsed.error:
            fail(f"{file}: {parsed.error}")
        assert parsed.document is not None
        lines.append(json.dumps(to_beir_record(parsed.document), ensure_ascii=False))
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text("\n".join(lines) + "\n", encoding="utf-8")
    typer.echo(f"wrote {len(lines)} records to {out}")


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
    from ..corpus.ingest import read_documents
    from ..retrieval.validation import validate_query
    from ..hyde.hypotheses import HypothesisGenerator
    from ..llm.backends import describe_backend, make_llm
    from ..hyde.questions import QuestionGenerator
    from ..llm.recorder import RecordingWriter, record_hypotheses, record_questions

    if (questions is None) == (queries is None):
        fail("Give --queries FILE (hypotheses) or --questions K --file CORPUS (write-time questions).")
    if questions is not None and file is None:
        fail("--questions K needs --file CORPUS (the JSONL whose documents get questions).")
    settings = Settings()
    if settings.llm.provider == "replay":
        fail("Recording from the replay provider would copy recordings; set a live LLM (HYDE_LLM__PROVIDER).")
    target = out or Path("data/recordings") / f"{collection}{'.questions' if questions else ''}.jsonl"
    try:
        writer = RecordingWriter(target)
        typer.echo(f"LLM: {describe_backend(settings)}", err=True)
        backend = make_llm(settings)
    except HydeTutorError as exc:
        fail(str(exc))
    label = model_label or backend.name
    try:
        if questions is not None:
            documents, _ = read_documents(file)  # type: ignore[arg-type]
            gen = QuestionGenerator.for_backend(backend, settings)
            report = asyncio.run(record_questions(gen, documents, writer, k=questions, model=label,
                                                  timeout_s=settings.questions.timeout_s, concurrency=concurrency))
        else:
            texts = [validate_query(q, settings.retrieval.max_query_chars) for _, q in read_queries(queries)]  # type: ignore[arg-type]
            domain = settings.hyde.domains.get(collection, settings.hyde.default_domain)
            hgen = HypothesisGenerator.for_backend(backend, domain, hyde=settings.hyde, llm=settings.llm)
            report = asyncio.run(record_hypotheses(hgen, texts, writer, n=hypotheses, model=label,
                                                   timeout_s=settings.hyde.timeout_s, concurrency=concurrency))
    except HydeTutorError as exc:
        fail(str(exc))
    finally:
        backend.close()
    typer.echo(report.summary())
    if report.failed:
        raise typer.Exit(1)
