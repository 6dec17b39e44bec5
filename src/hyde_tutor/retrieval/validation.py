"""Query validation: the first step of every search."""

from __future__ import annotations

from typing import Any


from ..config import validate_collection_name
from ..errors import QueryValidationError

__all__ = ["validate_collection_name", "validate_query", "validate_top_k"]



class ValidQuery(str):
    """A query :func:`validate_query` accepted (stripped, not empty). Passing one on skips the checks:
    the toolset validates a tool's arguments once, and the pipeline does not repeat it."""

    __slots__ = ()


def validate_query(query: Any, max_chars: int) -> ValidQuery:
    """Return the stripped query, or raise :class:`QueryValidationError` with an actionable message."""
    if isinstance(query, ValidQuery) and len(query) <= max_chars:
        return query
    if not isinstance(query, str):
        raise QueryValidationError(f"The query must be a string, got {type(query).__name__}.")
    text = query.strip()
    if not text:
        raise QueryValidationError("The query is empty: pass a question or a few keywords.")
    if len(text) > max_chars:
        raise QueryValidationError(
            f"The query is {len(text)} characters long; the limit is {max_chars}. "
            "Shorten it to the question itself (or raise HYDE_RETRIEVAL__MAX_QUERY_CHARS)."
        )
    return ValidQuery(text)


def validate_top_k(top_k: Any, upper: int = 100) -> int:
    """``top_k`` must be an int in ``1..upper``."""
    if isinstance(top_k, bool) or not isinstance(top_k, int):
        raise QueryValidationError(f"top_k must be an integer, got {type(top_k).__name__}.")
    if not 1 <= top_k <= upper:
        raise QueryValidationError(f"top_k must be between 1 and {upper}, got {top_k}.")
    return top_k
