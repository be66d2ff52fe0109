"""Database connections and schema migrations (Alembic's scripts: the dinfer_migrations package)."""

from __future__ import annotations

import os
from collections.abc import Iterator
from contextlib import contextmanager, suppress
from functools import lru_cache
from pathlib import Path
from typing import Any
from weakref import WeakSet

from sqlalchemy import Connection, CursorResult, Engine, Executable, create_engine, event
from sqlalchemy.engine import make_url
from sqlalchemy.exc import ArgumentError, DBAPIError, OperationalError
from sqlalchemy.orm import Session, SessionTransactionOrigin, sessionmaker

from dinfer_batch import fastjson
from dinfer_batch.config import DbPool, Settings
from dinfer_batch.errors import Unavailable, UserError
from dinfer_batch.redact import mask
from dinfer_migrations import SCRIPTS

READING = "dinfer_batch_reading"  # an execution option: this connection only reads


def _make_sqlite_concurrent(engine: Engine) -> None:
    """WAL lets readers run beside the writer; BEGIN IMMEDIATE takes the write lock up front
    so that concurrent processes wait (busy_timeout) instead of failing to upgrade a lock.
    A reading session (`sessions()` without `.begin()`: _Session) begins a deferred
    transaction instead, which never waits for the writer (docs/adr/017)."""

    @event.listens_for(engine, "connect")
    def _on_connect(dbapi_connection, _record) -> None:  # noqa: ANN001
        dbapi_connection.isolation_level = None
        cursor = dbapi_connection.cursor()
        cursor.execute("PRAGMA journal_mode=WAL")
        cursor.execute("PRAGMA synchronous=NORMAL")
        cursor.execute("PRAGMA busy_timeout=60000")
        cursor.close()

    @event.listens_for(engine, "begin")
    def _on_begin(connection) -> None:  # noqa: ANN001
        reading = connection.get_execution_options().get(READING)
        connection.exec_driver_sql("BEGIN" if reading else "BEGIN IMMEDIATE")


class _Session(Session):
    """A session that only reads unless begun with `sessions.begin()`: every write of the
    service is in `with sessions.begin()`, every plain `with sessions()` reads. On SQLite
    the plain one gets a connection flagged READING (a deferred BEGIN, so a key lookup or
    a listing never waits behind an ingest's write transaction); elsewhere nothing
    changes."""

    def get_bind(self, *args: Any, **kwargs: Any) -> Any:
        bind = super().get_bind(*args, **kwargs)
        begun = self.get_transaction()
        if isinstance(bind, Engine) and bind.dialect.name == "sqlite" and (
                begun is None or begun.origin is SessionTransactionOrigin.AUTOBEGIN):
            return _reading(bind)
        return bind


@lru_cache(maxsize=8)
def _reading(engine: Engine) -> Engine:
    return engine.execution_options(**{READING: True})


# the engines this process made: a forked child (dinfer_batch/parallel.py) must not use its
# parent's pooled connections, whose sockets the parent goes on using (SQLAlchemy's recipe)
_MADE: WeakSet[Engine] = WeakSet()


def _forget_parents_connections() -> None:
    for engine in _MADE:
        engine.dispose(close=False)


os.register_at_fork(after_in_child=_forget_parents_connections)


@lru_cache(maxsize=8)
def db_engine(url: str, pool: DbPool = DbPool()) -> Engine:
    """The process's engine on `url`, holding at most `pool.most` connections. On
    PostgreSQL it works the same directly and through PgBouncer in transaction pooling:
    psycopg never prepares statements (`prepare_threshold=None`: PgBouncer 1.18, Debian
    12's, cannot keep a prepared statement with its client), and no state outlives a
    transaction (docs/adr/056-connection-budget-and-pgbouncer.md)."""
    try:
        parsed = make_url(url)
    except ArgumentError as exc:
        raise UserError(f"DINFER_BATCH_DATABASE_URL={mask(url)!r} is not a database URL; e.g. "
                        "sqlite:////abs/path/jobs.db or "
                        "postgresql+psycopg://user@host:5432/dbname") from exc
    json_codec = {"json_serializer": fastjson.dumps, "json_deserializer": fastjson.loads}
    if parsed.get_backend_name() != "sqlite":
        # a server that drops packets must fail a connection attempt, not hang it for
        # minutes (workers retry: storage/retry.py)
        made = create_engine(url, pool_pre_ping=True, pool_size=pool.size,
                             max_overflow=pool.overflow, pool_timeout=pool.timeout,
                             connect_args={"connect_timeout": 10, "prepare_threshold": None},
                             **json_codec)
        _MADE.add(made)
        return made
    if parsed.database and parsed.database != ":memory:":
        _create_private(Path(parsed.database))
    engine = create_engine(url, **json_codec)
    _make_sqlite_concurrent(engine)
    return engine


def changed(session: Session, statement: Executable) -> int:
    """How many rows an UPDATE or DELETE matched: what every conditional update decides on."""
    result = session.execute(statement)
    assert isinstance(result, CursorResult)
    return result.rowcount


@contextmanager
def one_statement_each(sessions: sessionmaker[Session]) -> Iterator[Connection]:
    """A connection on which each statement is a transaction of its own where the
    database allows it (PostgreSQL: autocommit), so the rows a statement locks are held
    only while it runs, never across the client's next round trip (through PgBouncer a
    lock held that long holds a server connection, and every client queued on the row
    holds another). On SQLite, one write transaction for all of them: its writes take
    turns anyway."""
    engine = sessions.kw["bind"]
    if engine.dialect.name == "sqlite":
        with engine.begin() as connection:
            yield connection
        return
    with engine.connect().execution_options(isolation_level="AUTOCOMMIT") as connection:
        yield connection


def _create_private(path: Path) -> None:
    """Create the SQLite file owner-only (0600) before SQLite opens it: it holds every
    prompt and result and the API keys' hashes. SQLite gives its -wal and -shm files the
    same permissions. An existing file keeps its own."""
    path.parent.mkdir(mode=0o700, parents=True, exist_ok=True)
    with suppress(FileExistsError):
        os.close(os.open(path, os.O_CREAT | os.O_EXCL | os.O_WRONLY, 0o600))


def sessions(url: str, pool: DbPool = DbPool()) -> sessionmaker[Session]:
    return sessionmaker(db_engine(url, pool), class_=_Session, expire_on_commit=False)


def alembic_config() -> Any:
    from alembic.config import Config

    config = Config()
    config.set_main_option("script_location", str(SCRIPTS))
    return config


def upgrade(url: str) -> tuple[str | None, str | None]:
    """Apply every Alembic migration up to head; returns the revision before (None: no
    schema) and after."""
    from alembic import command
    from alembic.runtime.migration import MigrationContext

    config = alembic_config()
    with _reachable(url):
        connection = db_engine(url).connect()
    with connection, connection.begin():
        before = MigrationContext.configure(connection).get_current_revision()
        config.attributes["connection"] = connection
        command.upgrade(config, "head")
        return before, MigrationContext.configure(connection).get_current_revision()


def ready(url: str, pool: DbPool = DbPool()) -> sessionmaker[Session]:
    """Sessions on a database whose schema is at the latest migration: a SQLite database
    (the embedded default) is migrated on the spot; any other database must have been
    upgraded with `dinfer-batch db upgrade`."""
    from alembic.runtime.migration import MigrationContext
    from alembic.script import ScriptDirectory

    engine = db_engine(url, pool)
    with _reachable(url), engine.connect() as connection:
        current = MigrationContext.configure(connection).get_current_revision()
    if current == ScriptDirectory.from_config(alembic_config()).get_current_head():
        return sessions(url, pool)
    if engine.dialect.name != "sqlite":
        shown = mask(url)
        state = "has no schema" if current is None else f"is at an older schema ({current})"
        raise UserError(f"database {shown} {state}; run `dinfer-batch db upgrade` first")
    upgrade(url)
    return sessions(url, pool)


def ready_for(config: Settings) -> sessionmaker[Session]:
    """`ready` on the process's database, within its connection budget."""
    return ready(config.database_url, config.db_pool)


@contextmanager
def _reachable(url: str) -> Iterator[None]:
    """A database that refuses the connection is a setting to fix (UserError), not a crash."""
    try:
        yield
    except OperationalError as exc:
        raise Unavailable(unreachable(url, exc)) from exc


def unreachable(url: str, exc: DBAPIError) -> str:
    """One line saying which database cannot be reached and why."""
    shown = mask(url)
    reason = mask(" ".join(str(exc.orig or exc).split()))
    return f"cannot connect to the database {shown} ({reason}); check DINFER_BATCH_DATABASE_URL"
