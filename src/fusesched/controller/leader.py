"""Leader election through PostgreSQL: one controller leads, the others stand by.

Leadership is a *session-level advisory lock* (``pg_try_advisory_lock(key)``) held on a
dedicated connection. PostgreSQL releases it when that session ends, so a leader that dies
hands over by itself:

* **the process dies** (crash, SIGKILL, OOM): its kernel closes the socket, the server sees
  the connection end at once and releases the lock — a standby's next attempt (every
  ``poll_s``) gets it;
* **the leader's host or its network goes away**: no FIN ever arrives, so the server finds out
  through TCP keepalives, which this module sets on the session (``tcp_keepalives_idle`` 2 s,
  ``_interval`` 1 s, ``_count`` 3, ``tcp_user_timeout`` 5 s): the lock is released about
  :data:`SERVER_DETECT_S` seconds after the last packet the server got from the leader.

**Fencing.** The leader checks every ``renew_s`` that its session still holds the lock; when a
check fails, or none has succeeded for ``fence_s`` (< :data:`SERVER_DETECT_S`, so *before* the
server can give the lock away), it stops acting as the leader: :meth:`Elector.is_leader` turns
false and ``on_lost`` is called (the controller stops its API and scheduler and exits). A
leader cut off from the database therefore steps down before a standby can step up.

The key is derived from the database and schema (``current_database()``,
``current_schema()``), so clusters that share a PostgreSQL server in separate databases or
schemas elect separately. SQLite has no such lock and no second writer: a standby is refused.
"""

from __future__ import annotations

import contextlib
import hashlib
import logging
import threading
import time
from collections.abc import Callable
from typing import Final

from sqlalchemy import Connection, Engine, create_engine, text
from sqlalchemy.engine import make_url
from sqlalchemy.exc import SQLAlchemyError
from sqlalchemy.pool import NullPool

log = logging.getLogger("fusesched.leader")

#: Server-side keepalive settings of the lock's session (seconds; ``tcp_user_timeout`` in ms).
KEEPALIVE_IDLE_S: Final = 2
KEEPALIVE_INTERVAL_S: Final = 1
KEEPALIVE_COUNT: Final = 3
TCP_USER_TIMEOUT_MS: Final = 5000
#: How long after the last packet from a vanished leader the server drops its session (and
#: with it the lock), at the earliest.
SERVER_DETECT_S: Final = KEEPALIVE_IDLE_S + KEEPALIVE_INTERVAL_S * KEEPALIVE_COUNT

RENEW_S: Final = 1.0
FENCE_S: Final = 3.0
POLL_S: Final = 0.2


class StandbyUnsupported(ValueError):
    """A standby was asked for on a database that cannot elect a leader (SQLite)."""


def check_url(url: str) -> None:
    """Raise :class:`StandbyUnsupported` unless ``url`` is a PostgreSQL URL."""
    if make_url(url).get_backend_name() != "postgresql":
        raise StandbyUnsupported(
            "a standby controller needs PostgreSQL as the store (--db postgresql+psycopg://...): "
            "SQLite cannot be shared by two controllers, so there is nothing to stand by for"
        )


def lock_key(database: str, schema: str) -> int:
    """The advisory lock key (a signed 64-bit integer) for one database and schema."""
    digest = hashlib.blake2b(f"fusesched.leader/{database}/{schema}".encode(), digest_size=8)
    return int.from_bytes(digest.digest(), "big", signed=True)


class Elector:
    """Takes part in the election for ``url``'s database (see the module docstring).

    ``acquire()`` becomes the leader (waiting for it with ``block=True``); from then on a
    background thread checks the lock every ``renew_s`` and a watchdog fences after
    ``fence_s`` without a successful check. ``on_lost(reason)`` is called once, from a
    background thread, when leadership is lost. ``release()`` gives leadership up.
    """

    def __init__(
        self,
        url: str,
        *,
        name: str = "fusesched-controller",
        renew_s: float = RENEW_S,
        fence_s: float = FENCE_S,
        poll_s: float = POLL_S,
        on_lost: Callable[[str], None] | None = None,
    ) -> None:
        check_url(url)
        if not 0 < renew_s < fence_s < SERVER_DETECT_S:
            raise ValueError(
                f"need 0 < renew_s < fence_s < {SERVER_DETECT_S} s (the server's detection time)"
            )
        parsed = make_url(url)
        if parsed.drivername == "postgresql":
            parsed = parsed.set(drivername="postgresql+psycopg")
        self.name = name[:63]  # PostgreSQL's application_name limit
        self.renew_s = renew_s
        self.fence_s = fence_s
        self.poll_s = poll_s
        self.on_lost = on_lost
        self.key: int | None = None
        self.lost_reason: str | None = None
        self._engine: Engine = create_engine(
            parsed, poolclass=NullPool, isolation_level="AUTOCOMMIT"
        )
        self._conn: Connection | None = None
        self._db_lock = threading.Lock()  # one statement at a time on the connection
        self._state = threading.Lock()
        self._leader = False
        self._last_ok = 0.0
        self._stop = threading.Event()
        self._threads: list[threading.Thread] = []

    # ------------------------------------------------------------------ public

    @property
    def is_leader(self) -> bool:
        return self._leader

    def acquire(
        self, block: bool = True, timeout: float | None = None, stop: threading.Event | None = None
    ) -> bool:
        """Try to become the leader; with ``block``, wait (polling every ``poll_s``) until
        leadership is ours, ``timeout`` passes or ``stop`` is set. Returns whether we lead.
        Connection errors while waiting are logged and retried."""
        if self._leader:
            return True
        deadline = None if timeout is None else time.monotonic() + timeout
        announced = False
        while True:
            try:
                if self._try_lock():
                    return True
                if block and not announced:
                    announced = True
                    log.warning("standing by: %s leads; waiting for leadership", self.holder())
            except SQLAlchemyError as exc:
                log.warning("leader election: database unreachable (%s); retrying", _short(exc))
                self._drop_connection()
            if not block or (deadline is not None and time.monotonic() >= deadline):
                return False
            if stop is not None:
                if stop.wait(self.poll_s):
                    return False
            else:
                time.sleep(self.poll_s)

    def holder(self) -> str:
        """Who holds leadership (the application name of its session), for log lines."""
        with self._db_lock:
            conn = self._connection()
            row = conn.execute(
                text(
                    "SELECT a.application_name, a.client_addr, a.pid FROM pg_locks l "
                    "JOIN pg_stat_activity a ON a.pid = l.pid WHERE l.locktype = 'advisory' "
                    "AND l.granted AND l.classid::bigint = :hi AND l.objid::bigint = :lo "
                    "AND l.objsubid = 1"
                ),
                _halves(self._key()),
            ).first()
        if row is None:
            return "nobody (just released)"
        return f"{row[0] or 'a session'} (from {row[1] or 'local socket'}, backend pid {row[2]})"

    def release(self) -> None:
        """Give leadership up (unlock, close the session) and stop the background threads."""
        self._stop.set()
        for thread in self._threads:
            if thread is not threading.current_thread():  # on_lost may call release()
                thread.join(timeout=self.renew_s + 1)
        self._threads = []
        was_leader, self._leader = self._leader, False
        if self._db_lock.acquire(timeout=2.0):
            try:
                if was_leader and self._conn is not None and self.key is not None:
                    # (closing the session below releases it anyway)
                    with contextlib.suppress(SQLAlchemyError):
                        self._conn.execute(text("SELECT pg_advisory_unlock(:k)"), {"k": self.key})
                self._drop_connection()
            finally:
                self._db_lock.release()
        self._engine.dispose()
        if was_leader:
            log.warning("leadership released")

    # ------------------------------------------------------------------ internals

    def _connection(self) -> Connection:
        if self._conn is None:
            conn = self._engine.connect()
            for setting, value in (
                ("application_name", self.name),
                ("tcp_keepalives_idle", str(KEEPALIVE_IDLE_S)),
                ("tcp_keepalives_interval", str(KEEPALIVE_INTERVAL_S)),
                ("tcp_keepalives_count", str(KEEPALIVE_COUNT)),
                ("tcp_user_timeout", str(TCP_USER_TIMEOUT_MS)),
            ):
                conn.execute(text("SELECT set_config(:s, :v, false)"), {"s": setting, "v": value})
            if self.key is None:
                database, schema = conn.execute(
                    text("SELECT current_database(), current_schema()")
                ).one()
                self.key = lock_key(str(database), str(schema))
            self._conn = conn
        return self._conn

    def _key(self) -> int:
        if self.key is None:
            self._connection()
        assert self.key is not None
        return self.key

    def _drop_connection(self) -> None:
        conn, self._conn = self._conn, None
        if conn is not None:
            try:
                conn.invalidate()  # the session ends, and any lock with it
                conn.close()
            except SQLAlchemyError:
                pass

    def _try_lock(self) -> bool:
        with self._db_lock:
            conn = self._connection()
            got = conn.execute(text("SELECT pg_try_advisory_lock(:k)"), {"k": self._key()})
            if not got.scalar_one():
                return False
        with self._state:
            self._leader = True
            self.lost_reason = None
            self._last_ok = time.monotonic()
        self._stop.clear()
        self._threads = [
            threading.Thread(target=self._renew, name="fusesched-leader-renew", daemon=True),
            threading.Thread(target=self._watch, name="fusesched-leader-watch", daemon=True),
        ]
        for thread in self._threads:
            thread.start()
        log.warning("leadership acquired (advisory lock %d)", self.key)
        return True

    def _holds_lock(self) -> bool:
        with self._db_lock:
            if self._conn is None:
                return False
            row = self._conn.execute(
                text(
                    "SELECT EXISTS (SELECT 1 FROM pg_locks WHERE locktype = 'advisory' "
                    "AND pid = pg_backend_pid() AND granted AND classid::bigint = :hi "
                    "AND objid::bigint = :lo AND objsubid = 1)"
                ),
                _halves(self._key()),
            )
            return bool(row.scalar_one())

    def _renew(self) -> None:
        """Check every ``renew_s`` that our session still holds the lock."""
        while not self._stop.wait(self.renew_s):
            try:
                held = self._holds_lock()
            except SQLAlchemyError as exc:
                self._lose(f"lost the connection to PostgreSQL ({_short(exc)})")
                return
            if not held:
                self._lose("the advisory lock is no longer held by this session")
                return
            self._last_ok = time.monotonic()

    def _watch(self) -> None:
        """Fence when no check has succeeded for ``fence_s`` (e.g. a hung connection)."""
        step = min(0.1, self.renew_s / 4)
        while not self._stop.wait(step):
            silent = time.monotonic() - self._last_ok
            if silent > self.fence_s:
                self._lose(f"no answer from PostgreSQL for {silent:.1f} s")
                return

    def _lose(self, reason: str) -> None:
        with self._state:
            if not self._leader:
                return
            self._leader = False
            self.lost_reason = reason
        self._stop.set()
        log.error("leadership lost: %s; this controller stops acting as the leader", reason)
        if self.on_lost is not None:
            self.on_lost(reason)


def _halves(key: int) -> dict[str, int]:
    """How pg_locks shows a bigint advisory key: classid = high 32 bits, objid = low 32."""
    unsigned = key & 0xFFFF_FFFF_FFFF_FFFF
    return {"hi": unsigned >> 32, "lo": unsigned & 0xFFFF_FFFF}


def _short(exc: BaseException) -> str:
    return str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
