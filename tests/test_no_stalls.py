"""No stalls: the LLM backend starts off the event loop, the whole generation is bounded by the timeout,
and a failed start is remembered (backoff) instead of being retried on every query."""

from __future__ import annotations

import asyncio
import threading
import time

import pytest

from hyde_tutor.config import HydeSettings
from hyde_tutor.hyde import HydeRetriever


from hyde_tutor.evaluation.load import max_loop_stall as _max_stall  # noqa: E402 - one ticker for tests and the drill


async def test_a_backend_that_fails_to_start_never_blocks_the_loop(retriever) -> None:
    starts: list[int] = []
    loop_thread = threading.get_ident()

    def failing_backend(domain):
        starts.append(threading.get_ident())
        time.sleep(1.5)  # a local server that takes its time and then dies
        raise RuntimeError("llama_cpp.server exited with code 1")

    hr = HydeRetriever(retriever, failing_backend, HydeSettings(timeout_s=0.5, n_hypotheses=1))
    done = asyncio.Event()
    ticker = asyncio.create_task(_max_stall(done))
    t0 = time.perf_counter()
    first = await asyncio.gather(*(hr.search("grammar", q, top_k=2, use_hyde=True) for q in ("хочу", "но", "мочь")))
    elapsed = time.perf_counter() - t0
    await asyncio.sleep(1.3)  # let the start attempt finish failing in its thread
    later = await hr.search("grammar", "хотеть", top_k=2, use_hyde=True)
    done.set()
    stall = await ticker

    assert starts and loop_thread not in starts  # started in a worker thread
    assert len(starts) == 1  # three concurrent searches, one start attempt
    assert elapsed < 1.2  # bounded by timeout_s (0.5 s), not by the 1.5 s start
    assert all(r.fallback_reason in ("timeout", "llm_error") and r.results for r in first)
    assert later.fallback_reason == "llm_error" and "next try in" in later.errors[0]  # remembered: no new start
    assert len(starts) == 1
    print(f"backend-start drill: 3 concurrent searches in {elapsed * 1000:.0f} ms, max event-loop stall {stall * 1000:.1f} ms")
    assert stall < 0.3, f"event loop blocked for {stall * 1000:.0f} ms"  # the old code blocked for the whole start


async def test_a_failed_start_is_retried_after_the_backoff(retriever, monkeypatch: pytest.MonkeyPatch) -> None:
    import hyde_tutor.hyde.generators as hyde_module

    calls: list[float] = []

    def flaky(domain):
        calls.append(time.monotonic())
        raise ConnectionError("refused")

    now = [1000.0]
    monkeypatch.setattr(hyde_module.time, "monotonic", lambda: now[0])
    hr = HydeRetriever(retriever, flaky, HydeSettings(timeout_s=2, n_hypotheses=1))
    for _ in range(3):
        assert (await hr.search("grammar", "хочу", top_k=2, use_hyde=True)).fallback_reason == "llm_error"
    assert len(calls) == 1
    now[0] += 5.1  # first backoff: 5 s
    await hr.search("grammar", "хочу", top_k=2, use_hyde=True)
    assert len(calls) == 2
    now[0] += 5.1  # second backoff: 10 s, not over yet
    await hr.search("grammar", "хочу", top_k=2, use_hyde=True)
    assert len(calls) == 2
