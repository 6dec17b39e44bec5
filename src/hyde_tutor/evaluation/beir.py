"""Evaluate retrieval arms on a BEIR-format dataset (corpus.jsonl, queries.jsonl, qrels/*.tsv)."""

from __future__ import annotations

import csv
import json
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from ..errors import HydeTutorError
from .metrics import score_run

# An arm maps query texts to ranked lists of ORIGINAL document ids.
Arm = Callable[[Sequence[str]], list[list[str]]]


@dataclass(frozen=True, slots=True)
class EvalQuery:
    id: str
    text: str
    group: str
    history: tuple[tuple[str, str], ...] = ()
    """Earlier turns of the conversation, oldest first: ``(role, content)``, role ``user`` or ``assistant``."""


def parse_history(value: Any) -> tuple[tuple[str, str], ...]:
    """A BEIR query's optional ``history``: ``[{"role": "user"|"assistant", "content": str}, ...]``."""
    if value is None:
        return ()
    if not isinstance(value, list):
        raise TypeError("history must be a list of {role, content} objects")
    turns = []
    for item in value:
        if not isinstance(item, dict) or item.get("role") not in ("user", "assistant") \
                or not isinstance(item.get("content"), str):
            raise TypeError('each history item must be {"role": "user"|"assistant", "content": "..."}')
        turns.append((item["role"], item["content"]))
    return tuple(turns)


@dataclass(frozen=True, slots=True)
class BeirDataset:
    root: Path
    queries: list[EvalQuery]
    qrels: dict[str, dict[str, int]]

    @property
    def corpus_path(self) -> Path:
        return self.root / "corpus.jsonl"


def query_group(metadata: Mapping[str, Any] | None) -> str:
    """``named`` when the question names the pattern/term, ``unnamed`` when not, else ``all``."""
    named = (metadata or {}).get("named")
    return "all" if named is None else ("named" if named else "unnamed")


def load_beir(root: Path, split: str = "test", *, group_by: str | None = None) -> BeirDataset:
    """Load queries and qrels; only queries with at least one relevant document are kept. ``group_by``: the
    queries' group is this metadata field's value (``kind``: followup | new), ``all`` where it is missing;
    unset: :func:`query_group`."""
    root = Path(root)
    qrels_path = root / "qrels" / f"{split}.tsv"
    queries_path = root / "queries.jsonl"
    for p in (queries_path, qrels_path):
        if not p.is_file():
            raise HydeTutorError(f"BEIR dataset {root} lacks {p.relative_to(root)}.")
    qrels: dict[str, dict[str, int]] = {}
    with qrels_path.open(encoding="utf-8") as fh:
        for no, row in enumerate(csv.reader(fh, delimiter="\t"), start=1):
            if not row or row[0] == "query-id":
                continue
            if len(row) < 3:
                raise HydeTutorError(f"{qrels_path}:{no}: expected query-id<TAB>corpus-id<TAB>score, got {row!r}.")
            try:
                qrels.setdefault(row[0], {})[row[1]] = int(row[2])
            except ValueError:
                raise HydeTutorError(
                    f"{qrels_path}:{no}: the score {row[2]!r} is not an integer (BEIR relevance: 0, 1, 2, ...)."
                ) from None
    queries = []
    with queries_path.open(encoding="utf-8") as fh:
        for no, line in enumerate(fh, start=1):
            if not line.strip():
                continue
            try:
                obj = json.loads(line)
                qid, text = str(obj["_id"]), obj["text"]
                if not isinstance(text, str):
                    raise TypeError("text is not a string")
                history = parse_history(obj.get("history"))
            except (json.JSONDecodeError, KeyError, TypeError) as exc:
                raise HydeTutorError(
                    f"{queries_path}:{no}: expected a JSON object with \"_id\" and \"text\" ({type(exc).__name__}: {exc})."
                ) from None
            if qid in qrels:
                meta = obj.get("metadata") or {}
                group = query_group(meta) if group_by is None else str(meta.get(group_by, "all"))
                queries.append(EvalQuery(qid, text, group, history))
    return BeirDataset(root, queries, qrels)


@dataclass(slots=True)
class ArmResult:
    metrics: dict[str, float]
    by_group: dict[str, dict[str, float]]
    latency_ms_p50: float
    runs: dict[str, list[str]] = field(repr=False, default_factory=dict)


def evaluate_arms(dataset: BeirDataset, arms: Mapping[str, Arm], batch_size: int = 32) -> dict[str, ArmResult]:
    """Run every arm on the same queries and score them overall and per query group."""
    results: dict[str, ArmResult] = {}
    texts = [q.text for q in dataset.queries]
    for name, arm in arms.items():
        takes_queries = getattr(arm, "takes_queries", False)  # arms that need the conversation get the queries
        arm(dataset.queries[:1] if takes_queries else texts[:1])  # warm-up: model loading is not query latency
        run: dict[str, list[str]] = {}
        per_query_ms: list[float] = []
        for start in range(0, len(texts), batch_size):
            chunk = dataset.queries[start : start + batch_size]
            t0 = time.perf_counter()
            ranked = arm(chunk if takes_queries else [q.text for q in chunk])
            per_query_ms += [(time.perf_counter() - t0) * 1000 / len(chunk)] * len(chunk)
            run.update({q.id: r for q, r in zip(chunk, ranked, strict=True)})
        groups = sorted({q.group for q in dataset.queries})
        by_group = {
            g: score_run({q.id: run[q.id] for q in dataset.queries if q.group == g}, dataset.qrels) for g in groups
        }
        results[name] = ArmResult(score_run(run, dataset.qrels), by_group, float(np.median(per_query_ms)), run)
    return results


def report_json(results: Mapping[str, ArmResult], n_queries: int) -> dict[str, Any]:
    return {
        "arms": {name: {k: round(v, 4) for k, v in r.metrics.items()} for name, r in results.items()},
        "groups": {
            name: {g: {k: round(v, 4) for k, v in m.items()} for g, m in r.by_group.items()} for name, r in results.items()
        },
        "latency_ms_p50": {name: round(r.latency_ms_p50, 2) for name, r in results.items()},
        "n_queries": n_queries,
    }


def report_table(results: Mapping[str, ArmResult], group_counts: Mapping[str, int]) -> str:
    """Plain-text table: one row per arm (overall), then one per arm x query group."""
    cols = ["recall@1", "recall@5", "recall@10", "precision@5", "mrr@10", "ndcg@10"]
    head = f"{'arm':<16}{'group':<12}" + "".join(f"{c:>12}" for c in cols) + f"{'ms/query':>10}"
    lines = [head, "-" * len(head)]
    for name, r in results.items():
        lines.append(f"{name:<16}{'all':<12}" + "".join(f"{r.metrics[c]:>12.3f}" for c in cols) + f"{r.latency_ms_p50:>10.1f}")
        for g, m in r.by_group.items():
            if g != "all" and len(r.by_group) > 1:
                label = f"{g} ({group_counts.get(g, 0)})"
                lines.append(f"{'':<16}{label:<12}" + "".join(f"{m[c]:>12.3f}" for c in cols))
    return "\n".join(lines)
