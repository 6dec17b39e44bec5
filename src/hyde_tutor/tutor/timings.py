"""Where a served turn's time goes: the server's own clock, stage by stage.

:class:`StageTimes` keeps the last few thousand durations of each stage of a served turn and summarises them
(count, mean, p50, p95, in milliseconds). The server fills it (``request``: reading and checking the body;
``load``: the stored conversation and the learner's arm; ``search``: the searches, from the turn's own
records; ``cards``: from the turn's start (its conversation loaded) to its first cards sent, the part of the
learner's wait for the cards that the server sees; ``run``: the agent run through the UI adapter, searches and store
calls included; ``reply``: the grounded reply and its checks; ``events``: the turn's records written to the event log; ``store read`` / ``store
write``: each call of the conversation store, wherever it is made (:class:`TimedConversationStore`);
``turn``: the whole turn, request to last chunk). The stages are
wall-clock: under load they include the wait for the event loop and the worker threads, which is what a learner
waits for. ``GET /api/operator/timings`` returns the summary (an operator token is needed).
"""

from __future__ import annotations

import time
from collections import deque
from collections.abc import Awaitable, Callable, Iterator, Sequence
from contextlib import contextmanager
from typing import Any

from pydantic_ai.conversation_store import ConversationEntry, ConversationRecord, ConversationStore

__all__ = ("STAGES", "ForwardingConversationStore", "StageTimes", "TimedConversationStore")

STAGES = ("request", "load", "search", "cards", "run", "reply", "events", "store read", "store write", "turn")


class StageTimes:
    """The last ``keep`` durations of each stage (thread-safe enough: a deque's append is atomic)."""

    def __init__(self, keep: int = 5000) -> None:
        if keep < 1:
            raise ValueError(f"keep must be at least 1, got {keep}")
        self.keep = keep
        self._samples: dict[str, deque[float]] = {}

    def add(self, stage: str, seconds: float) -> None:
        """One duration of ``stage``, in seconds."""
        samples = self._samples.get(stage)
        if samples is None:
            samples = self._samples.setdefault(stage, deque(maxlen=self.keep))
        samples.append(seconds)

    @contextmanager
    def time(self, stage: str) -> Iterator[None]:
        """Times the block as one duration of ``stage`` (also when it raises)."""
        started = time.perf_counter()
        try:
            yield
        finally:
            self.add(stage, time.perf_counter() - started)

    def clear(self) -> None:
        """Forget every duration (a drill's warm-up)."""
        self._samples.clear()

    def summary(self) -> dict[str, dict[str, float]]:
        """Per stage (in :data:`STAGES` order, then any other): ``n``, ``mean_ms``, ``p50_ms``, ``p95_ms``."""
        order = [s for s in STAGES if s in self._samples] + sorted(set(self._samples) - set(STAGES))
        return {stage: _stats(list(self._samples[stage])) for stage in order}


def _stats(values: list[float]) -> dict[str, float]:
    values.sort()
    n = len(values)

    def pct(q: float) -> float:
        return round(values[min(n - 1, int(q * n))] * 1000, 2) if n else 0.0

    return {"n": n, "mean_ms": round(sum(values) / n * 1000, 2) if n else 0.0, "p50_ms": pct(0.5),
            "p95_ms": pct(0.95)}


class ForwardingConversationStore(ConversationStore):
    """A ``ConversationStore`` that passes every primitive to ``store``, each through :meth:`_forward` (a
    subclass changes what one call does, or what every call does, in one place)."""

    def __init__(self, store: ConversationStore) -> None:
        self.store = store

    async def _forward(self, stage: str, call: Callable[..., Awaitable[Any]], *args: Any, **kwargs: Any) -> Any:
        """Make one call of ``store`` (``stage``: ``store read`` or ``store write``)."""
        return await call(*args, **kwargs)

    async def read_record(self, conversation_id: str) -> ConversationRecord | None:
        return await self._forward("store read", self.store.read_record, conversation_id)

    async def read_records(self, *, scope: str | None = None, limit: int | None = None) -> Sequence[ConversationRecord]:
        return await self._forward("store read", self.store.read_records, scope=scope, limit=limit)

    async def write_record(self, record: ConversationRecord, *, new_entries: Sequence[ConversationEntry] = (),
                           expected_revision: str | None) -> None:
        await self._forward("store write", self.store.write_record, record, new_entries=new_entries,
                            expected_revision=expected_revision)

    async def delete_record(self, conversation_id: str, *, expected_revision: str) -> None:
        await self._forward("store write", self.store.delete_record, conversation_id,
                            expected_revision=expected_revision)

    async def read_entry(self, entry_id: str) -> ConversationEntry:
        return await self._forward("store read", self.store.read_entry, entry_id)

    async def read_history(self, head_id: str | None, *, limit: int | None = None) -> list[ConversationEntry]:
        return await self._forward("store read", self.store.read_history, head_id, limit=limit)


class TimedConversationStore(ForwardingConversationStore):
    """A ``ConversationStore`` that times each call of another one (``store read``, ``store write``)."""

    def __init__(self, store: ConversationStore, stages: StageTimes) -> None:
        super().__init__(store)
        self.stages = stages

    async def _forward(self, stage: str, call: Callable[..., Awaitable[Any]], *args: Any, **kwargs: Any) -> Any:
        with self.stages.time(stage):
            return await call(*args, **kwargs)
