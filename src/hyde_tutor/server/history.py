"""A learner's stored conversation as the page shows it: the reply kept as the learner read it, and the messages
a reloaded page puts back.

The agent run stores the model's own last message; for a structured answer (the embedded model) that is its
JSON, and for a replaced reply the text that was not shown. :func:`keep_as_shown` puts the reply the learner
read in its place (the old one stays stored on a branch), the way ``hyde-tutor chat`` keeps its history: the
next turn's model request then carries the same earlier exchange on both paths, and a reload shows the reply
that was read. :func:`shown_messages` reads the conversation back for the page, only under the learner's own
scope. :class:`LoadedOnce` hands the conversation the server loaded for a turn to the UI adapter's own load.
"""

from __future__ import annotations

import dataclasses
import logging
from typing import Any

from pydantic_ai.conversation import Conversation
from pydantic_ai.conversation_store import ConversationEntry, ConversationRecord, ConversationStore
from pydantic_ai.messages import ModelRequest, ModelResponse, TextPart, ToolCallPart, UserPromptPart

from ..tutor.timings import ForwardingConversationStore

__all__ = ("TURN_KEY", "LoadedOnce", "keep_as_shown", "shown_messages")

TURN_KEY = "hyde_tutor_turn_id"
"""The key, in a stored reply's ``metadata``, of the served turn that wrote it: a reloaded page rates that turn."""

_log = logging.getLogger("hyde_tutor.server")


async def keep_as_shown(store: ConversationStore, conversation_id: str, scope: str, text: str) -> bool:
    """Replace the stored conversation's last reply with ``text`` (what the learner read). False, logged, when
    it could not (no such conversation, its last message is not a reply, a concurrent save): the turn itself
    is not touched.

    After the UI adapter's save through :class:`LoadedOnce` the reply's entry is known, so the replacement is one
    record read and one write; otherwise the conversation is loaded and saved (two more reads of its history)."""
    saved = getattr(store, "saved_entries", None)
    try:
        if saved and isinstance(saved[-1].message, ModelResponse):
            return await _replace_saved_reply(store, conversation_id, scope, saved[-1], text)
        loaded = await store.load(conversation_id, scope=scope)
        if loaded is None or not loaded.messages or not isinstance(loaded.messages[-1], ModelResponse):
            return False
        loaded.messages[-1] = dataclasses.replace(loaded.messages[-1], parts=[TextPart(content=text)])
        await store.save(loaded, scope=scope)
        return True
    except Exception as exc:  # noqa: BLE001 - the reply was shown; only the stored copy keeps the model's text
        _log.warning("could not keep the shown reply of a conversation: %s", type(exc).__name__)
        return False


async def _replace_saved_reply(store: ConversationStore, conversation_id: str, scope: str, reply: ConversationEntry,
                               text: str) -> bool:
    """What ``store.save`` does for a conversation whose last message was replaced (the old reply stays on a
    branch, a new entry follows the same parent, the record moves only if no one saved since), without reading
    the history back: ``reply`` is the entry this request's save just stored."""
    record = await store.read_record(conversation_id)
    if record is None or record.scope != scope or record.head_id != reply.id:
        return False  # deleted, another learner's, or saved again since: the stored reply stays
    entry = ConversationEntry(parent_id=reply.parent_id,
                              message=dataclasses.replace(reply.message, parts=[TextPart(content=text)]))
    updated = ConversationRecord(
        conversation_id=conversation_id, head_id=entry.id, usage=record.usage,
        deferred_tool_requests=record.deferred_tool_requests, scope=record.scope, forked_from=record.forked_from,
        forked_at=record.forked_at, branches=[*(b for b in record.branches if b != reply.id), reply.id])
    await store.write_record(updated, new_entries=[entry], expected_revision=record.revision)
    return True


async def shown_messages(store: ConversationStore, conversation_id: str, scope: str) -> list[dict[str, Any]]:
    """The learner's messages and the tutor's text replies of a stored conversation, oldest first, as
    ``{"role": "learner"|"tutor", "text": ...}`` (a served reply also carries its ``turn_id``, which the page
    rates); empty when the store has no such conversation under ``scope`` (another learner's conversation reads
    as none)."""
    loaded = await store.load(conversation_id, scope=scope)
    out: list[dict[str, Any]] = []
    for message in loaded.messages if loaded is not None else ():
        if isinstance(message, ModelRequest):
            out += [{"role": "learner", "text": p.content} for p in message.parts
                    if isinstance(p, UserPromptPart) and isinstance(p.content, str)]
        elif isinstance(message, ModelResponse) and not any(isinstance(p, ToolCallPart) for p in message.parts):
            text = "".join(p.content for p in message.parts if isinstance(p, TextPart)).strip()
            if text and not text.startswith("{"):  # a structured answer's JSON, if it was not replaced: not shown
                turn_id = (message.metadata or {}).get(TURN_KEY)
                out.append({"role": "tutor", "text": text, **({"turn_id": turn_id} if isinstance(turn_id, str) else {})})
    return out


def _tag_reply(conversation: Conversation, turn_id: str) -> None:
    """Mark the last new reply of ``conversation`` (not stored yet) as ``turn_id``'s. In place: the messages the
    store already has are untouched, so the save still appends after them. Where the conversation does not say
    which messages are new, only a last reply without a turn is marked (a stored reply changed in place would read
    as a rewritten history)."""
    index = conversation.new_message_index
    new = conversation.messages[index:] if index is not None else conversation.messages[-1:]
    reply = next((m for m in reversed(new) if isinstance(m, ModelResponse)), None)
    if reply is not None and (index is not None or TURN_KEY not in (reply.metadata or {})):
        reply.metadata = {**(reply.metadata or {}), TURN_KEY: turn_id}


class LoadedOnce(ForwardingConversationStore):
    """``store`` as one chat request sees it: the conversation the server has just loaded for the turn (to check
    the request and open the turn) is what the UI adapter's own load gets, once, instead of reading and parsing
    it again. The adapter still reads the record after its load and refuses a conversation saved in between
    (its revision changed), as it does with any store; every other call goes to ``store``."""

    def __init__(self, store: ConversationStore, conversation_id: str, scope: str | None,
                 loaded: Conversation | None) -> None:
        super().__init__(store)
        self._handover: tuple[str, str | None, Conversation | None] | None = (conversation_id, scope, loaded)

    saved_entries: list[ConversationEntry] | None = None
    """What this request's save stored (the adapter saves once, at the run's end): :func:`keep_as_shown` reads it."""
    turn_id: str | None = None
    """The served turn of this request: its reply is stored with it (``metadata[TURN_KEY]``), so that a reloaded
    page can still rate it."""

    async def save(self, conversation: Any, *, scope: str | None = None) -> list[ConversationEntry]:
        if self.turn_id is not None:
            _tag_reply(getattr(conversation, "conversation", conversation), self.turn_id)
        self.saved_entries = await super().save(conversation, scope=scope)
        return self.saved_entries

    async def load(self, conversation_id: str, *, limit: int | None = None,
                   scope: str | None = None) -> Conversation | None:
        handover, self._handover = self._handover, None
        if handover is not None and handover[:2] == (conversation_id, scope) and limit is None:
            return handover[2]
        return await self.store.load(conversation_id, limit=limit, scope=scope)
