"""One answered chat turn (:func:`~hyde_tutor.tutor.chat.answer_turn`'s result)."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from pydantic_ai.messages import ModelMessage

from .grounding import GroundedAnswer, ReplyPart
from ..plugin.monitor import RetrievalRecord

__all__ = ("Turn",)


@dataclass(frozen=True, slots=True, kw_only=True)
class Turn:
    """One answered chat turn."""

    text: str
    """What the learner sees: the model's answer, or the found entries and one line about the failure."""
    model_error: str | None = None
    """Why the model did not answer (``None`` when it did)."""
    tool_calls: tuple[str, ...] = ()
    """``name(args)`` of every tool call the model made."""
    records: tuple[RetrievalRecord, ...] = ()
    """The retrievals this turn made (arm, HyDE, fallback, timings)."""
    seconds: float = 0.0
    found: tuple[dict[str, Any], ...] = ()
    """The entries the searches returned this turn (what the model was shown)."""
    messages: tuple[ModelMessage, ...] = field(default=(), repr=False)
    """The conversation so far, to pass as the next turn's history (unchanged when the model failed)."""
    replaced: bool = False
    """The model's reply named no found entry or held no Korean, and was replaced by the top entry."""
    streamed: bool = False
    """The reply's text went to ``on_text`` as it was generated (the caller has shown it already)."""
    first_token_s: float | None = None
    """Seconds from the question to the first streamed token of the reply."""
    answer: GroundedAnswer | None = None
    """The model's structured answer (a grounded agent), before :func:`render_answer` wrote ``text`` from it."""
    parts: tuple[ReplyPart, ...] = ()
    """A structured reply's parts in order (:func:`~hyde_tutor.tutor.grounding.reply_parts`); ``text`` is them joined."""
    prompt_tokens: int | None = None
    """Tokens of the turn's last model request as sent (after :class:`~hyde_tutor.tutor.context_fit.FitContext`)."""
