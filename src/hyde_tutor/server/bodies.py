"""The request bodies the server reads, checked before anything is spent on them: a malformed body is refused
with :class:`Malformed` (422, one line saying what is wrong) before it takes a rate-limit slot or reaches the
model.

* :func:`chat_turn`: a Vercel AI chat request carrying one new learner message (the page sends one per request;
  pydantic-ai takes every user message after the tutor's last reply as the new turn, so two or more would pass
  the message-size limit in pieces).
* :func:`rating`: ``{"turn_id", "rating": 1 or -1, "reason"}``; a rating is exactly 1 or -1 (``1.9`` is not 1).
* :func:`experiment_change`: the operator's ``{"action", "share", "name", "force"}``; a name is a short plain identifier.
"""

from __future__ import annotations

import json
import math
import re
from dataclasses import dataclass
from typing import Any

from pydantic import ValidationError
from pydantic_ai.ui.vercel_ai import VercelAIAdapter
from pydantic_ai.ui.vercel_ai.request_types import TextUIPart

__all__ = ("ChatTurn", "Malformed", "TRIGGERS", "chat_turn", "experiment_change", "rating")

TRIGGERS = ("submit-message", "regenerate-message")
"""The chat request kinds pydantic-ai's Vercel AI adapter takes (``"trigger"``)."""
CHAT_SHAPE = ('send {"id": "<chat id>", "trigger": "submit-message", '
              '"messages": [{"id": "<message id>", "role": "user", "parts": [{"type": "text", "text": "..."}]}]}')
CHAT_ID = re.compile(r"[A-Za-z0-9_-]{1,64}")
TURN_ID = re.compile(r"[A-Za-z0-9_-]{1,64}")
EXPERIMENT_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9_.:-]{0,199}")
"""An experiment's name: letters, digits and ``_.:-``, at most 200 characters (the database column's size)."""
MAX_REASON_CHARS = 300


class Malformed(ValueError):
    """A request body the server does not take; the message is one line for the client (422)."""


@dataclass(frozen=True)
class ChatTurn:
    """A checked chat request."""

    run_input: Any
    """The adapter's parsed request (``SubmitMessage`` or ``RegenerateMessage``)."""
    question: str
    chat_id: str


def _json_object(body: bytes, shape: str) -> dict[str, Any]:
    try:
        data = json.loads(body or b"{}")
    except ValueError:
        raise Malformed(f"the body is not JSON; {shape}") from None
    if not isinstance(data, dict):
        raise Malformed(f"the body is not a JSON object; {shape}")
    return data


def _first_error(exc: ValidationError) -> str:
    error = exc.errors()[0]
    where = ".".join(str(p) for p in error["loc"] if p not in TRIGGERS) or "body"
    more = f" (and {exc.error_count() - 1} more)" if exc.error_count() > 1 else ""
    return f"{where}: {error['msg']}{more}"


def chat_turn(body: bytes, max_chars: int) -> ChatTurn:
    """The chat request in ``body``, or ``Malformed``."""
    data = _json_object(body, CHAT_SHAPE)
    if data.get("trigger") not in TRIGGERS:
        raise Malformed(f'"trigger" must be one of {", ".join(TRIGGERS)} (got {str(data.get("trigger"))[:40]!r})')
    try:
        run_input = VercelAIAdapter.build_run_input(body)
    except ValidationError as exc:
        raise Malformed(f"not a chat request: {_first_error(exc)}; {CHAT_SHAPE}") from None
    if not CHAT_ID.fullmatch(run_input.id):
        raise Malformed("the chat id must be 1-64 letters, digits, _ or -")
    replies = [i for i, m in enumerate(run_input.messages) if m.role == "assistant"]
    new = run_input.messages[replies[-1] + 1 if replies else 0:]
    if len(new) != 1:
        raise Malformed(f"send one new learner message per request, not {len(new)} after the tutor's last reply")
    (message,) = new
    if message.role != "user":
        raise Malformed("the last message must be the learner's (role user)")
    if any(not isinstance(part, TextUIPart) for part in message.parts):
        raise Malformed("the learner's message may hold text parts only")
    text = "".join(part.text for part in message.parts if isinstance(part, TextUIPart))
    if not text.strip():
        raise Malformed("the message is empty")
    if len(text) > max_chars:
        raise Malformed(f"the message is {len(text)} characters; at most {max_chars} (HYDE_SERVER__MAX_MESSAGE_CHARS)")
    return ChatTurn(run_input, text.strip(), run_input.id)


RATING_SHAPE = 'send JSON {"turn_id": "...", "rating": 1 or -1, "reason": "optional, one line"}'


def rating(body: bytes) -> tuple[str, int, str | None]:
    """``(turn id, +1 or -1, reason or None)`` of a rating request, or ``Malformed``. The reason is one line."""
    data = _json_object(body, RATING_SHAPE)
    turn_id, value, reason = data.get("turn_id"), data.get("rating"), data.get("reason")
    if not isinstance(turn_id, str) or not TURN_ID.fullmatch(turn_id):
        raise Malformed(f"turn_id must be the turn id the reply carried (1-64 letters, digits, _ or -); {RATING_SHAPE}")
    if isinstance(value, bool) or not isinstance(value, (int, float)) or value not in (1, -1):
        raise Malformed(f"rating must be 1 or -1, got {str(value)[:20]}; {RATING_SHAPE}")
    if reason is not None and (not isinstance(reason, str) or len(reason) > MAX_REASON_CHARS):
        raise Malformed(f"reason is one line of at most {MAX_REASON_CHARS} characters; {RATING_SHAPE}")
    line = " ".join(reason.split()) if reason else ""
    return turn_id, int(value), line or None


EXPERIMENT_SHAPE = 'send JSON {"action": "start"|"stop"|"share", "share": 0.5, "name": "...", "force": false}'


def experiment_change(body: bytes) -> tuple[Any, float | None, str | None, bool]:
    """``(action, share, name, force)`` of an operator's experiment change, or ``Malformed`` (the action itself
    is checked by :func:`~hyde_tutor.experiment.operations.change_experiment`; ``force`` is ``"force": true`` only)."""
    data = _json_object(body, EXPERIMENT_SHAPE)
    action, share, name = data.get("action"), data.get("share"), data.get("name")
    if share is not None and (isinstance(share, bool) or not isinstance(share, (int, float)) or not math.isfinite(share)):
        raise Malformed(f"share must be a number within 0..1; {EXPERIMENT_SHAPE}")
    if name is not None and (not isinstance(name, str) or not EXPERIMENT_NAME.fullmatch(name)):
        raise Malformed("name must be 1-200 characters of letters, digits and _.:- starting with a letter or digit; "
                        + EXPERIMENT_SHAPE)
    return action, None if share is None else float(share), name, data.get("force") is True
