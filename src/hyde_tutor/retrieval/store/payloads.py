"""Payloads of an embedded shard's points, kept by point id, so a search asks the engine for ids and scores only.

qdrant-edge holds the GIL for a whole query, and turning the payloads of the 30 hits per channel into
Python objects is most of that time (2 hybrid requests, depth 30: 0.30 ms with payloads, 0.09 ms
without, on this project's grammar collection). Under load every search in the process waits for that
GIL, so each search sends its queries without payloads and takes them from here; the points the cache
does not know yet are fetched in one ``retrieve`` call.

The cache is per shard (stores in one process share shards), cleared by every write to the shard. A
fetch that started before a write does not put its (possibly old) payloads back: each entry is stored
only while the cache's generation is the one the fetch began under.
"""

from __future__ import annotations

import threading
from collections.abc import Iterable
from typing import Any

from .base import Hit, hit_from

DEFAULT_LIMIT = 50_000
"""Points kept per shard; past it the cache starts over (a corpus this size fits in a few tens of MB)."""


class PayloadCache:
    """Point id → a scoreless :class:`Hit` (the original doc id and the public payload). Thread-safe."""

    def __init__(self, limit: int = DEFAULT_LIMIT) -> None:
        self.limit = limit
        self._lock = threading.Lock()
        self._hits: dict[Any, Hit] = {}
        self._generation = 0

    def __len__(self) -> int:
        return len(self._hits)

    @property
    def generation(self) -> int:
        """Changes with every :meth:`invalidate`; read it before fetching, pass it to :meth:`store`."""
        return self._generation

    def lookup(self, point_ids: Iterable[Any]) -> tuple[dict[Any, Hit], list[Any]]:
        """The known points and the ids still to fetch."""
        known: dict[Any, Hit] = {}
        missing: list[Any] = []
        with self._lock:
            for pid in point_ids:
                hit = self._hits.get(pid)
                if hit is None:
                    missing.append(pid)
                else:
                    known[pid] = hit
        return known, missing

    def store(self, records: Iterable[tuple[Any, dict[str, Any] | None]], generation: int) -> dict[Any, Hit]:
        """Turn fetched ``(point id, payload)`` pairs into hits; keep them unless a write came in between."""
        fetched = {pid: hit_from(payload, 0.0, pid) for pid, payload in records}
        with self._lock:
            if generation == self._generation:
                if len(self._hits) + len(fetched) > self.limit:
                    self._hits.clear()
                self._hits.update(fetched)
        return fetched

    def invalidate(self) -> None:
        """Forget every payload (the shard was written to)."""
        with self._lock:
            self._generation += 1
            self._hits.clear()


def scored(template: Hit, score: float) -> Hit:
    """A hit for one search: the cached doc id, the score, and a copy of the payload (a caller that edits
    its result's payload must not change the next search's)."""
    return Hit(template.doc_id, float(score), dict(template.payload))
