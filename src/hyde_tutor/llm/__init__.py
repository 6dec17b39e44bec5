"""LLM backends (API, compatible server, embedded llama.cpp, replay), one text generation helper, recordings."""

from .backends import LLMBackend, LLMUnavailableError, describe_backend, make_llm, replay_backend, resolve_provider
from .generation import CallOptions, Generation, TokenUsage, TextCall, generate_text, text_call
from .recordings import NotRecordedError, Recording, RecordingBook, ReplayModel

__all__ = [
    "CallOptions",
    "Generation",
    "LLMBackend",
    "LLMUnavailableError",
    "NotRecordedError",
    "Recording",
    "RecordingBook",
    "ReplayModel",
    "TokenUsage",
    "describe_backend",
    "TextCall",
    "generate_text",
    "make_llm",
    "replay_backend",
    "resolve_provider",
    "text_call",
]
