"""Metrics monitor: one record per retrieval, logfire metrics, rolling per-arm aggregates, JSONL sink."""

from __future__ import annotations

import atexit
import json
import os
import queue
import threading
import warnings
import time
from collections import defaultdict, deque
from collections.abc import Iterable
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from ..telemetry import logfire

_counter = logfire.metric_counter("hyde.retrievals", unit="1", description="Retrievals by arm and fallback reason")
_stage_ms = logfire.metric_histogram("hyde.stage_ms", unit="ms", description="Latency per retrieval stage")


WRITE_TRIES = 3


def _append(path: Path, data: bytes) -> None:
    """Append ``data`` with one ``write`` on an ``O_APPEND`` descriptor (the kernel places it whole at the end)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
    try:
        view = memoryview(data)
        while view:
            view = view[os.write(fd, view):]
    finally:
        os.close(fd)


@dataclass(slots=True)
class RetrievalRecord:
    """Everything worth knowing about one retrieval (no query text, no secrets)."""

    experiment: str | None
    arm: str
    use_hyde: bool
    reason: str
    tool: str
    collection: str
    used_hyde: bool = False
    fallback_reason: str | None = None
    n_hypotheses: int = 0
    stages_ms: dict[str, float] = field(default_factory=dict)
    results: int = 0
    top_score: float | None = None
    tokens_in: int = 0
    tokens_out: int = 0
    llm_calls: int = 0
    usage_source: str = ""
    """How ``tokens_in``/``tokens_out`` were counted (``reported``, ``counted:<tokenizer>``, ...)."""
    skipped: str | None = None
    """``confident``: the cascade made no LLM call because the raw ranking was sure."""
    hypothesis_sources: list[str] = field(default_factory=list)
    """Where each searched hypothesis came from: ``llm``, ``cache``, ``agent``."""
    error: str | None = None
    subject: str | None = None
    used_questions: bool = False
    timestamp: float = field(default_factory=time.time)
    requested_hyde: bool | None = None
    """What the caller (the model's ``use_hyde`` argument) asked for; ``use_hyde`` is what was given."""
    overridden: bool = False
    """The caller's request beat the assigned arm (only with ``explicit_wins``)."""

    @property
    def total_ms(self) -> float:
        return float(self.stages_ms.get("total_ms", 0.0))


@dataclass(frozen=True, slots=True)
class ArmAggregate:
    count: int
    p50_ms: float
    p95_ms: float
    fallback_rate: float
    mean_results: float
    error_rate: float


class Monitor:
    """Thread- and asyncio-safe collector. ``jsonl_path`` = None keeps everything in memory only."""

    def __init__(self, jsonl_path: Path | None = None, window: int = 1000) -> None:
        self.jsonl_path = jsonl_path
        self.window = window
        self._lock = threading.Lock()
        self._by_arm: dict[str, deque[RetrievalRecord]] = defaultdict(lambda: deque(maxlen=window))
        self.total = 0
        self._lines: queue.Queue[str] = queue.Queue()
        self._writer: threading.Thread | None = None
        if jsonl_path is not None:
            jsonl_path.parent.mkdir(parents=True, exist_ok=True)

    def record(self, rec: RetrievalRecord) -> None:
        """Keep the record (in memory at once; on disk through a writer thread, so a tool call running
        in the event loop never waits for the file)."""
        line = json.dumps(asdict(rec), ensure_ascii=True)  # any subject id (even a lone surrogate) is writable
        with self._lock:
            self._by_arm[rec.arm].append(rec)
            self.total += 1
            if self.jsonl_path is not None:
                self._lines.put(line)
                if self._writer is None:
                    self._writer = threading.Thread(target=self._write_lines, name="hyde-monitor-jsonl", daemon=True)
                    self._writer.start()
                    atexit.register(self.flush)
        attrs = {"arm": rec.arm, "fallback_reason": rec.fallback_reason or "none", "collection": rec.collection}
        _counter.add(1, attrs)
        for stage, ms in rec.stages_ms.items():
            _stage_ms.record(ms, {"arm": rec.arm, "stage": stage.removesuffix("_ms")})

    def _write_lines(self) -> None:
        """The writer thread: each burst of records is ONE ``write`` to an ``O_APPEND`` file, so lines of
        several writers (processes or monitors) never tear into each other; a failed write is retried
        (3 tries, then the burst is reported as lost, never silently)."""
        assert self.jsonl_path is not None
        while True:
            batch = [self._lines.get()]
            while not self._lines.empty():
                batch.append(self._lines.get_nowait())
            data = "".join(line + "\n" for line in batch).encode("utf-8")
            try:
                for attempt in range(1, WRITE_TRIES + 1):
                    try:
                        _append(self.jsonl_path, data)
                        break
                    except Exception as exc:  # noqa: BLE001 - a full disk must not take the tutor (or flush) down
                        if attempt == WRITE_TRIES:
                            warnings.warn(f"metrics JSONL {self.jsonl_path}: {type(exc).__name__}: {exc}; "
                                          f"{len(batch)} records not written", RuntimeWarning, stacklevel=1)
                        else:
                            time.sleep(0.05 * attempt)
            finally:
                for _ in batch:
                    self._lines.task_done()

    def flush(self, timeout_s: float = 10.0) -> bool:
        """Wait (at most ``timeout_s``) until every record so far is in the JSONL file; True if it is."""
        if self._writer is None:
            return True
        deadline = time.monotonic() + timeout_s
        while self._lines.unfinished_tasks:
            if time.monotonic() > deadline:
                return False
            time.sleep(0.005)
        return True

    def records(self, arm: str | None = None) -> list[RetrievalRecord]:
        with self._lock:
            if arm is not None:
                return list(self._by_arm.get(arm, ()))
            return [r for recs in self._by_arm.values() for r in recs]

    def aggregates(self) -> dict[str, ArmAggregate]:
        with self._lock:
            snapshot = {arm: list(recs) for arm, recs in self._by_arm.items()}
        return {arm: aggregate(recs) for arm, recs in snapshot.items() if recs}


def aggregate(records: Iterable[RetrievalRecord]) -> ArmAggregate:
    recs = list(records)
    totals = np.array([r.total_ms for r in recs], dtype=float)
    return ArmAggregate(
        count=len(recs),
        p50_ms=float(np.percentile(totals, 50)),
        p95_ms=float(np.percentile(totals, 95)),
        fallback_rate=sum(1 for r in recs if r.use_hyde and r.fallback_reason) / len(recs),
        mean_results=float(np.mean([r.results for r in recs])),
        error_rate=sum(1 for r in recs if r.error) / len(recs),
    )


@dataclass(frozen=True, slots=True)
class LoadedRecords:
    """Records read from a metrics JSONL, and the lines that were not records."""

    records: list[dict[str, Any]]
    skipped: list[str]
    """``line N: why`` for each line that is not a JSON object."""


def _record_problem(obj: dict[str, Any]) -> str | None:
    """Why a JSON object is not a usable retrieval record (None when it is)."""
    stages = obj.get("stages_ms", {})
    if not isinstance(stages, dict) or not isinstance(stages.get("total_ms", 0.0), (int, float)):
        return "stages_ms is not an object of numbers"
    for key in ("results", "top_score"):
        value = obj.get(key)
        if value is not None and (isinstance(value, bool) or not isinstance(value, (int, float))):
            return f"{key} is not a number"
    if not isinstance(obj.get("arm", "unassigned"), str):
        return "arm is not a string"
    return None


def load_records(path: Path) -> LoadedRecords:
    """Read a metrics JSONL: every JSON object line is a record; any other non-blank line is skipped and listed."""
    records: list[dict[str, Any]] = []
    skipped: list[str] = []
    for no, line in enumerate(Path(path).read_text(encoding="utf-8", errors="replace").splitlines(), start=1):
        if not line.strip():
            continue
        try:
            obj = json.loads(line)
        except json.JSONDecodeError as exc:
            skipped.append(f"line {no}: not JSON ({exc.msg})")
            continue
        if isinstance(obj, dict):
            problem = _record_problem(obj)
            if problem:
                skipped.append(f"line {no}: {problem}")
            else:
                records.append(obj)
        else:
            skipped.append(f"line {no}: a JSON {type(obj).__name__}, not a record object")
    return LoadedRecords(records, skipped)


def configure_logfire(token: str | None = None) -> None:
    """Offline by default (``send_to_logfire=False``); sends only when a token is given."""
    logfire.configure(send_to_logfire=bool(token), token=token, console=False, inspect_arguments=False)
    logfire.instrument_pydantic_ai()
