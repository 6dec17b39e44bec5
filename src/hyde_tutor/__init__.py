"""hyde-tutor: HyDE retrieval for pydantic-ai tutoring agents, on Qdrant, offline by default.

Every public name is importable from here (``from hyde_tutor import HydeRetriever``); each is loaded on
first use (PEP 562), so ``import hyde_tutor`` and ``hyde-tutor --help`` do not pay for qdrant-client,
pydantic-ai and the embedders up front.
"""

from __future__ import annotations

import importlib
import importlib.abc
import importlib.machinery
import sys
import warnings
from types import ModuleType
from typing import TYPE_CHECKING, Any

__version__ = "0.1.0"

_EXPORTS: dict[str, str] = {
    "KoreanAwareAnalyzer": ".retrieval.analysis",
    "Settings": ".config",
    "Document": ".corpus.documents",
    "point_id_for": ".corpus.documents",
    "DenseEmbedder": ".retrieval.embedders",
    "OpenAIEmbedder": ".retrieval.embedders",
    "PydanticAIEmbedder": ".retrieval.embedders",
    "SentenceTransformerEmbedder": ".retrieval.embedders",
    "UseEmbedder": ".retrieval.embedders",
    "make_dense_embedder": ".retrieval.embedders",
    "CollectionNotFoundError": ".errors",
    "CorpusFormatError": ".errors",
    "EmbedderError": ".errors",
    "EmbedderMismatchError": ".errors",
    "HydeTutorError": ".errors",
    "QueryValidationError": ".errors",
    "StoreLockedError": ".errors",
    "StoreUnavailableError": ".errors",
    "Decision": ".experiment.assignment",
    "Experiment": ".experiment.assignment",
    "ReloadableExperiment": ".experiment.assignment",
    "decide": ".experiment.assignment",
    "agreement": ".hyde.fusion",
    "max_score_fusion": ".hyde.fusion",
    "mean_vector": ".hyde.fusion",
    "protect_head": ".hyde.fusion",
    "reciprocal_rank_fusion": ".hyde.fusion",
    "weighted_score_fusion": ".hyde.fusion",
    "HydePolicy": ".hyde",
    "HydeResult": ".hyde",
    "HydeRetriever": ".hyde",
    "RetrievedDoc": ".hyde",
    "HypothesisGenerator": ".hyde.hypotheses",
    "HypothesisPrompts": ".hyde.hypotheses",
    "LLMBackend": ".llm.backends",
    "make_llm": ".llm.backends",
    "Monitor": ".plugin.monitor",
    "RetrievalRecord": ".plugin.monitor",
    "HydeSearchToolset": ".plugin.toolset",
    "TutorDeps": ".plugin.deps",
    "hyde_capability": ".plugin.toolset",
    "tutor_instructions": ".plugin.toolset",
    "HydeTutor": ".plugin.capabilities",
    "RetrieveFirst": ".plugin.capabilities",
    "NotRecordedError": ".llm.recordings",
    "Recording": ".llm.recordings",
    "RecordingBook": ".llm.recordings",
    "ReplayModel": ".llm.recordings",
    "IngestReport": ".corpus.ingest",
    "IngestRequest": ".corpus.ingest",
    "ingest_documents": ".corpus.ingest",
    "ingest_file": ".corpus.ingest",
    "QuestionIngestReport": ".hyde.question_index",
    "ingest_questions": ".hyde.question_index",
    "QuestionCache": ".hyde.questions",
    "QuestionGenerator": ".hyde.questions",
    "parse_questions": ".hyde.questions",
    "question_generator_from_settings": ".hyde.questions",
    "Retriever": ".retrieval.retriever",
    "Bm25Encoder": ".retrieval.sparse",
    "SparseVec": ".retrieval.sparse",
    "CollectionSpec": ".retrieval.store",
    "EdgeStore": ".retrieval.store",
    "Hit": ".retrieval.store",
    "QdrantClientStore": ".retrieval.store",
    "SearchRequest": ".hyde.request",
    "StoreQuery": ".retrieval.store",
    "VectorStore": ".retrieval.store",
    "open_store": ".retrieval.store",
    "questions_collection": ".retrieval.store",
}
__all__ = [
    "Decision",
    "Experiment",
    "HydeResult",
    "HydeRetriever",
    "HydeSearchToolset",
    "HydeTutor",
    "RetrieveFirst",
    "NotRecordedError",
    "Recording",
    "RecordingBook",
    "ReplayModel",
    "HypothesisGenerator",
    "HypothesisPrompts",
    "LLMBackend",
    "Monitor",
    "ReloadableExperiment",
    "RetrievalRecord",
    "RetrievedDoc",
    "TutorDeps",
    "decide",
    "hyde_capability",
    "make_llm",
    "tutor_instructions",
    "Bm25Encoder",
    "CollectionNotFoundError",
    "CollectionSpec",
    "CorpusFormatError",
    "DenseEmbedder",
    "Document",
    "EdgeStore",
    "EmbedderError",
    "EmbedderMismatchError",
    "Hit",
    "HydeTutorError",
    "IngestReport",
    "IngestRequest",
    "KoreanAwareAnalyzer",
    "OpenAIEmbedder",
    "PydanticAIEmbedder",
    "QdrantClientStore",
    "QueryValidationError",
    "Retriever",
    "SearchRequest",
    "StoreQuery",
    "SentenceTransformerEmbedder",
    "Settings",
    "SparseVec",
    "StoreLockedError",
    "StoreUnavailableError",
    "UseEmbedder",
    "VectorStore",
    "ingest_documents",
    "ingest_file",
    "make_dense_embedder",
    "max_score_fusion",
    "mean_vector",
    "open_store",
    "point_id_for",
    "reciprocal_rank_fusion",
    "protect_head",
    "weighted_score_fusion",
    "agreement",
    "HydePolicy",
    "QuestionCache",
    "QuestionGenerator",
    "QuestionIngestReport",
    "ingest_questions",
    "parse_questions",
    "question_generator_from_settings",
    "questions_collection",
]


def __getattr__(name: str) -> Any:
    module = _EXPORTS.get(name)
    if module is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    value = getattr(importlib.import_module(module, __name__), name)
    globals()[name] = value  # later lookups skip __getattr__
    return value


def __dir__() -> list[str]:
    return sorted({*globals(), *_EXPORTS})


# Modules moved by the 0.2 layout (plugin/ = what an agent plugs in, tutor/ = the example tutor, experiment/ =
# the A/B experiment). The old path still imports, with a DeprecationWarning naming the new one, until 0.3.
MOVED_MODULES: dict[str, str] = {
    "plugin.tutor": "plugin.capabilities",
    "plugin.experiment": "experiment.assignment",
    **{f"plugin.{name}": f"experiment.{name}"
       for name in ("events", "sqlstore", "sqlconversations", "operations", "judge", "rephrase")},
    **{f"plugin.{name}": f"tutor.{name}"
       for name in ("chat", "turn", "context_fit", "grounding", "checks", "reply_stream", "served")},
    **{f"evaluation.{name}": f"experiment.{name}"
       for name in ("abreport", "abstats", "always_valid", "outcome_text", "outcomes", "sequential", "treatment",
                    "simulation")},
}


class _MovedModuleFinder(importlib.abc.MetaPathFinder, importlib.abc.Loader):
    """Imports an old module path (``hyde_tutor.plugin.events``) as a view of the module's new home."""

    def find_spec(self, fullname: str, path: Any, target: Any = None) -> importlib.machinery.ModuleSpec | None:
        old = fullname.removeprefix(f"{__name__}.")
        if old == fullname or old not in MOVED_MODULES:
            return None
        return importlib.machinery.ModuleSpec(fullname, self)

    def create_module(self, spec: importlib.machinery.ModuleSpec) -> ModuleType | None:
        return None

    def exec_module(self, module: ModuleType) -> None:
        new = f"{__name__}.{MOVED_MODULES[module.__name__.removeprefix(f'{__name__}.')]}"
        warnings.warn(f"{module.__name__} moved to {new}: import it from there (the old path goes in 0.3)",
                      DeprecationWarning, stacklevel=2)
        target = importlib.import_module(new)
        module.__doc__ = target.__doc__
        module.__getattr__ = lambda name: getattr(target, name)  # type: ignore[method-assign]


if not any(isinstance(finder, _MovedModuleFinder) for finder in sys.meta_path):
    sys.meta_path.append(_MovedModuleFinder())


if TYPE_CHECKING:  # the eager imports, for type checkers and IDEs
    from .retrieval.analysis import KoreanAwareAnalyzer  # noqa: F401
    from .config import Settings  # noqa: F401
    from .corpus.documents import Document, point_id_for  # noqa: F401
    from .retrieval.embedders import DenseEmbedder, OpenAIEmbedder, PydanticAIEmbedder, SentenceTransformerEmbedder, UseEmbedder, make_dense_embedder  # noqa: F401
    from .errors import CollectionNotFoundError, CorpusFormatError, EmbedderError, EmbedderMismatchError, HydeTutorError, QueryValidationError, StoreLockedError, StoreUnavailableError  # noqa: F401
    from .experiment.assignment import Decision, Experiment, ReloadableExperiment, decide  # noqa: F401
    from .hyde.fusion import agreement, max_score_fusion, mean_vector, protect_head, reciprocal_rank_fusion, weighted_score_fusion  # noqa: F401
    from .hyde import HydePolicy, HydeResult, HydeRetriever, RetrievedDoc  # noqa: F401
    from .hyde.hypotheses import HypothesisGenerator, HypothesisPrompts  # noqa: F401
    from .llm.backends import LLMBackend, make_llm  # noqa: F401
    from .plugin.monitor import Monitor, RetrievalRecord  # noqa: F401
    from .plugin.deps import TutorDeps  # noqa: F401
    from .plugin.toolset import HydeSearchToolset, hyde_capability, tutor_instructions  # noqa: F401
    from .plugin.capabilities import HydeTutor, RetrieveFirst  # noqa: F401
    from .llm.recordings import NotRecordedError, Recording, RecordingBook, ReplayModel  # noqa: F401
    from .corpus.ingest import IngestReport, IngestRequest, ingest_documents, ingest_file  # noqa: F401
    from .hyde.question_index import QuestionIngestReport, ingest_questions  # noqa: F401
    from .hyde.questions import QuestionCache, QuestionGenerator, parse_questions, question_generator_from_settings  # noqa: F401
    from .retrieval.retriever import Retriever  # noqa: F401
    from .retrieval.sparse import Bm25Encoder, SparseVec  # noqa: F401
    from .retrieval.store import CollectionSpec, EdgeStore, Hit, QdrantClientStore, StoreQuery, VectorStore, open_store, questions_collection  # noqa: F401
    from .hyde.request import SearchRequest  # noqa: F401
