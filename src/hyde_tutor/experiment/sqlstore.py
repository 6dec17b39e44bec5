"""The served tutor's database: the event log (:class:`SqlEventLog`) on SQLAlchemy, SQLite or PostgreSQL.

One database holds what the server keeps: the conversations (:mod:`~hyde_tutor.experiment.sqlconversations`)
and the A/B event log (turns, their retrievals, ratings, experiment changes). Every worker process, and
every machine, writes to it, so ``ab-report --db`` reads one source::

    log = open_event_log("sqlite:////srv/hyde/served.db")      # or a Settings, or None (the configured one)
    log.add_turn(TurnRecord(...))

SQLite (the default: ``HYDE_DATA_DIR/served.db``) runs in WAL mode with a busy timeout; a write transaction
begins ``IMMEDIATE`` (writers from several processes queue for the lock instead of failing with "database is
locked"), a read (``SqlDatabase.reader``) begins deferred and never waits behind a writer (WAL readers read the
last committed state). Neither engine puts the SQL parameters (a learner's text) into its error messages. PostgreSQL is reached by URL (``postgresql://user:pw@host/db``, driver
psycopg 3); its outcome updates are single ``UPDATE`` statements, so concurrent writers never lose one.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import Callable, Sequence
from dataclasses import asdict, fields
from pathlib import Path
from typing import Any, TypeVar

from ..config import Settings
from .events import OUTCOME_FIELDS, ExperimentEvent, RatingEvent, TurnRecord
from ..plugin.monitor import RetrievalRecord

_T = TypeVar("_T")

__all__ = ("SqlDatabase", "SqlEventLog", "database_url", "open_database", "open_event_log")

BUSY_TIMEOUT_S = 30.0
"""How long a SQLite writer waits for another process's transaction before it fails (never forever)."""
DB_FILE = "served.db"


def database_url(settings: Settings) -> str:
    """The configured database: ``server.database_url``, else the SQLite file ``data_dir/served.db``."""
    if settings.server.database_url:
        return settings.server.database_url
    return f"sqlite:///{(settings.data_dir / DB_FILE).resolve()}"


def _normalised(url: str) -> str:
    """``postgresql://`` and ``postgres://`` go through psycopg 3 (SQLAlchemy's default is psycopg2)."""
    for prefix in ("postgresql://", "postgres://"):
        if url.startswith(prefix):
            return "postgresql+psycopg://" + url[len(prefix):]
    return url


class SqlDatabase:
    """An engine and the tables of the served tutor (created when missing)."""

    def __init__(self, url: str) -> None:
        import sqlalchemy as sa

        self.url = _normalised(url)
        self.is_sqlite = self.url.startswith("sqlite")
        if self.is_sqlite:
            path = self.url.split(":///", 1)[-1]
            if path and path != ":memory:":
                Path(path).parent.mkdir(parents=True, exist_ok=True)
            self.engine = sa.create_engine(self.url, connect_args={"timeout": BUSY_TIMEOUT_S, "check_same_thread": False},
                                           hide_parameters=True)
            sa.event.listen(self.engine, "connect", _sqlite_connect)
            sa.event.listen(self.engine, "begin", _sqlite_begin)
        else:
            self.engine = sa.create_engine(self.url, pool_pre_ping=True, pool_size=5, max_overflow=10,
                                           pool_timeout=BUSY_TIMEOUT_S, hide_parameters=True)
        self.reader = self.engine.execution_options(hyde_read_only=True)
        """The engine for reads: its transactions begin deferred on SQLite (``engine`` is for writes)."""
        self.metadata = sa.MetaData()
        self.turns = sa.Table("hyde_turns", self.metadata, *_turn_columns(sa))
        self.retrievals = sa.Table(
            "hyde_retrievals", self.metadata,
            sa.Column("id", sa.Integer, primary_key=True, autoincrement=True),
            sa.Column("turn_id", sa.String(64), index=True), sa.Column("timestamp", sa.Float),
            sa.Column("arm", sa.String(32)), sa.Column("experiment", sa.String(200)), sa.Column("data", sa.Text))
        self.ratings = sa.Table(
            "hyde_ratings", self.metadata,
            sa.Column("id", sa.Integer, primary_key=True, autoincrement=True),
            sa.Column("turn_id", sa.String(64), index=True), sa.Column("subject", sa.String(300)),
            sa.Column("rating", sa.Integer), sa.Column("reason", sa.Text), sa.Column("timestamp", sa.Float))
        self.experiments = sa.Table(
            "hyde_experiment_events", self.metadata,
            sa.Column("id", sa.Integer, primary_key=True, autoincrement=True),
            sa.Column("change", sa.String(16)), sa.Column("experiment", sa.String(200)),
            sa.Column("hyde_share", sa.Float), sa.Column("enabled", sa.Boolean), sa.Column("actor", sa.String(200)),
            sa.Column("timestamp", sa.Float))
        self.conversations = sa.Table(
            "hyde_conversations", self.metadata,
            sa.Column("conversation_id", sa.String(300), primary_key=True), sa.Column("scope", sa.String(300), index=True),
            sa.Column("head_id", sa.String(64)), sa.Column("revision", sa.String(64)), sa.Column("updated_at", sa.Float),
            sa.Column("data", sa.Text))
        self.entries = sa.Table(
            "hyde_conversation_entries", self.metadata,
            sa.Column("id", sa.String(64), primary_key=True), sa.Column("parent_id", sa.String(64)),
            sa.Column("kind", sa.String(16)), sa.Column("message", sa.Text))
        self._create()

    async def read(self, call: Callable[..., _T], *args: Any) -> _T:
        """Run the reading function ``call(*args)`` for a coroutine: on SQLite at once (a read in WAL mode does not
        wait for writers and takes well under a millisecond, while a worker thread waited for the GIL behind the
        busy event loop: the served drill's conversation loads went from 64–134 to 21–23 ms p50 and its turns a
        second up by 8 %); on PostgreSQL (a network round trip) in a worker thread. Writes always take a thread."""
        if self.is_sqlite:
            return call(*args)
        return await asyncio.to_thread(call, *args)

    def _create(self) -> None:
        import sqlalchemy as sa

        try:
            self.metadata.create_all(self.engine)
        except sa.exc.IntegrityError:  # PostgreSQL: another worker created them at the same moment
            self.metadata.create_all(self.engine)
        except sa.exc.OperationalError as exc:
            raise RuntimeError(f"cannot open the served tutor's database {self.describe()}: {exc.orig}; check "
                               "HYDE_SERVER__DATABASE_URL (or that HYDE_DATA_DIR is writable)") from exc
        self._add_missing_turn_columns()

    def _add_missing_turn_columns(self) -> None:
        """A database made before a :class:`TurnRecord` field existed gets its column (nullable; old rows read the
        field's default)."""
        import sqlalchemy as sa

        have = {c["name"] for c in sa.inspect(self.engine).get_columns(self.turns.name)}
        for column in self.turns.columns:
            if column.name not in have:
                kind = column.type.compile(dialect=self.engine.dialect)
                try:
                    with self.engine.begin() as conn:
                        conn.exec_driver_sql(f'ALTER TABLE {self.turns.name} ADD COLUMN "{column.name}" {kind}')
                except sa.exc.DatabaseError:  # another worker added it at the same moment
                    if column.name not in {c["name"] for c in sa.inspect(self.engine).get_columns(self.turns.name)}:
                        raise

    def describe(self) -> str:
        """The URL without its password."""
        return self.engine.url.render_as_string(hide_password=True)

    def close(self) -> None:
        self.engine.dispose()


def _sqlite_connect(dbapi_connection: Any, _record: Any) -> None:
    dbapi_connection.isolation_level = None  # SQLAlchemy's BEGIN below, not the driver's own
    cursor = dbapi_connection.cursor()
    cursor.execute("PRAGMA journal_mode=WAL")
    cursor.execute(f"PRAGMA busy_timeout={int(BUSY_TIMEOUT_S * 1000)}")
    cursor.execute("PRAGMA synchronous=NORMAL")
    cursor.close()


def _sqlite_begin(connection: Any) -> None:
    if connection.get_execution_options().get("hyde_read_only"):
        connection.exec_driver_sql("BEGIN")  # a read: no lock until it reads, and a WAL reader never waits
    else:
        connection.exec_driver_sql("BEGIN IMMEDIATE")  # take the write lock up front: no upgrade deadlock later


_SQL_TYPES = {"str": "String", "int": "Integer", "float": "Float", "bool": "Boolean"}


def _turn_columns(sa: Any) -> list[Any]:
    """One column per :class:`TurnRecord` field (a field added later gets its column in a new database)."""
    columns = []
    for f in fields(TurnRecord):
        kind = str(f.type).replace(" ", "")
        nullable = kind.endswith("|None")
        base = kind.removesuffix("|None")
        if f.name == "turn_id":
            columns.append(sa.Column(f.name, sa.String(64), primary_key=True))
        elif base.startswith("tuple") or base.startswith("list") or base.startswith("dict"):
            columns.append(sa.Column(f.name, sa.Text, nullable=True))
        elif base == "str":
            columns.append(sa.Column(f.name, sa.Text, nullable=nullable, index=f.name in ("subject", "experiment")))
        else:
            columns.append(sa.Column(f.name, getattr(sa, _SQL_TYPES.get(base, "Text")), nullable=nullable))
    return columns


def _turn_row(turn: TurnRecord) -> dict[str, Any]:
    row = asdict(turn)
    for key, value in row.items():
        if isinstance(value, (tuple, list, dict)):
            row[key] = json.dumps(value, ensure_ascii=False)
    return row


def _turn_from_row(data: Any) -> TurnRecord:
    kwargs: dict[str, Any] = {}
    for f in fields(TurnRecord):
        if f.name not in data:
            continue
        value = data[f.name]
        if value is None and not str(f.type).endswith("None"):
            continue  # a column added after the row was written: the field's default
        if isinstance(value, str) and str(f.type).startswith(("tuple", "list", "dict")):
            value = json.loads(value)
            value = tuple(value) if str(f.type).startswith("tuple") else value
        kwargs[f.name] = value
    return TurnRecord(**kwargs)


def _experiment_event(row: Any) -> ExperimentEvent:
    return ExperimentEvent(change=row.change, experiment=row.experiment, hyde_share=row.hyde_share,
                           enabled=bool(row.enabled), actor=row.actor, timestamp=row.timestamp)


def _retrieval(data: str) -> RetrievalRecord:
    known = {f.name for f in fields(RetrievalRecord)}
    return RetrievalRecord(**{k: v for k, v in json.loads(data).items() if k in known})


class SqlEventLog:
    """An :class:`~hyde_tutor.experiment.events.EventLog` in a SQL database (thread- and process-safe)."""

    def __init__(self, database: SqlDatabase | str) -> None:
        self.database = database if isinstance(database, SqlDatabase) else SqlDatabase(database)

    def add_turn(self, turn: TurnRecord) -> None:
        import sqlalchemy as sa

        try:
            with self.database.engine.begin() as conn:
                conn.execute(self.database.turns.insert().values(**_turn_row(turn)))
        except sa.exc.IntegrityError as exc:
            raise ValueError(f"turn {turn.turn_id!r} is already stored") from exc

    def update_turn(self, turn_id: str, **outcomes: Any) -> bool:
        unknown = set(outcomes) - OUTCOME_FIELDS
        if unknown:
            raise ValueError(f"not outcome fields: {sorted(unknown)}; allowed: {sorted(OUTCOME_FIELDS)}")
        if not outcomes:
            return self.turn(turn_id) is not None
        t = self.database.turns
        with self.database.engine.begin() as conn:
            return conn.execute(t.update().where(t.c.turn_id == turn_id).values(**outcomes)).rowcount > 0

    def add_retrieval(self, record: RetrievalRecord, turn_id: str | None) -> None:
        with self.database.engine.begin() as conn:
            conn.execute(self.database.retrievals.insert().values(
                turn_id=turn_id, timestamp=record.timestamp, arm=record.arm, experiment=record.experiment,
                data=json.dumps(asdict(record), ensure_ascii=True)))

    def add_rating(self, rating: RatingEvent) -> bool:
        if rating.rating not in (1, -1):
            raise ValueError(f"a rating is +1 or -1, got {rating.rating!r}")
        t = self.database.turns
        with self.database.engine.begin() as conn:
            owner = conn.execute(t.select().with_only_columns(t.c.subject).where(t.c.turn_id == rating.turn_id)).scalar()
            if owner is None or owner != rating.subject:
                return False
            conn.execute(self.database.ratings.insert().values(
                turn_id=rating.turn_id, subject=rating.subject, rating=rating.rating, reason=rating.reason,
                timestamp=rating.timestamp))
            conn.execute(t.update().where(t.c.turn_id == rating.turn_id).values(
                rating=rating.rating, rating_reason=rating.reason))
            return True

    def add_experiment_event(self, event: ExperimentEvent) -> None:
        with self.database.engine.begin() as conn:
            conn.execute(self.database.experiments.insert().values(**asdict(event)))

    def turns(self, experiment: str | None = None) -> list[TurnRecord]:
        t = self.database.turns
        query = t.select().order_by(t.c.timestamp, t.c.turn_id)
        if experiment is not None:
            query = query.where(t.c.experiment == experiment)
        with self.database.reader.begin() as conn:
            return [_turn_from_row(row) for row in conn.execute(query).mappings()]

    def turn(self, turn_id: str) -> TurnRecord | None:
        """One stored turn, or None."""
        t = self.database.turns
        with self.database.reader.begin() as conn:
            row = conn.execute(t.select().where(t.c.turn_id == turn_id)).mappings().first()
        return None if row is None else _turn_from_row(row)

    def last_turn(self, subject: str, conversation_id: str) -> TurnRecord | None:
        """The subject's latest turn in a conversation (the one a rephrase would follow), or None."""
        t = self.database.turns
        query = (t.select().where(t.c.subject == subject, t.c.conversation_id == conversation_id)
                 .order_by(t.c.timestamp.desc()).limit(1))
        with self.database.reader.begin() as conn:
            row = conn.execute(query).mappings().first()
        return None if row is None else _turn_from_row(row)

    def rated(self, subject: str, turn_ids: Sequence[str]) -> dict[str, tuple[int, str | None]]:
        t = self.database.turns
        query = t.select().with_only_columns(t.c.turn_id, t.c.rating, t.c.rating_reason).where(
            t.c.subject == subject, t.c.turn_id.in_(list(turn_ids)), t.c.rating.is_not(None))
        with self.database.reader.begin() as conn:
            return {row.turn_id: (row.rating, row.rating_reason) for row in conn.execute(query)}

    def _rows(self, table: Any, column: str, value: str | None) -> list[Any]:
        """A table's rows oldest first; ``value`` given: only those whose ``column`` equals it."""
        query = table.select().order_by(table.c.id)
        if value is not None:
            query = query.where(table.c[column] == value)
        with self.database.reader.begin() as conn:
            return list(conn.execute(query))

    def retrievals(self, turn_id: str | None = None) -> list[tuple[str | None, RetrievalRecord]]:
        return [(row.turn_id, _retrieval(row.data)) for row in self._rows(self.database.retrievals, "turn_id", turn_id)]

    def ratings(self, turn_id: str | None = None) -> list[RatingEvent]:
        """Every rating, oldest first (``turn_id`` given: that turn's)."""
        return [RatingEvent(turn_id=row.turn_id, subject=row.subject, rating=row.rating, reason=row.reason,
                            timestamp=row.timestamp) for row in self._rows(self.database.ratings, "turn_id", turn_id)]

    def experiment_events(self, experiment: str | None = None) -> list[ExperimentEvent]:
        return [_experiment_event(row) for row in self._rows(self.database.experiments, "experiment", experiment)]

    def latest_experiment_event(self) -> ExperimentEvent | None:
        """The experiment running now, as the operator last set it (None: never set; the settings decide)."""
        e = self.database.experiments
        with self.database.reader.begin() as conn:
            row = conn.execute(e.select().order_by(e.c.id.desc()).limit(1)).first()
        return None if row is None else _experiment_event(row)

    def close(self) -> None:
        self.database.close()


def open_database(url_or_settings: str | Settings | None = None) -> SqlDatabase:
    """The served tutor's database: a URL, the one ``settings`` name, or (None) the configured one."""
    if url_or_settings is None or isinstance(url_or_settings, Settings):
        url_or_settings = database_url(url_or_settings or Settings())
    return SqlDatabase(url_or_settings)


def open_event_log(url_or_settings: str | Settings | None = None) -> SqlEventLog:
    """The served tutor's event log (what ``ab-report --db`` reads).

    Args:
        url_or_settings: an SQLAlchemy URL (``sqlite:///path/served.db``, ``postgresql://user:pw@host/db``),
            a :class:`~hyde_tutor.config.Settings` (``server.database_url``, else ``data_dir/served.db``), or
            None for the configured one (environment and ``.env``).
    """
    return SqlEventLog(open_database(url_or_settings))
