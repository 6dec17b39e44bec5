"""``hyde-tutor search``: one query or a file of them, HyDE per settings or flags, text or JSON lines."""

from __future__ import annotations

import asyncio
from dataclasses import asdict
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any

import typer

from ..errors import HydeTutorError
from ..corpus.rendering import fit, payload_label

if TYPE_CHECKING:
    from ..hyde import HydeResult, RetrievedDoc
    from ..retrieval.retriever import SearchMode
    from ..retrieval.store import Hit
from .app import app, check_fusion, fail, json_line, open_hyde, open_retriever, read_queries


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
        fail("Give either a QUERY or --queries-file.")
    if mode not in ("hybrid", "dense", "sparse"):
        fail(f"--mode must be hybrid, dense or sparse, not {mode!r}.")
    check_fusion(fusion)
    queries = read_queries(queries_file) if queries_file else [("q1", query or "")]
    if mode != "hybrid":
        return _plain_search(queries, collection, top_k, mode, as_json)  # type: ignore[arg-type]
    hr = open_hyde()
    texts = [q for _, q in queries]
    if compare or hyde or (hyde is None and hr.policy.enabled):
        slow = " (the embedded model: 10-20 s per hypothesis; it starts on first use)" if hr.weak_model else ""
        typer.echo(f"searching {len(texts)} quer{'y' if len(texts) == 1 else 'ies'}; writing hypotheses with the "
                   f"LLM{slow}…", err=True)
    try:
        from ..hyde.request import SearchRequest

        request = SearchRequest(collection=collection, text="", top_k=top_k, use_hyde=True if compare else hyde,
                                n_hypotheses=hypotheses, fusion=fusion, use_questions=questions)  # type: ignore[arg-type]
        results = asyncio.run(hr.execute_many(request, texts))
        raw = asyncio.run(hr.execute_many(request.replace(use_hyde=False), texts)) if compare else []
    except HydeTutorError as exc:
        fail(str(exc))
    finally:
        hr.close()
    schema = hr.retriever.schemas.get(collection)
    if compare:
        for (qid, _), res_raw, res_hyde in zip(queries, raw, results, strict=True):
            _print_side_by_side(qid, res_raw, res_hyde, schema=schema)
        return
    for (qid, _), res in zip(queries, results, strict=True):
        if as_json:
            typer.echo(json_line(_result_json(qid, res, show_hypotheses)))
        else:
            _print_result(qid, res, schema)


def _result_json(qid: str, res: HydeResult, verbose: bool) -> dict[str, Any]:
    line: dict[str, Any] = {
        "query_id": qid, "query": res.query, "used_hyde": res.used_hyde, "fallback_reason": res.fallback_reason,
        "why": res.why, "skipped": res.skipped, "errors": res.errors,
        "results": [{"id": d.id, "score": round(d.score, 6), "payload": d.payload} for d in res.results],
    }
    if verbose:
        line["hypotheses"] = [{"perspective": h.perspective, "text": h.text, "cached": h.cached} for h in res.hypotheses]
        line["channels"] = {d.id: list(d.channels) for d in res.results}
        line["used_questions"] = res.used_questions
        line["timings_ms"] = {k: round(v, 1) for k, v in asdict(res.timings).items()}
        line["usage"] = asdict(res.usage)
    return line


def _hit_line(rank: int, hit: Hit, schema: Any = None) -> str:
    return f"{rank:>2}. {hit.doc_id:<10} {hit.score:.4f}  {payload_label(hit.payload, long=True, schema=schema)}"


def _print_result(qid: str, res: HydeResult, schema: Any = None) -> None:
    from ..retrieval.store import Hit

    typer.echo(f"\n[{qid}] {res.query}  -> {res.status()}, {res.timings.total_ms:.0f} ms")
    for h in res.hypotheses:
        typer.echo(f"   hypothesis [{h.perspective}]: {h.text[:160]}{'…' if len(h.text) > 160 else ''}")
    for rank, d in enumerate(res.results, start=1):
        typer.echo(_hit_line(rank, Hit(d.id, d.score, d.payload), schema) + f"   via {'+'.join(d.channels)}")
    if not res.results:
        typer.echo("   (no results)")


def _short(d: RetrievedDoc, width: int, schema: Any = None) -> str:
    return fit(f"{d.id} {payload_label(d.payload, schema=schema)}", width)


def _print_side_by_side(qid: str, raw: HydeResult, hyde: HydeResult, width: int = 44, schema: Any = None) -> None:
    typer.echo(f"\n[{qid}] {raw.query}")
    for h in hyde.hypotheses:
        typer.echo(f"   hypothesis [{h.perspective}]: {h.text[:200]}{'…' if len(h.text) > 200 else ''}")
    for line in side_by_side(raw, hyde, width, schema):
        typer.echo(line)


def side_by_side(raw: HydeResult, hyde: HydeResult, width: int = 44, schema: Any = None) -> list[str]:
    """The raw and HyDE rankings as two columns of ``width`` terminal columns each (Korean counts double),
    under a header naming each side and its time."""
    lines = [f"   {fit(f'raw ({raw.timings.total_ms:.0f} ms)', width)} | {hyde.status()} ({hyde.timings.total_ms:.0f} ms)"]
    for i in range(max(len(raw.results), len(hyde.results))):
        left = _short(raw.results[i], width, schema) if i < len(raw.results) else fit("", width)
        right = _short(hyde.results[i], width, schema).rstrip() if i < len(hyde.results) else ""
        lines.append(f"{i + 1:>2} {left} | {right}")
    return lines


def _plain_search(queries: list[tuple[str, str]], collection: str, top_k: int, mode: SearchMode, as_json: bool) -> None:
    with open_retriever() as r:
        try:
            results = r.search_many(collection, [q for _, q in queries], top_k, mode)
        except HydeTutorError as exc:
            fail(str(exc))
        schema = r.schemas.get(collection)
    for (qid, text), hits in zip(queries, results, strict=True):
        if as_json:
            typer.echo(json_line({"query_id": qid, "query": text, "used_hyde": False, "fallback_reason": "disabled",
                                  "results": [{"id": h.doc_id, "score": round(h.score, 6), "payload": h.payload}
                                              for h in hits]}))
        else:
            typer.echo(f"\n[{qid}] {text}  ({mode}, no HyDE)")
            for rank, hit in enumerate(hits, start=1):
                typer.echo(_hit_line(rank, hit, schema))
            if not hits:
                typer.echo("   (no results)")
