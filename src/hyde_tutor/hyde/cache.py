"""Hypothesis caches: in memory (LRU), on disk (SQLite), or none; keyed by model, exact request and perspective."""

from __future__ import annotations

import hashlib
import json
import sqlite3
import threading
from collections import OrderedDict
from pathlib import Path
from typing import Protocol

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
