"""Domain hypothesis generators: N concurrent pydantic-ai calls, normalised, deduplicated, cached.

A hypothesis is an answer-shaped passage in the corpus's own shape (a grammar entry, or a
teaching text). It may be factually wrong; only its shape and vocabulary matter.
"""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
import json
import re
import sqlite3
import threading
import time
from collections import OrderedDict
from dataclasses import dataclass, field
from pathlib import Path
from collections.abc import Sequence
from typing import Any, Literal, Protocol

from pydantic_ai.exceptions import UnexpectedModelBehavior

from .config import HydeSettings, LLMSettings
from .errors import HydeTutorError
from .llm import LLMBackend, agent_model_settings, run_text
from .prompts import Perspective, Prompt, load_prompt, parse_perspectives
from .recordings import NotRecordedError, render_hypothesis_request, request_sha256

Domain = Literal["grammar", "docs", "passage"]


@dataclass(frozen=True, slots=True, kw_only=True)
class DomainProfile:
    """What a collection's domain decides about its hypotheses: which prompt files write them and
    which guard checks their shape. ``grammar`` and ``docs`` are the Korean tutor's corpora (a passage
    there always carries Korean examples); ``passage`` is the HyDE paper's generic "write a passage
    that answers the question", for any other collection, with no language guard."""

    name: Domain
    prompt: str
    """System prompt file name (``prompts/<prompt>.v<N>.md``)."""
    request: str
    """User message template with ``{query}`` and ``{perspective}``."""
    perspectives: str
    """Perspectives file: one ``## name`` section each; N hypotheses use the first N."""
    min_hangul_chars: int
    """Drop a hypothesis with fewer Hangul characters (``HYDE_HYDE__MIN_HANGUL_CHARS`` overrides)."""


DOMAINS: dict[str, DomainProfile] = {
    "grammar": DomainProfile(name="grammar", prompt="hypothesis_grammar", request="hypothesis_request",
                             perspectives="perspectives", min_hangul_chars=4),
    "docs": DomainProfile(name="docs", prompt="hypothesis_docs", request="hypothesis_request",
                          perspectives="perspectives", min_hangul_chars=4),
    "passage": DomainProfile(name="passage", prompt="hypothesis_passage", request="hypothesis_passage_request",
                             perspectives="perspectives_passage", min_hangul_chars=0),
}
PROMPT_NAMES: dict[str, str] = {name: d.prompt for name, d in DOMAINS.items()}
MAX_HYPOTHESES = 8
DEFAULT_HYPOTHESES = 4  # chosen on recorded capable-model hypotheses (see HydePolicy)
_HANGUL = re.compile("[가-힣]")


def normalise_length(text: str, length: int, exact: bool = False) -> str:
    """Collapse whitespace; cut to at most ``length`` chars on a word boundary; pad with spaces if ``exact``."""
    flat = " ".join(text.split())
    if len(flat) > length:
        head = flat[: length + 1]
        cut = head.rfind(" ")
        flat = (flat[:cut] if cut > 0 else flat[:length]).rstrip()
    return flat.ljust(length) if exact else flat


_SEGMENT_END = re.compile(r"(?<=[.!?…])\s+|\n+|\s+(?=[—–]\s)")
_NON_WORD = re.compile(r"[^\w]+")


def _flat(text: str) -> str:
    """Lower case, punctuation and whitespace collapsed to single spaces: the form echoes are compared in."""
    return " ".join(_NON_WORD.sub(" ", text.lower()).split())


def strip_prompt_echo(text: str, prompt_texts: Sequence[str], min_words: int = 3) -> tuple[str, int]:
    """Drop the sentences and lines of ``text`` that copy the prompt; return the rest and how many were dropped.

    Small models often copy the prompt's sample entry (its Korean examples included) instead of writing
    one about the learner's question. Those copies pull every query towards the sample's topic, so a
    segment of at least ``min_words`` words found verbatim (ignoring case and punctuation) in a prompt
    is removed. Short labels such as "Пример:" are kept.
    """
    haystack = " " + " ".join(_flat(p) for p in prompt_texts) + " "
    kept: list[str] = []
    dropped = 0
    for segment in _SEGMENT_END.split(text):
        flat = _flat(segment)
        if len(flat.split()) >= min_words and f" {flat} " in haystack:
            dropped += 1
        else:
            kept.append(segment)
    return (" ".join(kept) if dropped else text), dropped


# -- cache ----------------------------------------------------------------------------------------

class HypothesisCache(Protocol):
    def get(self, key: str) -> str | None: ...

    def set(self, key: str, value: str) -> None: ...


def cache_key(model: str, prompt_ref: str, query: str, perspective: str) -> str:
    blob = json.dumps([model, prompt_ref, query.strip(), perspective], ensure_ascii=False)
    return hashlib.sha256(blob.encode("utf-8")).hexdigest()


class MemoryCache:
    """Bounded LRU in memory; thread-safe."""

    def __init__(self, max_entries: int = 10_000) -> None:
        self._data: OrderedDict[str, str] = OrderedDict()
        self._lock = threading.Lock()
        self.max_entries = max_entries

    def get(self, key: str) -> str | None:
        with self._lock:
            if key in self._data:
                self._data.move_to_end(key)
                return self._data[key]
            return None

    def set(self, key: str, value: str) -> None:
        with self._lock:
            self._data[key] = value
            self._data.move_to_end(key)
            while len(self._data) > self.max_entries:
                self._data.popitem(last=False)


class DiskCache:
    """SQLite file cache (survives restarts: evaluation re-runs cost no LLM calls).

    Its calls touch the disk, so the generator makes them in a worker thread (``blocking``)."""

    blocking = True

    def __init__(self, path: Path) -> None:
        path.parent.mkdir(parents=True, exist_ok=True)
        self._lock = threading.Lock()
        self._db = sqlite3.connect(str(path), check_same_thread=False, timeout=30)
        self._db.execute("CREATE TABLE IF NOT EXISTS hypotheses (key TEXT PRIMARY KEY, text TEXT NOT NULL)")
        self._db.commit()

    def get(self, key: str) -> str | None:
        with self._lock:
            row = self._db.execute("SELECT text FROM hypotheses WHERE key = ?", (key,)).fetchone()
        return row[0] if row else None

    def set(self, key: str, value: str) -> None:
        with self._lock:
            self._db.execute("INSERT OR REPLACE INTO hypotheses (key, text) VALUES (?, ?)", (key, value))
            self._db.commit()


class NoCache:
    def get(self, key: str) -> str | None:
        return None

    def set(self, key: str, value: str) -> None:
        return None


def make_cache(kind: str, data_dir: Path) -> HypothesisCache:
    if kind == "disk":
        return DiskCache(data_dir / "cache" / "hypotheses.sqlite")
    if kind == "off":
        return NoCache()
    return MemoryCache()


# -- results --------------------------------------------------------------------------------------

@dataclass(frozen=True, slots=True)
class Hypothesis:
    text: str
    perspective: str
    cached: bool = False


@dataclass(slots=True)
class TokenUsage:
    requests: int = 0
    input_tokens: int = 0
    output_tokens: int = 0

    def add(self, other: TokenUsage) -> None:
        self.requests += other.requests
        self.input_tokens += other.input_tokens
        self.output_tokens += other.output_tokens


@dataclass(slots=True)
class GenerationResult:
    """Hypotheses that survived, plus what went wrong with the others."""

    hypotheses: list[Hypothesis] = field(default_factory=list)
    errors: list[str] = field(default_factory=list)
    timeouts: int = 0
    not_recorded: int = 0
    empty: int = 0
    duplicates: int = 0
    rejected: int = 0
    echoed_segments: int = 0
    usage: TokenUsage = field(default_factory=TokenUsage)
    seconds: float = 0.0

    @property
    def failure_reason(self) -> str | None:
        """``timeout`` / ``llm_error`` / ``empty_hypotheses`` when nothing usable came back, else None."""
        if self.hypotheses:
            return None
        if self.timeouts:
            return "timeout"
        if self.errors:
            return "llm_error"
        if self.not_recorded:
            return "not_recorded"
        return "empty_hypotheses"


@dataclass(frozen=True, slots=True)
class _Outcome:
    perspective: str
    text: str | None = None
    cached: bool = False
    error: str | None = None
    timed_out: bool = False
    not_recorded: bool = False
    usage: TokenUsage = field(default_factory=TokenUsage)


# -- generator ------------------------------------------------------------------------------------

class HypothesisGenerator:
    """Writes N hypotheses for a query concurrently, one per perspective, through a pydantic-ai agent."""

    def __init__(
        self,
        model: Any,
        model_name: str,
        domain: Domain,
        *,
        prompt: Prompt | None = None,
        request: Prompt | None = None,
        perspectives: list[Perspective] | None = None,
        cache: HypothesisCache | None = None,
        hyde: HydeSettings | None = None,
        llm: LLMSettings | None = None,
        extra_settings: dict[str, Any] | None = None,
        max_concurrency: int | None = None,
        stream: bool = False,
    ) -> None:
        from pydantic_ai import Agent
        from pydantic_ai.settings import ModelSettings

        if domain not in DOMAINS:
            raise HydeTutorError(f"Unknown HyDE domain {domain!r}; choose one of {', '.join(DOMAINS)}.")
        self.domain = domain
        self.profile = DOMAINS[domain]
        self.model_name = model_name
        self.prompt = prompt or load_prompt(self.profile.prompt)
        self.request = request or load_prompt(self.profile.request)
        self.perspectives_prompt = load_prompt(self.profile.perspectives)
        self.perspectives = perspectives or parse_perspectives(self.perspectives_prompt.text)
        self.cache = cache or MemoryCache()
        self.hyde = hyde or HydeSettings()
        self.min_hangul_chars = (self.profile.min_hangul_chars if self.hyde.min_hangul_chars is None
                                 else self.hyde.min_hangul_chars)
        llm = llm or LLMSettings()
        settings = agent_model_settings(llm, llm.max_tokens, extra_settings)
        # A single-slot backend (the embedded llama.cpp server) serves one request at a time: queue here,
        # so the timeout measures the model's work and not the wait in the server's queue.
        self.max_concurrency = max_concurrency
        self.stream = stream  # see llm.run_text: lets a timeout stop the embedded server's generation
        self._gates: dict[int, asyncio.Semaphore] = {}
        self.agent = Agent(model, instructions=self.prompt.text, output_type=str, retries=0,
                           model_settings=ModelSettings(**settings))  # type: ignore[typeddict-item]

    @classmethod
    def for_backend(cls, backend: LLMBackend, domain: Domain, *, hyde: HydeSettings, llm: LLMSettings,
                    cache: HypothesisCache | None = None) -> HypothesisGenerator:
        """A generator on ``backend`` with what that backend needs: its model settings (the token budget in
        the body), its concurrency gate (the single-slot embedded server) and streaming."""
        return cls(backend.model, backend.name, domain, cache=cache, hyde=hyde, llm=llm,
                   extra_settings=backend.extra_settings, max_concurrency=backend.max_concurrency, stream=backend.stream)

    @property
    def prompt_ref(self) -> str:
        """Both prompt files and their versions: part of every cache key."""
        return f"{self.prompt.ref}+{self.request.ref}"

    @property
    def prompt_refs(self) -> tuple[str, str, str]:
        """System prompt, request template and perspectives file (``name@vN``), as recordings name them."""
        return (self.prompt.ref, self.request.ref, self.perspectives_prompt.ref)

    def user_prompt(self, query: str, perspective: Perspective) -> str:
        """The request template (``prompts/hypothesis_request.v<N>.md``) filled with query and perspective."""
        return render_hypothesis_request(self.request, query, perspective.instruction)

    async def generate(self, query: str, n: int | None = None, timeout_s: float | None = None) -> GenerationResult:
        """Generate up to ``n`` hypotheses concurrently; never raises for model failures."""
        n = max(1, min(n or self.hyde.n_hypotheses or DEFAULT_HYPOTHESES, MAX_HYPOTHESES, len(self.perspectives)))
        timeout = timeout_s if timeout_s is not None else self.hyde.timeout_s
        started = time.perf_counter()
        outcomes = await asyncio.gather(*(self._one(query, p, timeout) for p in self.perspectives[:n]))
        result = GenerationResult(seconds=time.perf_counter() - started)
        seen: set[str] = set()
        for out in outcomes:
            result.usage.add(out.usage)
            if out.timed_out:
                result.timeouts += 1
            elif out.not_recorded:
                result.not_recorded += 1
            elif out.error is not None:
                result.errors.append(f"{out.perspective}: {out.error}")
            else:
                self._keep(out, result, seen)
        return result

    def _keep(self, out: _Outcome, result: GenerationResult, seen: set[str]) -> None:
        text = out.text or ""
        if self.hyde.strip_prompt_echo:
            text, dropped = strip_prompt_echo(text, (self.prompt.text, self.request.text))
            result.echoed_segments += dropped
        text = normalise_length(text, self.hyde.hypothesis_length, self.hyde.exact_length)
        fingerprint = " ".join(text.lower().split())
        if not fingerprint:
            result.empty += 1
        elif len(_HANGUL.findall(text)) < self.min_hangul_chars:
            result.rejected += 1  # wrong shape: a corpus passage always carries Korean examples
        elif fingerprint in seen:
            result.duplicates += 1
        else:
            seen.add(fingerprint)
            result.hypotheses.append(Hypothesis(text, out.perspective, out.cached))

    def _gate(self) -> Any:
        if not self.max_concurrency:
            return contextlib.nullcontext()
        loop_id = id(asyncio.get_running_loop())
        if loop_id not in self._gates:
            self._gates[loop_id] = asyncio.Semaphore(self.max_concurrency)
        return self._gates[loop_id]

    async def _cache_get(self, key: str) -> str | None:
        try:
            if getattr(self.cache, "blocking", False):
                return await asyncio.to_thread(self.cache.get, key)
            return self.cache.get(key)
        except (sqlite3.Error, OSError):  # a locked or broken cache is a miss, never a failed search
            return None

    async def _cache_set(self, key: str, value: str) -> None:
        try:
            if getattr(self.cache, "blocking", False):
                await asyncio.to_thread(self.cache.set, key, value)
            else:
                self.cache.set(key, value)
        except (sqlite3.Error, OSError):
            pass

    async def _one(self, query: str, perspective: Perspective, timeout: float) -> _Outcome:
        # keyed by the exact request (system prompt + user message: every prompt file's text, the
        # perspective's wording, the query), so an edited prompt never gets another prompt's hypotheses
        user = self.user_prompt(query, perspective)
        key = cache_key(self.model_name, request_sha256(self.prompt.text, user), query, perspective.name)
        cached = await self._cache_get(key)
        if cached is not None:
            return _Outcome(perspective.name, cached, cached=True)
        try:
            async with self._gate():
                run = await asyncio.wait_for(run_text(self.agent, user, stream=self.stream), timeout)
        except (asyncio.TimeoutError, TimeoutError):
            return _Outcome(perspective.name, timed_out=True)
        except UnexpectedModelBehavior:  # e.g. an empty completion: no usable text came back
            return _Outcome(perspective.name, text="")
        except NotRecordedError:  # the replay provider: counted apart from real LLM failures
            return _Outcome(perspective.name, not_recorded=True)
        except Exception as exc:  # noqa: BLE001 - any backend failure becomes a recorded reason
            return _Outcome(perspective.name, error=f"{type(exc).__name__}: {exc}"[:300])
        if run.text.strip():
            await self._cache_set(key, run.text)
        return _Outcome(perspective.name, run.text, usage=TokenUsage(run.requests, run.input_tokens, run.output_tokens))
