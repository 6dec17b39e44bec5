"""What the model is told when a search cannot run (the tool boundary's error mapping)."""

from __future__ import annotations

from ..errors import (CollectionNotFoundError, EmbedderError, EmbedderMismatchError, StoreLockedError,
                      StoreUnavailableError)

__all__ = ["tool_failure_message"]


def tool_failure_message(exc: BaseException, tool: str, collection: str) -> str:
    """What the model is told when a search cannot run: what happened and what the operator can do, in
    words, never the raw exception (which may carry file paths or engine internals). A missing collection is
    named as the error names it (a search may read a companion collection, ``<name>__questions``)."""
    if isinstance(exc, CollectionNotFoundError):
        collection = exc.name
    elif isinstance(exc, EmbedderMismatchError):
        collection = exc.collection
    if isinstance(exc, StoreLockedError):
        why = "the search store is locked by another process"
    elif isinstance(exc, CollectionNotFoundError):
        why = f"the collection {collection!r} does not exist yet (the operator must run: hyde-tutor ingest " \
              f"--collection {collection} --file PATH)"
    elif isinstance(exc, EmbedderMismatchError):
        why = (f"the collection {collection!r} was built with {exc.built_with}, not with the configured "
               f"{exc.configured} (the operator must rebuild it with --recreate)")
    elif isinstance(exc, StoreUnavailableError) and "deleted" in str(exc):
        why = (f"the files of the collection {collection!r} were deleted (the operator must rebuild it: hyde-tutor "
               f"ingest --collection {collection} --file PATH --recreate)")
    elif isinstance(exc, StoreUnavailableError):
        why = "the search store is unreachable or damaged"
    elif isinstance(exc, EmbedderError):
        why = "the embedding model failed or did not answer in time (a later search tries again)"
    else:
        why = f"the search failed ({type(exc).__name__})"
    return (f"{tool} is unavailable right now: {why}. Do not call it again in this turn; answer from your own "
            f"knowledge and tell the learner that the reference search is unavailable.")
