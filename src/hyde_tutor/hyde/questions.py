"""Write-time HyDE: the questions a learner would ask whose answer is in a document.

For every document one LLM call writes K learner questions (``prompts/questions.v<N>.md``).
They are derived data: a versioned JSONL cache under ``HYDE_DATA_DIR`` keyed by
(model, prompt versions, document hash, K) makes re-ingesting an unchanged document free.
Generation never stops an ingest: a document whose questions fail is ingested anyway and
listed in the report with the reason.
"""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
import json
import re
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from tqdm import tqdm

from ..config import LLMSettings, QuestionSettings, Settings
from ..corpus.documents import Document
from ..llm.generation import CallOptions, PromptedGenerator, generate_text
from ..llm.backends import LLMBackend, make_llm
from ..llm.prompts import Prompt, load_prompt
from .requests import render_questions_request, render_recording

MAX_QUESTIONS = 10
"""Questions per document at most (write-time HyDE); question point ids are numbered below it."""
CACHE_FORMAT = 1  # bump when the cache line layout changes: old files are then ignored, not misread
_BULLET = re.compile(r"^\s*(?:[-*•–—]+|\d{1,2}[.)]|[(]\d{1,2}[)])\s*")
_MIN_CHARS = 8
_MAX_CHARS = 300


def parse_questions(text: str, k: int) -> list[str]:
    """One question per line: strip numbering and bullets, drop short lines and duplicates, keep ``k``."""
    found: list[str] = []
    seen: set[str] = set()
    for line in text.splitlines():
        q = " ".join(_BULLET.sub("", line).split()).strip("\"'«» ")
        if len(q) < _MIN_CHARS or len(q) > _MAX_CHARS:
            continue
        fingerprint = q.lower().rstrip("?!. ")
        if fingerprint in seen:
            continue
        seen.add(fingerprint)
        found.append(q)
        if len(found) == k:
            break
    return found


def question_cache_key(model: str, prompt_ref: str, doc_hash: str, k: int) -> str:
    blob = json.dumps([model, prompt_ref, doc_hash, k], ensure_ascii=False)
    return hashlib.sha256(blob.encode("utf-8")).hexdigest()


class QuestionCache:
    """Append-only JSONL file ``questions.v<FORMAT>.jsonl``: readable, diffable derived data.

    Later lines win, so a regenerated document simply appends a new line.
    """

    def __init__(self, path: Path) -> None:
        self.path = Path(path)
        self._lock = threading.Lock()
        self._data: dict[str, list[str]] = {}
        if self.path.is_file():
            for line in self.path.read_text(encoding="utf-8", errors="replace").splitlines():
                with contextlib.suppress(ValueError, KeyError, TypeError):  # a torn last line is skipped
                    row = json.loads(line)
                    self._data[row["key"]] = [str(q) for q in row["questions"]]

    @classmethod
    def in_data_dir(cls, data_dir: Path) -> QuestionCache:
        return cls(Path(data_dir) / "cache" / f"questions.v{CACHE_FORMAT}.jsonl")

    def __len__(self) -> int:
        return len(self._data)

    def get(self, key: str) -> list[str] | None:
        with self._lock:
            return self._data.get(key)

    def set(self, key: str, questions: list[str], **meta: Any) -> None:
        row = {"key": key, **meta, "questions": questions}
        with self._lock:
            self._data[key] = questions
            self.path.parent.mkdir(parents=True, exist_ok=True)
            with self.path.open("a", encoding="utf-8") as fh:
                fh.write(json.dumps(row, ensure_ascii=False) + "\n")


@dataclass(frozen=True, slots=True)
class DocumentQuestions:
    """The questions for one document, or why there are none."""

    doc_id: str
    questions: list[str] = field(default_factory=list)
    cached: bool = False
    failure: str | None = None  # llm_error: ... | timeout | empty


@dataclass(slots=True)
class QuestionRun:
    """What one generation pass did (part of the ingest report)."""

    results: dict[str, DocumentQuestions] = field(default_factory=dict)
    seconds: float = 0.0

    @property
    def generated(self) -> int:
        return sum(1 for r in self.results.values() if r.questions and not r.cached)

    @property
    def cached(self) -> int:
        return sum(1 for r in self.results.values() if r.cached)

    @property
    def failed(self) -> list[DocumentQuestions]:
        return [r for r in self.results.values() if r.failure]


class QuestionGenerator(PromptedGenerator):
    """Writes K learner questions per document through pydantic-ai model requests (:class:`~hyde_tutor.llm.TextCall`); concurrent, cached, never raises."""

    def __init__(
        self,
        model: Any,
        model_name: str,
        *,
        cache: QuestionCache | None = None,
        settings: QuestionSettings | None = None,
        llm: LLMSettings | None = None,
        prompt: Prompt | None = None,
        request: Prompt | None = None,
        options: CallOptions | None = None,
    ) -> None:
        self.settings = settings or QuestionSettings()
        super().__init__(model, model_name, prompt or load_prompt("questions"), request or load_prompt("questions_request"),
                         llm=llm, max_tokens=self.settings.max_tokens, options=options)
        self.cache = cache
        self.max_concurrency = self.gate_size or self.settings.concurrency
        """Generations in flight at once: the backend's gate (the embedded server: one request at a time for
        every caller), else a gate of this size per run."""

    @classmethod
    def for_backend(cls, backend: LLMBackend, settings: Settings, *, cache: QuestionCache | None = None) -> QuestionGenerator:
        """A generator on ``backend`` with its model settings, concurrency gate and streaming."""
        return cls(backend.model, backend.name, cache=cache, settings=settings.questions, llm=settings.llm,
                   options=backend.call_options)

    def shown_text(self, document: Document) -> str:
        """The part of the document the model sees (a small local model reads slowly: keep the head)."""
        text = document.text
        if len(text) > self.settings.max_document_chars:
            text = text[: self.settings.max_document_chars].rsplit(" ", 1)[0] + " …"
        return text

    def user_prompt(self, document: Document, k: int) -> str:
        return render_questions_request(self.request, self.shown_text(document), k)

    def key(self, document: Document, k: int) -> str:
        return question_cache_key(self.model_name, self.prompt_ref, document.content_hash, k)

    async def generate(
        self, documents: Sequence[Document], k: int | None = None, *, regenerate: bool = False, progress: bool = False,
    ) -> QuestionRun:
        """Questions for every document (cache first unless ``regenerate``); failures are recorded, not raised."""
        k = max(1, min(k or self.settings.k, MAX_QUESTIONS))
        run = QuestionRun()
        started = time.perf_counter()
        gate = self.call.options.gate() or asyncio.Semaphore(self.max_concurrency)
        with tqdm(total=len(documents), desc="questions", unit="doc", disable=not progress) as bar:

            async def one(doc: Document) -> None:
                run.results[doc.id] = await self._one(doc, k, regenerate, gate)
                bar.update(1)

            await asyncio.gather(*(one(d) for d in documents))
        run.seconds = time.perf_counter() - started
        return run

    async def _one(self, doc: Document, k: int, regenerate: bool, gate: asyncio.Semaphore) -> DocumentQuestions:
        key = self.key(doc, k)
        if self.cache is not None and not regenerate:
            cached = self.cache.get(key)
            if cached:
                return DocumentQuestions(doc.id, cached, cached=True)
        out = await generate_text(self.call, self.user_prompt(doc, k), timeout_s=self.settings.timeout_s,
                                  gate=gate)
        if out.failure is not None:
            return DocumentQuestions(doc.id, failure=f"llm_error: {out.error}" if out.error else out.failure)
        questions = parse_questions(out.text or "", k)
        if not questions:
            return DocumentQuestions(doc.id, failure="empty")
        if self.cache is not None:
            await asyncio.to_thread(self.cache.set, key, questions, model=self.model_name, prompt=self.prompt_ref,
                                    doc_id=doc.id, doc_hash=doc.content_hash, k=k)  # a file write: off the loop
        return DocumentQuestions(doc.id, questions)


def question_generator_from_settings(settings: Settings) -> tuple[QuestionGenerator, Callable[[], None]]:
    """A generator on the configured LLM backend (the embedded model starts here) and its closer."""
    backend = make_llm(settings, render=render_recording)
    return QuestionGenerator.for_backend(backend, settings, cache=QuestionCache.in_data_dir(settings.data_dir)), backend.close
