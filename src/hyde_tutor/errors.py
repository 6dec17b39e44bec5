"""Typed errors. Every message says what went wrong and what to do about it."""

from __future__ import annotations


class HydeTutorError(Exception):
    """Base class for all errors raised by hyde-tutor."""


class QueryValidationError(HydeTutorError, ValueError):
    """The query is empty, too long or not a string."""


class CollectionNameError(HydeTutorError, ValueError):
    """A collection name that is not a plain name (it would reach the filesystem as a path)."""


class CollectionNotFoundError(HydeTutorError, LookupError):
    """The named collection does not exist in the store."""

    def __init__(self, name: str, available: list[str] | None = None) -> None:
        hint = f" Available: {', '.join(sorted(available))}." if available else ""
        super().__init__(
            f"Collection {name!r} does not exist.{hint} "
            f"Create it with: hyde-tutor ingest --collection {name} --file PATH"
        )
        self.name = name


class EmbedderMismatchError(HydeTutorError):
    """The collection was built by different embedders than the ones configured now."""

    def __init__(self, collection: str, built_with: str, configured: str) -> None:
        super().__init__(
            f"Collection {collection!r} was built with {built_with}, but the configured "
            f"embedders are {configured}. Either configure the original embedders, or rebuild "
            f"it: hyde-tutor ingest --collection {collection} --file PATH --recreate"
        )
        self.collection = collection
        self.built_with = built_with
        self.configured = configured


class StoreLockedError(HydeTutorError):
    """Another process holds the embedded store open."""

    def __init__(self, path: str) -> None:
        super().__init__(
            f"The embedded Qdrant store at {path} is locked by another process "
            f"(only one process may open it at a time). Stop the other hyde-tutor process "
            f"(chat, ingest, notebook kernel), or point HYDE_DATA_DIR at another folder."
        )
        self.path = path


class StoreUnavailableError(HydeTutorError):
    """The store cannot be reached or its files are gone or damaged."""


class CorpusFormatError(HydeTutorError, ValueError):
    """A corpus line could not be parsed into a document."""

    def __init__(self, line_no: int, reason: str) -> None:
        super().__init__(f"line {line_no}: {reason}")
        self.line_no = line_no
        self.reason = reason


class EmbedderError(HydeTutorError):
    """An embedding model failed to load or to embed."""


class LLMUnavailableError(HydeTutorError):
    """No usable LLM backend (missing package, server failed to start, ...)."""
