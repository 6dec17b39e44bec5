"""Optional reranking with a sentence-transformers CrossEncoder, always against the ORIGINAL query.

No cross-encoder weights ship on PyPI, so ``reranker_model`` must be a local folder.
"""

from __future__ import annotations

import os
import threading
from collections.abc import Sequence
from functools import cached_property
from pathlib import Path
from typing import Any, Protocol

from ..errors import HydeTutorError


class Reranker(Protocol):
    def scores(self, query: str, texts: Sequence[str]) -> list[float]: ...


class CrossEncoderReranker:
    """Scores (query, passage) pairs with a local CrossEncoder."""

    def __init__(self, model_path: str | os.PathLike[str]) -> None:
        self.model_path = str(model_path)
        if not Path(self.model_path).exists():
            raise HydeTutorError(
                f"Reranker model folder {self.model_path} does not exist; set HYDE_HYDE__RERANKER_MODEL to a "
                "local CrossEncoder folder (no cross-encoder weights are available offline)."
            )
        self._lock = threading.Lock()

    @cached_property
    def _model(self) -> Any:
        os.environ.setdefault("HF_HUB_OFFLINE", "1")
        try:
            from sentence_transformers import CrossEncoder
        except ImportError as exc:
            raise HydeTutorError("Reranking needs: pip install torch==2.13.0 && pip install 'hyde-tutor[st]'") from exc
        return CrossEncoder(self.model_path, device="cpu")

    def scores(self, query: str, texts: Sequence[str]) -> list[float]:
        if not texts:
            return []
        with self._lock:
            raw = self._model.predict([(query, t) for t in texts], show_progress_bar=False)
        return [float(x) for x in raw]


def adaptive_threshold(
    scores: Sequence[float], min_results: int, start: float, step: float, floor: float
) -> tuple[float | None, int]:
    """Relative threshold that starts at ``start`` and steps down until ``min_results`` pass or ``floor``.

    Scores are made relative first (``s / max`` when all are positive, min-max otherwise), so the same
    setting works for RRF scores, cosine scores and cross-encoder logits. Returns
    ``(effective threshold, how many pass)``; ``(None, len(scores))`` when ``start`` is 0 (off).
    """
    if start <= 0 or not scores:
        return None, len(scores)
    relative = _relative(scores)
    threshold = start
    while True:
        kept = sum(1 for r in relative if r >= threshold - 1e-12)
        nxt = round(threshold - step, 10)
        if kept >= min_results or nxt < floor - 1e-12:
            return threshold, kept
        threshold = nxt


def _relative(scores: Sequence[float]) -> list[float]:
    hi, lo = max(scores), min(scores)
    if lo > 0:
        return [s / hi for s in scores]
    if hi == lo:
        return [1.0 for _ in scores]
    return [(s - lo) / (hi - lo) for s in scores]
