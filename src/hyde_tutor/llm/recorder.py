"""Recording generations: ``hyde-tutor record`` runs the configured LLM once per request and appends
each answer to a JSONL file (:class:`RecordingWriter`); the ``replay`` provider serves them later."""

from __future__ import annotations

import asyncio
import os
import threading
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from .generation import generate_text
from .recordings import Recording, iter_recordings, request_sha256, utc_now

class RecordingWriter:
    """Appends recordings to a JSONL file: one ``write`` per line on an ``O_APPEND`` descriptor, so a
    killed run leaves at most a torn last line (skipped when read, cut off when the file is opened
    for writing again), and a re-run skips what is there."""

    def __init__(self, path: Path) -> None:
        self.path = Path(path)
        self.path.parent.mkdir(parents=True, exist_ok=True)
        self._lock = threading.Lock()
        self.done: set[tuple[str, str, str, tuple[str, ...]]] = set()
        self.requests: set[str] = set()
        """``prompt_sha256`` of every record: what was asked, exactly (prompt files' text included)."""
        if self.path.is_file():
            for r in iter_recordings(self.path):
                self.done.add(r.key)
                self.requests.add(r.prompt_sha256)
            data = self.path.read_bytes()
            if data and not data.endswith(b"\n"):  # a killed append left half a line: cut it off
                with self.path.open("r+b") as fh:
                    fh.truncate(data.rfind(b"\n") + 1)

    def has(self, rec_key: tuple[str, str, str, tuple[str, ...]]) -> bool:
        return rec_key in self.done

    def append(self, rec: Recording) -> None:
        data = (rec.to_json() + "\n").encode("utf-8")
        with self._lock:
            fd = os.open(self.path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
            try:
                os.write(fd, data)
                os.fsync(fd)
            finally:
                os.close(fd)
            self.done.add(rec.key)
            self.requests.add(rec.prompt_sha256)


# -- recording --------------------------------------------------------------------------------------

@dataclass(slots=True)
class RecordReport:
    """What one ``hyde-tutor record`` pass did."""

    path: Path
    recorded: int = 0
    skipped: int = 0
    """Already in the file (a re-run resumes)."""
    failed: list[str] = field(default_factory=list)
    """``query | perspective: reason`` for generations that produced nothing (not written; re-run to retry)."""

    def summary(self) -> str:
        line = f"{self.path}: {self.recorded} recorded, {self.skipped} already there, {len(self.failed)} failed"
        return line + "".join(f"\n  failed: {f}" for f in self.failed[:10]) + (
            f"\n  ... and {len(self.failed) - 10} more" if len(self.failed) > 10 else "")


async def _record_jobs(jobs: Sequence[tuple[str, str, Any]], generator: Any, make: Any, writer: RecordingWriter,
                       report: RecordReport, *, concurrency: int, timeout_s: float, progress: bool) -> None:
    """Send, through ``generator``'s call, each job's user prompt concurrently and append what ``make`` builds."""
    from tqdm import tqdm

    gate = asyncio.Semaphore(max(1, concurrency))
    with tqdm(total=len(jobs), desc="record", unit="gen", disable=not progress) as bar:

        async def one(label: str, user: str, job: Any) -> None:
            out = await generate_text(generator.call, user, timeout_s=timeout_s, gate=gate)
            if out.failure == "timeout":
                report.failed.append(f"{label}: timeout after {timeout_s:.0f} s")
            elif out.failure is not None:  # one failed generation must not stop a long recording
                report.failed.append(f"{label}: {(out.error or out.failure)[:200]}")
            elif out.text and out.text.strip():
                await asyncio.to_thread(writer.append, make(job, user, out.text))  # its fsync stays off the loop
                report.recorded += 1
            else:
                report.failed.append(f"{label}: empty answer")
            bar.update(1)

        await asyncio.gather(*(one(label, user, job) for label, user, job in jobs))


async def record_hypotheses(generator: Any, queries: Sequence[str], writer: RecordingWriter, *, n: int,
                            model: str, timeout_s: float, concurrency: int = 4, progress: bool = True) -> RecordReport:
    """Record ``n`` hypotheses (the first ``n`` perspectives) per query with ``generator``'s agent.

    Args:
        generator: a :class:`~hyde_tutor.hypotheses.HypothesisGenerator` on the LLM to record.
        queries: learner questions, already validated (stripped).
        writer: where records go; keys already there are skipped.
        n: perspectives per query (1..len(perspectives)).
        model: the ``model`` label written into each record.
    """
    report = RecordReport(writer.path)
    refs = generator.prompt_refs
    jobs = []
    for query in queries:
        for p in generator.perspectives[:n]:
            user = generator.user_prompt(query, p)
            if request_sha256(generator.prompt.text, user) in writer.requests:
                report.skipped += 1  # recorded for exactly this request (an edited prompt is recorded again)
            else:
                jobs.append((f"{query[:60]} | {p.name}", user, (query, p.name)))

    def make(job: tuple[str, str], user: str, text: str) -> Recording:
        return Recording(kind="hypothesis", domain=generator.domain, query=job[0], perspective=job[1], text=text,
                         model=model, prompt_refs=refs, prompt_sha256=request_sha256(generator.prompt.text, user),
                         created=utc_now())

    await _record_jobs(jobs, generator, make, writer,
                       report, concurrency=generator.max_concurrency or concurrency, timeout_s=timeout_s,
                       progress=progress)
    return report


async def record_questions(generator: Any, documents: Sequence[Any], writer: RecordingWriter, *, k: int, model: str,
                           timeout_s: float, concurrency: int = 4, progress: bool = True) -> RecordReport:
    """Record one write-time questions call (K questions) per document with ``generator``'s agent."""
    report = RecordReport(writer.path)
    refs = (generator.prompt.ref, generator.request.ref)
    jobs = []
    for doc in documents:
        shown, user = generator.shown_text(doc), generator.user_prompt(doc, k)
        if request_sha256(generator.prompt.text, user) in writer.requests:
            report.skipped += 1
        else:
            jobs.append((f"{doc.id} | k={k}", user, shown))

    def make(shown: str, user: str, text: str) -> Recording:
        return Recording(kind="questions", query=shown, perspective=str(k), text=text, model=model, prompt_refs=refs,
                         prompt_sha256=request_sha256(generator.prompt.text, user), created=utc_now())

    await _record_jobs(jobs, generator, make, writer,
                       report, concurrency=generator.max_concurrency or concurrency, timeout_s=timeout_s,
                       progress=progress)
    return report
