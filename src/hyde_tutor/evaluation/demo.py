"""``hyde-tutor demo``: what HyDE does, shown on the bundled sets.

1. Recorded capable-model hypotheses (``data/recordings/``, replayed, labelled as such) for learner
   questions that do not name the pattern: raw vs HyDE side by side, the hypotheses, and which
   result the eval set marks as relevant. The questions are the first ones where HyDE puts a
   relevant entry first and plain retrieval does not (picked live, not hard-coded).
2. One live HyDE search with the configured LLM (the embedded model by default), with its honest
   outcome and time.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from ..config import Settings
from .beir import EvalQuery, load_beir
from ..hyde import HydeResult, HydeRetriever, RetrievedDoc
from ..hyde.request import SearchRequest
from ..hyde.requests import render_recording
from ..hyde.hypotheses import HypothesisGenerator, MemoryCache
from ..llm.backends import describe_backend, replay_backend
from ..corpus.rendering import fit, payload_label
from ..retrieval.retriever import Retriever

__all__ = ["run_demo"]

SETS = (("grammar_holdout", "grammar"), ("grammar", "grammar"), ("docs", "docs"))
LIVE_QUESTION = "Как сказать, что я чуть не опоздал на поезд?"


@dataclass(frozen=True, slots=True)
class Shown:
    query: EvalQuery
    collection: str
    raw: HydeResult
    hyde: HydeResult
    relevant: frozenset[str]


def _label(d: RetrievedDoc, relevant: frozenset[str], width: int) -> str:
    """``width`` terminal columns: a ✓ for a relevant entry, its id and name (Korean counts double)."""
    mark = "✓ " if d.id in relevant else "  "
    return fit(f"{mark}{d.id} {payload_label(d.payload)}", width)


def _rank(result: HydeResult, relevant: frozenset[str]) -> int | None:
    return next((i for i, d in enumerate(result.results, start=1) if d.id in relevant), None)


def _pick(hr: HydeRetriever, eval_dir: Path, per_set: tuple[int, ...] = (2, 1, 1)) -> list[Shown]:
    """Unnamed questions where HyDE ranks a relevant entry first and plain retrieval does not."""
    shown: list[Shown] = []
    for (name, collection), want in zip(SETS, per_set, strict=True):
        data = load_beir(eval_dir / name)
        plain = SearchRequest(collection=collection, text="", top_k=5, use_hyde=False)
        found = 0
        for q in data.queries:
            if found == want:
                break
            if q.group != "unnamed":
                continue
            relevant = frozenset(d for d, g in data.qrels[q.id].items() if g > 0)
            raw = asyncio.run(hr.execute(plain.replace(text=q.text)))
            if _rank(raw, relevant) == 1:
                continue
            hyde = asyncio.run(hr.execute(plain.replace(text=q.text, use_hyde=True)))
            if hyde.used_hyde and _rank(hyde, relevant) == 1:
                shown.append(Shown(q, collection, raw, hyde, relevant))
                found += 1
    return shown


def _print_shown(s: Shown, echo: Callable[[str], None], width: int = 40) -> None:
    echo(f"\n[{s.query.id}] {s.query.text}")
    for h in s.hyde.hypotheses[:2]:
        echo(f"   recorded hypothesis [{h.perspective}]: {h.text[:170]}…")
    if len(s.hyde.hypotheses) > 2:
        echo(f"   (+{len(s.hyde.hypotheses) - 2} more hypotheses: {', '.join(h.perspective for h in s.hyde.hypotheses[2:])})")
    echo(f"   {fit('plain hybrid search', width)} | HyDE (recorded capable model)")
    for i in range(5):
        left = _label(s.raw.results[i], s.relevant, width) if i < len(s.raw.results) else fit("", width)
        right = _label(s.hyde.results[i], s.relevant, width).rstrip() if i < len(s.hyde.results) else ""
        echo(f"{i + 1:>2} {left} | {right}")
    raw_rank, hyde_rank = _rank(s.raw, s.relevant), _rank(s.hyde, s.relevant)
    echo(f"   relevant entry (✓, from the eval set's qrels): rank {raw_rank or '>5'} without HyDE, "
         f"rank {hyde_rank} with HyDE")


def _replay_retriever(settings: Settings, retriever: Retriever) -> HydeRetriever:
    """HyDE over the bundled recordings, with the capable-model policy (replay stands in for one)."""
    backend = replay_backend(settings.llm.recordings, render=render_recording)
    cache = MemoryCache()
    return HydeRetriever(retriever, lambda d: HypothesisGenerator.for_backend(backend, d, hyde=settings.hyde,
                                                                             llm=settings.llm, cache=cache),
                         settings.hyde, questions=settings.questions, weak_model=False)


def run_demo(settings: Settings, echo: Callable[[str], None], *, eval_dir: Path = Path("data/eval"),
             live: bool = True) -> None:
    """Print the recorded part, then (``live``) one HyDE search with the configured LLM."""
    retriever = Retriever.from_settings(settings)
    try:
        echo("=" * 100)
        echo("1) HyDE with a CAPABLE model — RECORDED hypotheses (data/recordings/, model label "
             "'frontier-llm-stand-in'), replayed offline: no live model runs in this part.")
        echo("   Learner questions that do not name the pattern; the first ones in the eval sets where HyDE "
             "changes the top answer.")
        for shown in _pick(_replay_retriever(settings, retriever), eval_dir):
            _print_shown(shown, echo)
        if live:
            _live(settings, retriever, echo)
    finally:
        retriever.close()


def _live(settings: Settings, retriever: Retriever, echo: Callable[[str], None]) -> None:
    echo("\n" + "=" * 100)
    echo(f"2) One LIVE HyDE search with the configured LLM: {describe_backend(settings)}")
    echo("   starting the model and writing a hypothesis (the embedded model: about 15-20 s on 2 cores)…")
    hr = HydeRetriever.from_settings(settings, retriever=retriever)
    started = time.perf_counter()
    try:
        live = SearchRequest(collection="grammar", text=LIVE_QUESTION, top_k=3, use_hyde=False)
        raw = asyncio.run(hr.execute(live))
        res = asyncio.run(hr.execute(live.replace(use_hyde=True)))
    finally:
        for close in hr.closers:  # the LLM backend; the shared retriever is closed by run_demo
            close()
    seconds = time.perf_counter() - started
    echo(f"[live] {LIVE_QUESTION}")
    for h in res.hypotheses:
        echo(f"   live hypothesis [{h.perspective}]: {h.text[:200]}")
    if res.used_hyde:
        outcome = "HyDE used"
    else:
        outcome = f"HyDE fell back to plain retrieval ({res.fallback_reason}: " + {
            "empty_hypotheses": "the model wrote no usable Korean entry",
            "off_topic": "the hypothesis found other entries than the question itself",
            "timeout": "generation took longer than HYDE_HYDE__TIMEOUT_S",
        }.get(res.fallback_reason or "", "; ".join(res.errors[:2]) or "see errors") + ")"
    echo(f"   outcome: {outcome}; {seconds:.1f} s in all (model start included), "
         f"generation {res.timings.generate_ms / 1000:.1f} s")
    echo(f"   {fit('plain hybrid search', 40)} | live HyDE ({res.status()})")
    for i, (a, b) in enumerate(zip(raw.results, res.results, strict=False), start=1):
        echo(f"{i:>2} {_label(a, frozenset(), 40)} | {_label(b, frozenset(), 40).rstrip()}")
    echo("   This is why plain hybrid search is the default with the embedded model (README, first section); "
         "set HYDE_OPENAI__API_KEY (or OPENAI_API_KEY) or HYDE_LLM__BASE_URL for HyDE that helps.")
