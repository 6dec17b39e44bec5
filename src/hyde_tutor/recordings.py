"""Recorded generations: write a capable model's answers once, replay them offline.

A recording stands in for an API call. ``hyde-tutor record`` runs the configured LLM over a set of
queries (or documents, for write-time questions) and appends one JSON line per generation::

    {"kind": "hypothesis", "domain": "grammar", "query": "...", "perspective": "rule", "text": "...",
     "model": "openai:gpt-4.1", "prompt_refs": ["hypothesis_grammar@v1", "hypothesis_request@v1",
     "perspectives@v1"], "prompt_sha256": "...", "created": "2026-11-24T06:00:00Z"}

The ``replay`` provider (``HYDE_LLM__PROVIDER=replay``) serves those texts through a pydantic-ai
``FunctionModel``, so the pipeline runs the same agent code path as with any other backend. A request
is matched by what the model would have been sent: each record is rendered back into its system
prompt and user message from the prompt files named in ``prompt_refs``. A request nobody recorded
raises :class:`NotRecordedError`, which the pipeline treats like any LLM failure (fallback reason
``not_recorded``). A record whose prompt files changed since it was made (same name and version,
different text) is stale: it is skipped, and counted in :attr:`RecordingBook.stale`.
"""

from __future__ import annotations

import hashlib
import json
import os
import threading
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import asdict, dataclass, field
from datetime import datetime, timezone
from pathlib import Path
from typing import Any, Literal

from .errors import HydeTutorError
from .prompts import Prompt, load_prompt, parse_perspectives

RecordKind = Literal["hypothesis", "questions"]
__all__ = [
    "NotRecordedError",
    "Recording",
    "RecordingBook",
    "RecordingWriter",
    "ReplayModel",
    "default_recordings_paths",
    "render_hypothesis_request",
    "render_questions_request",
]


class NotRecordedError(HydeTutorError):
    """The replay provider has no recording for this request (fallback reason ``not_recorded``)."""


class RecordingFormatError(HydeTutorError, ValueError):
    """A recordings file has a line that is not a recording."""


@dataclass(frozen=True, slots=True, kw_only=True)
class Recording:
    """One recorded generation."""

    kind: RecordKind
    """``hypothesis`` (query-time HyDE) or ``questions`` (write-time learner questions)."""
    query: str
    """The learner's question; for ``questions``, the document text as it was shown to the model."""
    perspective: str
    """The perspective's name (``rule``, ``example``, ...); for ``questions``, K as a string."""
    text: str
    """What the model answered, unnormalised."""
    model: str
    """Who wrote it, labelled honestly (``openai:gpt-4.1``, ``frontier-llm-stand-in``, ...)."""
    prompt_refs: tuple[str, ...]
    """``name@vN`` of every prompt file used: system prompt, request template, perspectives."""
    domain: str = ""
    """The generator's domain (``grammar``, ``docs``, ``passage``); empty for questions."""
    prompt_sha256: str = ""
    """Hash of the rendered system prompt + user message when recorded: detects edited prompt files."""
    created: str = ""
    """ISO 8601 UTC time of the generation."""

    @property
    def key(self) -> tuple[str, str, str, tuple[str, ...]]:
        """(kind, query, perspective, prompt refs): what identifies a generation."""
        return (self.kind, self.query.strip(), self.perspective, self.prompt_refs)

    def to_json(self) -> str:
        row = asdict(self)
        row["prompt_refs"] = list(self.prompt_refs)
        return json.dumps(row, ensure_ascii=False)

    @classmethod
    def from_obj(cls, obj: Any) -> Recording:
        if not isinstance(obj, dict):
            raise ValueError("not a JSON object")
        missing = [k for k in ("query", "perspective", "text", "model", "prompt_refs") if k not in obj]
        if missing:
            raise ValueError(f"missing {', '.join(missing)}")
        refs = obj["prompt_refs"]
        if not isinstance(refs, list) or not all(isinstance(r, str) for r in refs):
            raise ValueError("prompt_refs must be a list of 'name@vN' strings")
        kind = obj.get("kind", "hypothesis")
        if kind not in ("hypothesis", "questions"):
            raise ValueError(f"kind must be hypothesis or questions, not {kind!r}")
        return cls(kind=kind, query=str(obj["query"]), perspective=str(obj["perspective"]), text=str(obj["text"]),
                   model=str(obj["model"]), prompt_refs=tuple(refs), domain=str(obj.get("domain", "")),
                   prompt_sha256=str(obj.get("prompt_sha256", "")), created=str(obj.get("created", "")))


def request_sha256(system: str, user: str) -> str:
    return hashlib.sha256(f"{system.strip()}\x00{user.strip()}".encode()).hexdigest()


def utc_now() -> str:
    return datetime.now(timezone.utc).replace(microsecond=0).isoformat().replace("+00:00", "Z")


# -- rendering a record back into the request it answered ------------------------------------------

def render_hypothesis_request(request: Prompt, query: str, perspective_instruction: str) -> str:
    """The user message of a hypothesis call: the request template filled with query and perspective."""
    return request.text.replace("{query}", query).replace("{perspective}", perspective_instruction)


def render_questions_request(request: Prompt, document_text: str, k: int | str) -> str:
    """The user message of a write-time questions call."""
    return request.text.replace("{document}", document_text).replace("{k}", str(k))


def _parse_ref(ref: str) -> tuple[str, int]:
    name, _, version = ref.partition("@v")
    if not name or not version.isdigit():
        raise ValueError(f"bad prompt ref {ref!r} (want name@vN)")
    return name, int(version)


class _PromptFiles:
    """Prompt files by ref, loaded once (a missing version raises :class:`HydeTutorError`)."""

    def __init__(self, directory: Path | None) -> None:
        self.directory = directory
        self._cache: dict[str, Prompt] = {}

    def get(self, ref: str) -> Prompt:
        if ref not in self._cache:
            name, version = _parse_ref(ref)
            self._cache[ref] = load_prompt(name, version, self.directory)
        return self._cache[ref]


def render_recording(rec: Recording, prompts: _PromptFiles) -> tuple[str, str]:
    """(system prompt, user message) that ``rec`` answered, from the prompt files it names."""
    if rec.kind == "questions":
        system_ref, request_ref = rec.prompt_refs[:2]
        return prompts.get(system_ref).text, render_questions_request(prompts.get(request_ref), rec.query,
                                                                      rec.perspective)
    system_ref, request_ref, perspectives_ref = rec.prompt_refs[:3]
    by_name = {p.name: p.instruction for p in parse_perspectives(prompts.get(perspectives_ref).text)}
    if rec.perspective not in by_name:
        raise ValueError(f"perspective {rec.perspective!r} is not in {perspectives_ref}")
    user = render_hypothesis_request(prompts.get(request_ref), rec.query, by_name[rec.perspective])
    return prompts.get(system_ref).text, user


# -- reading ------------------------------------------------------------------------------------------

def iter_recordings(path: Path, *, strict: bool = True) -> Iterator[Recording]:
    """Records in one JSONL file. A torn last line (an interrupted append) is skipped; any other bad
    line raises :class:`RecordingFormatError` naming the file and line, unless ``strict=False``."""
    text = Path(path).read_text(encoding="utf-8")
    lines = text.splitlines()
    for no, line in enumerate(lines, start=1):
        if not line.strip():
            continue
        try:
            yield Recording.from_obj(json.loads(line))
        except (ValueError, json.JSONDecodeError) as exc:
            torn_tail = no == len(lines) and not text.endswith("\n")
            if strict and not torn_tail:
                raise RecordingFormatError(f"{path}:{no}: not a recording ({exc}). Fix or delete that line.") from exc


def default_recordings_paths() -> list[Path]:
    """Every ``*.jsonl`` under ``./data/recordings``, else under the checkout's ``data/recordings``."""
    for directory in (Path("data/recordings"), Path(__file__).resolve().parents[2] / "data" / "recordings"):
        if directory.is_dir():
            found = sorted(directory.glob("*.jsonl"))
            if found:
                return found
    return []


def resolve_recordings_paths(spec: str | Sequence[str | Path] | None) -> list[Path]:
    """``path[,path…]`` (files or folders of ``*.jsonl``); ``None``/empty means the bundled recordings."""
    if spec is None or (isinstance(spec, str) and not spec.strip()):
        paths = default_recordings_paths()
        if not paths:
            raise HydeTutorError("No recordings found under data/recordings/. Record some with `hyde-tutor record`, "
                                 "or point HYDE_LLM__RECORDINGS at JSONL files.")
        return paths
    items = [s.strip() for s in spec.split(",")] if isinstance(spec, str) else [str(s) for s in spec]
    out: list[Path] = []
    for item in filter(None, items):
        p = Path(item)
        if p.is_dir():
            out += sorted(p.glob("*.jsonl"))
        elif p.is_file():
            out.append(p)
        else:
            raise HydeTutorError(f"Recordings file {p} does not exist (HYDE_LLM__RECORDINGS={spec!r}).")
    if not out:
        raise HydeTutorError(f"No *.jsonl recordings in {spec!r}.")
    return out


@dataclass(slots=True)
class RecordingBook:
    """Recordings indexed by the exact request they answer (system prompt + user message)."""

    by_request: dict[str, Recording] = field(default_factory=dict)
    stale: int = 0
    """Records skipped because their prompt files changed since recording (or are missing)."""
    models: tuple[str, ...] = ()

    @classmethod
    def load(cls, paths: Iterable[str | Path], prompts_dir: Path | None = None) -> RecordingBook:
        prompts = _PromptFiles(prompts_dir)
        book = cls()
        models: dict[str, None] = {}
        for path in paths:
            for rec in iter_recordings(Path(path)):
                try:
                    system, user = render_recording(rec, prompts)
                except (HydeTutorError, ValueError):
                    book.stale += 1  # a prompt version that is not here any more
                    continue
                sha = request_sha256(system, user)
                if rec.prompt_sha256 and rec.prompt_sha256 != sha:
                    book.stale += 1  # the prompt file was edited in place after recording
                    continue
                book.by_request[sha] = rec  # later files and lines win
                models[rec.model] = None
        book.models = tuple(models)
        return book

    def __len__(self) -> int:
        return len(self.by_request)

    def lookup(self, system: str, user: str) -> Recording | None:
        return self.by_request.get(request_sha256(system, user))

    @property
    def label(self) -> str:
        return "+".join(self.models) or "empty"


# -- the replay model -----------------------------------------------------------------------------

def _request_texts(messages: Sequence[Any], info: Any) -> tuple[str, str]:
    from pydantic_ai.messages import ModelRequest, SystemPromptPart, UserPromptPart

    system = getattr(info, "instructions", None) or ""
    user = ""
    for msg in messages:
        if isinstance(msg, ModelRequest):
            system = msg.instructions or system
            for part in msg.parts:
                if isinstance(part, SystemPromptPart) and not system:
                    system = part.content
                elif isinstance(part, UserPromptPart) and isinstance(part.content, str):
                    user = part.content
    return system, user


def ReplayModel(book: RecordingBook, *, model_name: str = "replay") -> Any:  # noqa: N802 - a model factory
    """A pydantic-ai ``FunctionModel`` that answers from ``book``; an unrecorded request raises
    :class:`NotRecordedError` (the HyDE pipeline falls back with reason ``not_recorded``)."""
    from pydantic_ai.messages import ModelResponse, TextPart
    from pydantic_ai.models.function import FunctionModel

    def answer(messages: list[Any], info: Any) -> Any:
        system, user = _request_texts(messages, info)
        rec = book.lookup(system, user)
        if rec is None:
            raise NotRecordedError(
                "The replay provider has no recording for this request (query, perspective and prompt files must "
                "match a recorded generation). Record it with `hyde-tutor record`, or use a live LLM provider."
            )
        return ModelResponse(parts=[TextPart(rec.text)], model_name=rec.model)

    return FunctionModel(answer, model_name=model_name)


# -- writing --------------------------------------------------------------------------------------

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


async def _record_jobs(jobs: Sequence[tuple[str, str, Any]], call: Any, make: Any, writer: RecordingWriter,
                       report: RecordReport, *, concurrency: int, timeout_s: float, progress: bool) -> None:
    """Run ``call(user_prompt)`` for each job concurrently and append what ``make`` builds from its text."""
    import asyncio

    from tqdm import tqdm

    gate = asyncio.Semaphore(max(1, concurrency))
    with tqdm(total=len(jobs), desc="record", unit="gen", disable=not progress) as bar:

        async def one(label: str, user: str, job: Any) -> None:
            try:
                async with gate:
                    run = await asyncio.wait_for(call(user), timeout_s)
            except (asyncio.TimeoutError, TimeoutError):
                report.failed.append(f"{label}: timeout after {timeout_s:.0f} s")
            except Exception as exc:  # noqa: BLE001 - one failed generation must not stop a long recording
                report.failed.append(f"{label}: {type(exc).__name__}: {str(exc)[:160]}")
            else:
                if run.text.strip():
                    writer.append(make(job, user, run.text))
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
    from .llm import run_text

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

    await _record_jobs(jobs, lambda user: run_text(generator.agent, user, stream=generator.stream), make, writer,
                       report, concurrency=generator.max_concurrency or concurrency, timeout_s=timeout_s,
                       progress=progress)
    return report


async def record_questions(generator: Any, documents: Sequence[Any], writer: RecordingWriter, *, k: int, model: str,
                           timeout_s: float, concurrency: int = 4, progress: bool = True) -> RecordReport:
    """Record one write-time questions call (K questions) per document with ``generator``'s agent."""
    from .llm import run_text

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

    await _record_jobs(jobs, lambda user: run_text(generator.agent, user, stream=generator.stream), make, writer,
                       report, concurrency=generator._semaphore_size or concurrency, timeout_s=timeout_s,
                       progress=progress)
    return report
