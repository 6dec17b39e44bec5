"""Domain hypothesis generators: N concurrent pydantic-ai calls, normalised, deduplicated, cached.

A hypothesis is an answer-shaped passage in the corpus's own shape (a grammar entry, or a
teaching text). It may be factually wrong; only its shape and vocabulary matter.
"""

from __future__ import annotations

import asyncio
import sqlite3
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any, Literal

from ..config import HydeSettings, LLMSettings
from ..errors import HydeTutorError
from .cache import HypothesisCache, MemoryCache, cache_key
from .domains import (DOMAINS, HANGUL, Domain, DomainProfile, echoes_query, normalise_length, split_sections,
                      strip_prompt_echo)
from ..llm.generation import CallOptions, Generation, PromptedGenerator, TokenUsage, generate_text
from ..llm.backends import LLMBackend
from ..llm.prompts import Perspective, Prompt, load_prompt, parse_perspectives
from ..llm.recordings import request_sha256
from .requests import render_followup_request, render_hypothesis_request, render_multi_request
from .conversation import render_conversation

MAX_HYPOTHESES = 8
DEFAULT_HYPOTHESES = 1  # HydePolicy's default: chosen on recorded quality per LLM call


# -- results --------------------------------------------------------------------------------------

HypothesisSource = Literal["llm", "agent"]


@dataclass(frozen=True, slots=True)
class Hypothesis:
    text: str
    perspective: str
    cached: bool = False
    source: HypothesisSource = "llm"
    """``llm``: written by the hypothesis generator; ``agent``: by the calling agent in its tool call."""


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
    missing: int = 0
    """One-call mode: perspectives the reply had no section for."""
    extra: int = 0
    """One-call mode: sections beyond the N asked for (dropped)."""
    usage: TokenUsage = field(default_factory=TokenUsage)
    seconds: float = 0.0

    def count_failure(self, out: Generation, label: str) -> bool:
        """Count a failed call (timeout, not recorded, LLM error labelled ``label``); False if it succeeded."""
        if out.failure == "timeout":
            self.timeouts += 1
        elif out.failure == "not_recorded":
            self.not_recorded += 1
        elif out.failure == "llm_error":
            self.errors.append(f"{label}: {out.error}")
        return out.failure is not None

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


# -- the guard every hypothesis passes ---------------------------------------------------------------

@dataclass(frozen=True, slots=True)
class Shaped:
    """A hypothesis after the guard: its normalised text, or why it was rejected."""

    text: str
    rejected: str | None = None
    """``empty``, ``no_korean`` (a Korean domain's passage always carries Korean) or ``echo`` (the query again)."""
    echoed: int = 0
    """Segments removed because they copied the prompt."""


def min_hangul(profile: DomainProfile, hyde: HydeSettings) -> int:
    return profile.min_hangul_chars if hyde.min_hangul_chars is None else hyde.min_hangul_chars


def shape_hypothesis(text: str, profile: DomainProfile, hyde: HydeSettings, prompt_texts: tuple[str, ...] = (),
                     query: str | None = None) -> Shaped:
    """The guard and normalisation shared by generated and agent-written hypotheses: prompt echoes
    removed, length normalised, then rejected when empty, without Korean in a Korean domain, or (with
    ``query``) a near copy of the query."""
    echoed = 0
    if hyde.strip_prompt_echo and prompt_texts:
        text, echoed = strip_prompt_echo(text, prompt_texts)
    text = normalise_length(text, hyde.hypothesis_length, hyde.exact_length)
    if not text.strip():
        return Shaped(text, "empty", echoed)
    if len(HANGUL.findall(text)) < min_hangul(profile, hyde):
        return Shaped(text, "no_korean", echoed)
    if query is not None and echoes_query(text, query):
        return Shaped(text, "echo", echoed)
    return Shaped(text, None, echoed)


# -- generator ------------------------------------------------------------------------------------

@dataclass(frozen=True, slots=True, kw_only=True)
class HypothesisPrompts:
    """Prompts that replace a domain's own files in one :class:`HypothesisGenerator` (the notebook's prompt
    variants); None keeps the domain's."""

    system: Prompt | None = None
    """The system prompt (the domain's ``hypothesis_*`` file)."""
    request: Prompt | None = None
    """The request template the query is written into."""
    perspectives: list[Perspective] | None = None
    """The perspectives, in order (the domain's ``perspectives*`` file, parsed)."""


class HypothesisGenerator(PromptedGenerator):
    """Writes N hypotheses for a query concurrently, one per perspective, through one pydantic-ai model request each (:class:`~hyde_tutor.llm.TextCall`)."""

    def __init__(
        self,
        model: Any,
        model_name: str,
        domain: Domain,
        *,
        prompts: HypothesisPrompts | None = None,
        cache: HypothesisCache | None = None,
        hyde: HydeSettings | None = None,
        llm: LLMSettings | None = None,
        options: CallOptions | None = None,
    ) -> None:
        if domain not in DOMAINS:
            raise HydeTutorError(f"Unknown HyDE domain {domain!r}; choose one of {', '.join(DOMAINS)}.")
        self.domain = domain
        self.profile = DOMAINS[domain]
        llm = llm or LLMSettings()
        prompts = prompts or HypothesisPrompts()
        # ``options``: how the backend is called (CallOptions): a single-slot backend (the embedded llama.cpp
        # server) has ONE gate for every caller, waited at outside the timeout, streaming and offline counting
        super().__init__(model, model_name, prompts.system or load_prompt(self.profile.prompt),
                         prompts.request or load_prompt(self.profile.request), llm=llm, max_tokens=llm.max_tokens,
                         options=options)
        self.perspectives_prompt = load_prompt(self.profile.perspectives)
        self.perspectives = prompts.perspectives or parse_perspectives(self.perspectives_prompt.text)
        self.cache = cache or MemoryCache()
        self.hyde = hyde or HydeSettings()
        self.min_hangul_chars = min_hangul(self.profile, self.hyde)
        self.max_tokens = llm.max_tokens
        self._multi_request: Prompt | None = None
        self._followup_request: Prompt | None = None

    @property
    def max_concurrency(self) -> int | None:
        """Generations in flight at once: the backend gate's size, or None (no gate)."""
        return self.gate_size

    @classmethod
    def for_backend(cls, backend: LLMBackend, domain: Domain, *, hyde: HydeSettings, llm: LLMSettings,
                    cache: HypothesisCache | None = None) -> HypothesisGenerator:
        """A generator on ``backend`` with what that backend needs: its model settings (the token budget in
        the body), its concurrency gate (the single-slot embedded server) and streaming."""
        return cls(backend.model, backend.name, domain, cache=cache, hyde=hyde, llm=llm, options=backend.call_options)

    @property
    def prompt_refs(self) -> tuple[str, str, str]:
        """System prompt, request template and perspectives file (``name@vN``), as recordings name them."""
        return (self.prompt.ref, self.request.ref, self.perspectives_prompt.ref)

    def user_prompt(self, query: str, perspective: Perspective, conversation: str = "") -> str:
        """The request template (``prompts/hypothesis_request.v<N>.md``) filled with query and perspective;
        for a follow-up (``conversation``), the follow-up template with the recent conversation."""
        if conversation:
            if self._followup_request is None:
                self._followup_request = load_prompt(self.profile.followup_request,
                                                     version=self.hyde.followup_request_version)
            return render_followup_request(self._followup_request, conversation, query, perspective.instruction)
        return render_hypothesis_request(self.request, query, perspective.instruction)

    @property
    def multi_request(self) -> Prompt:
        """The one-call request template (``prompts/<profile.multi_request>.v<N>.md``), loaded on first use."""
        if self._multi_request is None:
            self._multi_request = load_prompt(self.profile.multi_request)
        return self._multi_request

    def multi_user_prompt(self, query: str, perspectives: list[Perspective]) -> str:
        """The one-call user message: the query and the N perspectives as a numbered list."""
        return render_multi_request(self.multi_request, query, [p.instruction for p in perspectives])

    async def generate(self, query: str, n: int | None = None, timeout_s: float | None = None, *,
                       one_call: bool = False, history: Sequence[tuple[str, str]] = ()) -> GenerationResult:
        """Generate up to ``n`` hypotheses, concurrently (one call each) or, with ``one_call``, in ONE call
        that returns all of them; with ``history`` (a follow-up), each request shows the recent conversation
        (separate calls). Never raises for model failures."""
        n = max(1, min(n or self.hyde.n_hypotheses or DEFAULT_HYPOTHESES, MAX_HYPOTHESES, len(self.perspectives)))
        timeout = timeout_s if timeout_s is not None else self.hyde.timeout_s
        conversation = render_conversation(history) if history else ""
        if one_call and n > 1 and not conversation:
            return await self._generate_one_call(query, n, timeout)
        started = time.perf_counter()
        outcomes = await asyncio.gather(*(self._one(query, p, timeout, conversation) for p in self.perspectives[:n]))
        result = GenerationResult(seconds=time.perf_counter() - started)
        seen: set[str] = set()
        for perspective, (out, cached) in zip(self.perspectives[:n], outcomes, strict=True):
            result.usage.add(out.usage)
            if not result.count_failure(out, perspective.name):
                self._keep(out.text or "", perspective.name, cached, result, seen)
        return result

    async def _generate_one_call(self, query: str, n: int, timeout: float) -> GenerationResult:
        """N hypotheses from ONE call: the system prompt is sent once and the reply holds N sections
        (``### 1`` ...); a reply with fewer keeps what it has, one with more drops the surplus."""
        started = time.perf_counter()
        perspectives = self.perspectives[:n]
        user = self.multi_user_prompt(query, perspectives)
        names = "+".join(p.name for p in perspectives)
        key = cache_key(self.model_name, request_sha256(self.prompt.text, user), query, names)
        reply = await self._cache_get(key)
        cached = reply is not None
        out = Generation(reply) if cached else await generate_text(
            self.call, user, timeout_s=timeout, max_tokens=self.max_tokens * n)
        result = GenerationResult(usage=out.usage)
        if not result.count_failure(out, names) and out.text is not None:
            if not cached and out.text.strip():
                await self._cache_set(key, out.text)
            sections = split_sections(out.text, n)
            result.missing, result.extra = sections.missing, sections.extra
            seen: set[str] = set()
            for perspective, text in zip(perspectives, sections.texts, strict=True):
                if text:
                    self._keep(text, perspective.name, cached, result, seen)
        result.seconds = time.perf_counter() - started
        return result

    def _keep(self, text: str, perspective: str, cached: bool, result: GenerationResult, seen: set[str]) -> None:
        shaped = shape_hypothesis(text, self.profile, self.hyde, (self.prompt.text, self.request.text))
        result.echoed_segments += shaped.echoed
        fingerprint = " ".join(shaped.text.lower().split())
        if shaped.rejected == "empty":
            result.empty += 1
        elif shaped.rejected is not None:
            result.rejected += 1  # wrong shape: a corpus passage always carries Korean examples
        elif fingerprint in seen:
            result.duplicates += 1
        else:
            seen.add(fingerprint)
            result.hypotheses.append(Hypothesis(shaped.text, perspective, cached))

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

    async def _one(self, query: str, perspective: Perspective, timeout: float,
                   conversation: str = "") -> tuple[Generation, bool]:
        """One hypothesis: from the cache, else one gated, timed call (cached when it wrote something)."""
        # keyed by the exact request (system prompt + user message: every prompt file's text, the
        # perspective's wording, the query), so an edited prompt never gets another prompt's hypotheses
        user = self.user_prompt(query, perspective, conversation)
        key = cache_key(self.model_name, request_sha256(self.prompt.text, user), query, perspective.name)
        cached = await self._cache_get(key)
        if cached is not None:
            return Generation(cached), True
        out = await generate_text(self.call, user, timeout_s=timeout)
        if out.text and out.text.strip():
            await self._cache_set(key, out.text)
        return out, False
