"""A deterministic tuning / held-out split of an eval set's queries, by a hash of the query (dialogue) id.

Every weight or threshold of the conversation search is chosen on the ``tune`` half and reported on the
``heldout`` half, which the choice never saw (docs/conversation.md, "Tuned on one half, reported on the other").
The split depends on the id alone: a query keeps its half whatever else the set holds, and adding dialogues
moves none of the old ones.
"""

from __future__ import annotations

import hashlib
from typing import Literal

Half = Literal["tune", "heldout"]
HALVES: tuple[str, ...] = ("tune", "heldout")


def half_of(query_id: str) -> Half:
    """``tune`` when the SHA-256 of the id is even, ``heldout`` when it is odd."""
    return "tune" if int(hashlib.sha256(query_id.encode("utf-8")).hexdigest(), 16) % 2 == 0 else "heldout"


def in_half(query_id: str, half: str | None) -> bool:
    """Whether the query belongs to ``half`` (``None`` or ``all``: every query)."""
    if half in (None, "all"):
        return True
    if half not in HALVES:
        raise ValueError(f"unknown half {half!r}; choose from tune, heldout, all")
    return half_of(query_id) == half
