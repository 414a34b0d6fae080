"""Engines for the two supported databases, configured for a controller's workload.

SQLite (``sqlite:///path/fusesched.db``): WAL journal (readers never block the writer),
``synchronous=NORMAL`` (a power cut may lose the last commits, never the file), foreign keys
on, a busy timeout so that concurrent writers wait instead of failing, a 64 MiB page cache.
Transactions opened on the :func:`writer` engine start with ``BEGIN IMMEDIATE``: they take the
write lock first, so two writers queue up instead of one failing to upgrade its read lock.

An in-memory SQLite URL (``sqlite://``) gets one shared connection (for tests and demos).

PostgreSQL (``postgresql+psycopg://user@host:port/db``; plain ``postgresql://`` means the same):
a pooled psycopg 3 engine.
"""

from __future__ import annotations

import sqlite3
from pathlib import Path
from typing import Any, Final

from sqlalchemy import Engine, create_engine, event
from sqlalchemy.engine import Connection, make_url
from sqlalchemy.exc import DBAPIError
from sqlalchemy.pool import StaticPool

#: Execution option that marks an engine (or connection) as a writer.
WRITE: Final = "fusesched_write"

BUSY_TIMEOUT_MS: Final = 30_000
#: Page cache per SQLite connection (SQLite's default is 2 MiB; indexes of a million jobs are
#: hundreds of MiB, and inserts touch pages all over them).
SQLITE_CACHE_KIB: Final = 64 * 1024


def make_engine(url: str) -> Engine:
    """An engine for ``url``; only SQLite and PostgreSQL (psycopg 3) URLs are accepted."""
    parsed = make_url(url)
    backend = parsed.get_backend_name()
    if backend == "sqlite":
        connect_args: dict[str, Any] = {"timeout": BUSY_TIMEOUT_MS / 1000}
        if parsed.database in (None, "", ":memory:"):
            # One shared connection, or every connection would see its own empty database.
            connect_args["check_same_thread"] = False
            engine = create_engine(url, connect_args=connect_args, poolclass=StaticPool)
        else:
            engine = create_engine(url, connect_args=connect_args)
        _configure_sqlite(engine)
        return engine
    if backend == "postgresql":
        if parsed.drivername == "postgresql":  # the default driver would be psycopg2
            parsed = parsed.set(drivername="postgresql+psycopg")
        return create_engine(parsed, pool_pre_ping=True)
    raise ValueError(f"unsupported database URL {url!r}: use sqlite:/// or postgresql+psycopg://")


def sqlite_file(url: str) -> Path | None:
    """The file a SQLite ``url`` names (connecting creates it when missing); None for an
    in-memory SQLite database or another database."""
    parsed = make_url(url)
    if parsed.get_backend_name() != "sqlite" or parsed.database in (None, "", ":memory:"):
        return None
    return Path(parsed.database)


def writer(engine: Engine) -> Engine:
    """The same engine (same pool), marked so that its transactions take the write lock."""
    return engine.execution_options(**{WRITE: True})


def _configure_sqlite(engine: Engine) -> None:
    @event.listens_for(engine, "connect")
    def _connect(dbapi_connection: Any, _record: Any) -> None:
        # Let SQLAlchemy, not the driver, decide when transactions begin (see "begin" below).
        dbapi_connection.isolation_level = None
        cursor = dbapi_connection.cursor()
        for pragma in (
            "journal_mode=WAL",
            "synchronous=NORMAL",
            "foreign_keys=ON",
            f"busy_timeout={BUSY_TIMEOUT_MS}",
            f"cache_size=-{SQLITE_CACHE_KIB}",
        ):
            cursor.execute(f"PRAGMA {pragma}")
        cursor.close()

    @event.listens_for(engine, "begin")
    def _begin(connection: Connection) -> None:
        immediate = connection.get_execution_options().get(WRITE, False)
        statement = "BEGIN IMMEDIATE" if immediate else "BEGIN"
        # straight to the driver: through SQLAlchemy's statement path this one line cost as
        # much as the transaction's own statements; its errors are wrapped as that path
        # would (a locked database is an OperationalError to the callers)
        try:
            connection.connection.driver_connection.execute(statement)  # type: ignore[union-attr]
        except sqlite3.Error as exc:
            raise DBAPIError.instance(statement, None, exc, sqlite3.Error) from exc
