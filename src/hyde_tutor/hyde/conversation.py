"""Follow-up questions are searched with the conversation in view.

«А в прошедшем?» searched on its own words finds the right entry at rank 1 one time in six. Two ways in:
the raw channel searches the previous question and the follow-up together (:func:`context_query`), and a
hypothesis is written from the recent conversation (:func:`render_conversation` in the follow-up request
template), so it answers the follow-up in context.
"""

from __future__ import annotations

from collections.abc import Sequence

Message = tuple[str, str]
"""``(role, content)``: role ``user`` or ``assistant``."""

RECENT_TURNS = 4
"""How many earlier messages a hypothesis request shows."""


def context_query(history: Sequence[Message], text: str, max_chars: int = 1000) -> str:
    """The follow-up searched with the learner's previous question in front of it (the question is what
    names the topic; the tutor's reply adds its own words and, measured, dilutes the search)."""
    previous = next((content for role, content in reversed(history) if role == "user"), "")
    joined = f"{previous.strip()} {text.strip()}".strip()
    return joined[-max_chars:] if len(joined) > max_chars else joined


def render_conversation(history: Sequence[Message], turns: int = RECENT_TURNS) -> str:
    """The recent conversation as lines ``Ученик: …`` / ``Репетитор: …`` (each message capped)."""
    names = {"user": "Ученик", "assistant": "Репетитор"}
    return "\n".join(f"{names.get(role, role)}: {' '.join(content.split())[:400]}"
                     for role, content in list(history)[-turns:])
