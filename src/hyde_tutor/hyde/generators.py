"""Hypothesis generators per domain, built on first use, with the LLM backend's start off the event loop."""

from __future__ import annotations

import asyncio
import concurrent.futures
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass

from .hypotheses import Domain, GenerationResult, HypothesisGenerator
from ..telemetry import logfire

GeneratorFactory = Callable[[Domain], HypothesisGenerator]


@dataclass(frozen=True, slots=True)
class BackendFailure:
    """The LLM backend failed to start: how often, when to try again, and why."""

    attempts: int
    retry_at: float
    message: str


class GeneratorPool:
    """One :class:`HypothesisGenerator` per domain, made by ``factory`` on first use.

    The factory may start the LLM backend, which can block for seconds, so searches wait for it on a
    dedicated thread (one start per domain, shared by concurrent searches). A failed start is
    remembered: until its backoff (5 s, doubling to 5 min) has passed, further calls fail at once with
    :class:`~hyde_tutor.llm.LLMUnavailableError` instead of trying again.
    """

    def __init__(self, factory: GeneratorFactory) -> None:
        self._factory = factory
        self._generators: dict[Domain, HypothesisGenerator] = {}
        self._build_lock = threading.Lock()
        self._inflight_lock = threading.Lock()
        self._inflight: dict[Domain, concurrent.futures.Future[HypothesisGenerator]] = {}
        self._builder: concurrent.futures.ThreadPoolExecutor | None = None
        self._failure: BackendFailure | None = None
        self._closed = False
        self.closers: list[Callable[[], None]] = []
        """Called by :meth:`close` (and after a start that finished once closed): the backend's closer."""

    def get(self, domain: Domain) -> HypothesisGenerator:
        """The domain's generator, built now if needed (blocking: call it off the event loop)."""
        if domain in self._generators:
            return self._generators[domain]
        with self._build_lock:
            if domain in self._generators:
                return self._generators[domain]
            failure = self._failure
            if failure is not None and time.monotonic() < failure.retry_at:
                from ..llm.backends import LLMUnavailableError

                raise LLMUnavailableError(
                    f"The LLM backend failed to start ({failure.attempts}x, last: {failure.message}); "
                    f"next try in {failure.retry_at - time.monotonic():.0f} s."
                )
            try:
                self._generators[domain] = self._factory(domain)
            except Exception as exc:
                attempts = failure.attempts + 1 if failure else 1
                self._failure = BackendFailure(
                    attempts, time.monotonic() + min(300.0, 5.0 * 2 ** (attempts - 1)), f"{type(exc).__name__}: {exc}"[:200]
                )
                raise
            self._failure = None
            if self._closed:  # close() ran while the backend was starting: do not leave it running
                self._run_closers()
            return self._generators[domain]

    async def generate(self, domain: Domain, text: str, n: int, timeout_s: float, *,
                       one_call: bool = False, history: tuple[tuple[str, str], ...] = ()) -> GenerationResult:
        """Start the backend if needed and write ``n`` hypotheses (``one_call``: in one LLM call), the start
        and each call within ``timeout_s`` (read per search); a slow start, a hung call or a failing
        backend comes back as a :class:`GenerationResult` with the reason."""
        started = time.perf_counter()
        try:
            with logfire.span("hyde.generate", n=n):
                if domain in self._generators:
                    generator = self._generators[domain]
                else:
                    build = asyncio.wrap_future(self._build_in_background(domain))
                    generator = await asyncio.wait_for(asyncio.shield(build), timeout_s)
                # each call bounded by timeout_s; partial results kept
                return await generator.generate(text, n, timeout_s, one_call=one_call, history=history)
        except (asyncio.TimeoutError, TimeoutError):
            return GenerationResult(timeouts=1, seconds=time.perf_counter() - started)
        except Exception as exc:  # noqa: BLE001 - e.g. the LLM backend could not start
            return GenerationResult(errors=[f"{type(exc).__name__}: {exc}"[:300]], seconds=time.perf_counter() - started)

    def _build_in_background(self, domain: Domain) -> concurrent.futures.Future[HypothesisGenerator]:
        with self._inflight_lock:
            future = self._inflight.get(domain)
            if future is None or future.done():
                if self._builder is None:
                    self._builder = concurrent.futures.ThreadPoolExecutor(1, thread_name_prefix="hyde-llm-start")
                future = self._builder.submit(self.get, domain)
                self._inflight[domain] = future
            return future

    def _run_closers(self) -> None:
        for close in self.closers:
            close()

    def close(self) -> None:
        """Stop the start thread and close the backend (a start still running closes it when it ends)."""
        self._closed = True
        if self._builder is not None:
            self._builder.shutdown(wait=False, cancel_futures=True)
        self._run_closers()
