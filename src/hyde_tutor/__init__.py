"""hyde-tutor: HyDE retrieval for pydantic-ai tutoring agents, on Qdrant, offline by default."""

from __future__ import annotations

from .retrieval.analysis import KoreanAwareAnalyzer
from .config import Settings
from .corpus.documents import Document, point_id_for
from .retrieval.embedders import (
    DenseEmbedder,
    OpenAIEmbedder,
    PydanticAIEmbedder,
    SentenceTransformerEmbedder,
    UseEmbedder,
    make_dense_embedder,
)
from .errors import (
    CollectionNotFoundError,
    CorpusFormatError,
    EmbedderError,
    EmbedderMismatchError,
    HydeTutorError,
    QueryValidationError,
    StoreLockedError,
    StoreUnavailableError,
)
from .plugin.experiment import Decision, Experiment, ReloadableExperiment, decide
from .hyde.fusion import agreement, max_score_fusion, mean_vector, protect_head, reciprocal_rank_fusion, weighted_score_fusion
from .hyde import HydePolicy, HydeResult, HydeRetriever, RetrievedDoc
from .hyde.hypotheses import HypothesisGenerator
from .llm.backends import LLMBackend, make_llm
from .plugin.monitor import Monitor, RetrievalRecord
from .plugin.toolset import HydeSearchToolset, TutorDeps, hyde_capability, tutor_instructions
from .plugin.tutor import HydeTutor, RetrieveFirst
from .llm.recordings import NotRecordedError, Recording, RecordingBook, ReplayModel
from .corpus.ingest import IngestReport, ingest_documents, ingest_file
from .hyde.question_index import QuestionIngestReport, ingest_questions
from .hyde.questions import QuestionCache, QuestionGenerator, parse_questions, question_generator_from_settings
from .retrieval.retriever import Retriever
from .retrieval.sparse import Bm25Encoder, SparseVec
from .retrieval.store import (
    CollectionSpec,
    EdgeStore,
    Hit,
    QdrantClientStore,
    SearchRequest,
    VectorStore,
    open_store,
    questions_collection,
)

__version__ = "0.1.0"

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
    "KoreanAwareAnalyzer",
    "OpenAIEmbedder",
    "PydanticAIEmbedder",
    "QdrantClientStore",
    "QueryValidationError",
    "Retriever",
    "SearchRequest",
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
