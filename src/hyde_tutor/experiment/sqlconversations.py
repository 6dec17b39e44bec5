"""Conversations of the served tutor in its SQL database: a pydantic-ai ``ConversationStore``.

:class:`SqlConversationStore` implements the store's five primitives on the tables of
:class:`~hyde_tutor.experiment.sqlstore.SqlDatabase` (SQLite or PostgreSQL), so every worker process continues
the same conversations. A save is one transaction: the new entries and the record, the record replaced only
when its revision is still the one the conversation was loaded with (a compare-and-swap ``UPDATE``), so two
writers never overwrite each other unnoticed; the loser gets ``ConversationConflict``.

Pass the learner as ``scope`` (the UI adapter's ``conversation_scope``): a conversation saved under another
scope reads as one the store does not have. The server also prefixes conversation ids per learner, so a
guessed id reaches nothing. ``delete_record`` deletes the record and keeps the entries (a concurrent save or
a fork may still point at them).
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import Sequence
from datetime import datetime, timezone
from typing import Any

from pydantic import TypeAdapter
from pydantic_ai.conversation_store import (ConversationConflict, ConversationEntry, ConversationRecord,
                                            ConversationStore)
from pydantic_ai.messages import ModelMessage
from pydantic_ai.tools import DeferredToolRequests
from pydantic_ai.usage import RunUsage

from .sqlstore import SqlDatabase

__all__ = ("SqlConversationStore",)

_message_ta: TypeAdapter[ModelMessage] = TypeAdapter(ModelMessage)
_usage_ta: TypeAdapter[RunUsage] = TypeAdapter(RunUsage)
_deferred_ta: TypeAdapter[DeferredToolRequests | None] = TypeAdapter(DeferredToolRequests | None)
_NO_LIMIT = 2**31 - 1


def _record_data(record: ConversationRecord) -> str:
    return json.dumps({
        "usage": _usage_ta.dump_python(record.usage, mode="json"),
        "deferred_tool_requests": _deferred_ta.dump_python(record.deferred_tool_requests, mode="json"),
        "forked_from": record.forked_from, "forked_at": record.forked_at, "branches": list(record.branches),
        "updated_at": record.updated_at.isoformat(), "format_version": record.format_version,
    })


def _entry_from(row: Any) -> ConversationEntry:
    return ConversationEntry(id=row["id"], parent_id=row["parent_id"], kind=row["kind"],
                             message=_message_ta.validate_json(row["message"]))


def _record_from(row: Any) -> ConversationRecord:
    data = json.loads(row["data"])
    return ConversationRecord(
        conversation_id=row["conversation_id"], head_id=row["head_id"], scope=row["scope"], revision=row["revision"],
        usage=_usage_ta.validate_python(data["usage"]),
        deferred_tool_requests=_deferred_ta.validate_python(data["deferred_tool_requests"]),
        forked_from=data["forked_from"], forked_at=data["forked_at"], branches=list(data["branches"]),
        updated_at=datetime.fromisoformat(data["updated_at"]), format_version=data.get("format_version", 1))


class SqlConversationStore(ConversationStore):
    """A ``ConversationStore`` in the served tutor's database (SQLite or PostgreSQL)."""

    def __init__(self, database: SqlDatabase | str) -> None:
        self.database = database if isinstance(database, SqlDatabase) else SqlDatabase(database)
        self._history: Any = None

    def _history_query(self) -> Any:
        """The history's recursive query, built once (building it took more CPU than running it)."""
        if self._history is None:
            import sqlalchemy as sa

            e = self.database.entries
            columns = (e.c.id, e.c.parent_id, e.c.kind, e.c.message)
            chain = sa.select(*columns, sa.literal(1).label("depth")).where(
                e.c.id == sa.bindparam("head")).cte("chain", recursive=True)
            step = sa.select(*columns, (chain.c.depth + 1).label("depth")).join(
                chain, e.c.id == chain.c.parent_id).where(chain.c.depth < sa.bindparam("limit"))
            chain = chain.union_all(step)
            self._history = sa.select(chain).order_by(chain.c.depth.desc())
        return self._history

    async def read_record(self, conversation_id: str) -> ConversationRecord | None:
        return await self.database.read(self._read_record_sync, conversation_id)

    def _read_record_sync(self, conversation_id: str) -> ConversationRecord | None:
        c = self.database.conversations
        with self.database.reader.begin() as conn:
            row = conn.execute(c.select().where(c.c.conversation_id == conversation_id)).mappings().first()
        return None if row is None else _record_from(row)

    async def read_records(self, *, scope: str | None = None, limit: int | None = None) -> Sequence[ConversationRecord]:
        return await self.database.read(self._read_records_sync, scope, limit)

    def _read_records_sync(self, scope: str | None, limit: int | None) -> list[ConversationRecord]:
        c = self.database.conversations
        query = c.select().order_by(c.c.updated_at.desc())
        if scope is not None:
            query = query.where(c.c.scope == scope)
        if limit is not None:
            query = query.limit(limit)
        with self.database.reader.begin() as conn:
            return [_record_from(row) for row in conn.execute(query).mappings()]

    async def write_record(self, record: ConversationRecord, *, new_entries: Sequence[ConversationEntry] = (),
                           expected_revision: str | None) -> None:
        await asyncio.to_thread(self._write_record_sync, record, list(new_entries), expected_revision)

    def _write_record_sync(self, record: ConversationRecord, new_entries: list[ConversationEntry],
                           expected_revision: str | None) -> None:
        import sqlalchemy as sa

        c, e = self.database.conversations, self.database.entries
        values = {"scope": record.scope, "head_id": record.head_id, "revision": record.revision,
                  "updated_at": record.updated_at.replace(tzinfo=record.updated_at.tzinfo or timezone.utc).timestamp(),
                  "data": _record_data(record)}
        try:
            with self.database.engine.begin() as conn:
                new_ids = {entry.id for entry in new_entries}
                if record.head_id is not None and record.head_id not in new_ids:
                    if conn.execute(e.select().with_only_columns(e.c.id).where(e.c.id == record.head_id)).first() is None:
                        raise ConversationConflict(record.conversation_id)
                if new_entries:
                    conn.execute(e.insert(), [{"id": entry.id, "parent_id": entry.parent_id, "kind": entry.kind,
                                               "message": _message_ta.dump_json(entry.message).decode()}
                                              for entry in new_entries])
                if expected_revision is None:
                    conn.execute(c.insert().values(conversation_id=record.conversation_id, **values))
                else:
                    done = conn.execute(c.update().where(c.c.conversation_id == record.conversation_id,
                                                         c.c.revision == expected_revision).values(**values))
                    if done.rowcount != 1:
                        raise ConversationConflict(record.conversation_id)
        except sa.exc.IntegrityError as exc:  # a record with this id appeared meanwhile (another worker)
            raise ConversationConflict(record.conversation_id) from exc

    async def delete_record(self, conversation_id: str, *, expected_revision: str) -> None:
        await asyncio.to_thread(self._delete_record_sync, conversation_id, expected_revision)

    def _delete_record_sync(self, conversation_id: str, expected_revision: str) -> None:
        c = self.database.conversations
        with self.database.engine.begin() as conn:
            done = conn.execute(c.delete().where(c.c.conversation_id == conversation_id,
                                                 c.c.revision == expected_revision))
            if done.rowcount != 1:
                raise ConversationConflict(conversation_id)

    async def read_entry(self, entry_id: str) -> ConversationEntry:
        return await self.database.read(self._read_entry_sync, entry_id)

    def _read_entry_sync(self, entry_id: str) -> ConversationEntry:
        with self.database.reader.begin() as conn:
            return self._entry(conn, entry_id)

    def _entry(self, conn: Any, entry_id: str) -> ConversationEntry:
        e = self.database.entries
        row = conn.execute(e.select().where(e.c.id == entry_id)).mappings().first()
        if row is None:
            raise LookupError(f"conversation entry {entry_id!r} is not stored")
        return _entry_from(row)

    async def read_history(self, head_id: str | None, *, limit: int | None = None) -> list[ConversationEntry]:
        """The history up to ``head_id`` in one query (a recursive CTE walking the parent links, SQLite and
        PostgreSQL alike), not one query per entry; ``LookupError`` names an entry the chain needs and the
        database lacks."""
        return await self.database.read(self._read_history_sync, head_id, limit)

    def _read_history_sync(self, head_id: str | None, limit: int | None) -> list[ConversationEntry]:
        if head_id is None or limit == 0:
            return []
        with self.database.reader.begin() as conn:
            rows = conn.execute(self._history_query(), {"head": head_id, "limit": limit or _NO_LIMIT}).mappings().all()
        missing = head_id if not rows else rows[0]["parent_id"]
        if missing is not None and (limit is None or len(rows) < limit):
            raise LookupError(f"conversation entry {missing!r} is not stored")
        return [_entry_from(row) for row in rows]
