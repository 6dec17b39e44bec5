"""One search, as one value: what a caller asks for, made once where a search enters (a tool, the CLI,
an eval arm, retrieve-first) and passed whole to :meth:`HydeRetriever.execute`."""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import Any

from .conversation import ConversationMode
from .domains import Domain
from .policy import FusionMode, GenerationMode


@dataclass(frozen=True, slots=True, kw_only=True)
class SearchRequest:
    """A search request. Unset options (None) come from the policy in force when the search runs.

    A changed copy comes from :meth:`replace`; the request itself never changes.
    """

    collection: str
    text: Any
    """The learner's query (validated by the pipeline: empty, oversized or not text is refused)."""
    top_k: int | None = None
    use_hyde: bool | None = None
    """True/False decided by the caller (or the experiment); None: the policy's ``enabled``."""
    n_hypotheses: int | None = None
    fusion: FusionMode | None = None
    include_raw: bool = True
    """False: the hypothesis channels alone (the ``hyde_only`` eval arm)."""
    rerank_candidates: int | None = None
    use_questions: bool | None = None
    domain: Domain | None = None
    """The hypothesis domain (a tool knows it searches grammar); None: the collection's."""
    agent_hypothesis: str | None = None
    """An answer-shaped entry the calling agent wrote in its tool call (guarded like generated ones)."""
    generation: GenerationMode | None = None
    cascade_margin: float | None = None
    history: tuple[tuple[str, str], ...] = ()
    """Earlier turns, oldest first, ``(role, content)``: a follow-up is searched with the previous question in
    front of it and its hypotheses are written from the recent conversation (``hyde/conversation.py``)."""
    conversation: ConversationMode | None = None
    """How the raw channel searches a message with a history (:data:`~hyde_tutor.hyde.conversation.ConversationMode`);
    None: ``auto``, a follow-up with its context, a new question as itself."""

    def replace(self, **changes: Any) -> SearchRequest:
        return dataclasses.replace(self, **changes)
