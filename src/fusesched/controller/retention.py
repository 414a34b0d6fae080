"""Job-record retention in a running controller: purging the jobs that ended before a cutoff
(store/purge.py), asked for by an admin (``POST /v1/admin/purge``, ``fusesched purge``) or
done about once an hour by :class:`Retention` (``--purge-after``; docs/DEPLOY.md,
"Retention").

The purge runs in the caller's thread (a route's, or the retention thread), never under the
controller's lock and never in a scheduling cycle: it takes the lock only to copy the ids of
the jobs the controller still holds (its live jobs, and the jobs of tasks that outlive their
job), which stay. One purge at a time per controller: another one meanwhile is refused
(:class:`PurgeBusy`).

Fair share reads back the runs that ended within 20 half-lives after a restart
(controller/past_usage.py): a cutoff later than that is refused unless forced, and the
retention thread never goes past it (it purges up to the window's start, and says so once).
"""

from __future__ import annotations

import logging
import math
import threading
import time
import weakref
from typing import TYPE_CHECKING, Final

from sqlalchemy.exc import InterfaceError, OperationalError

from fusesched.controller.logs import job_of
from fusesched.core.past_usage import recalled_since
from fusesched.store.purge import (
    Cursor,
    PurgeCounts,
    Purged,
    check_cutoff,
    purge_jobs,
    when,
)
from fusesched.store.records import EventRow

if TYPE_CHECKING:
    from fusesched.controller.service import Controller

log = logging.getLogger("fusesched.controller")

#: How often the retention thread purges, in seconds.
INTERVAL_S: Final = 3600.0
#: The retention thread's first purge, this long after the controller started (its recovery
#: and the agents' return come first).
FIRST_AFTER_S: Final = 60.0
#: The event each purge that removed jobs writes (no job's: purges never remove it).
PURGED: Final = "Purged"

#: What a database that does not answer raises (down, unreachable, locked, connection lost).
DB_DOWN: Final = (OperationalError, InterfaceError)

_locks: weakref.WeakKeyDictionary[Controller, threading.Lock] = weakref.WeakKeyDictionary()
_locks_guard = threading.Lock()


class PurgeBusy(RuntimeError):
    """Another purge of this controller's records is running."""


def fair_share_since(ctl: Controller, now: float) -> float | None:
    """The earliest end of a run fair share reads back after a restart (``-inf``: all);
    ``None`` when the controller has no fair share (no tenancy)."""
    gate = ctl.core.tenants
    return None if gate is None else recalled_since(gate.policy.half_life_s, now)


def purge(
    ctl: Controller,
    ended_before: float,
    *,
    dry_run: bool = False,
    force: bool = False,
    after: Cursor | None = None,
    budget_s: float | None = None,
    stop: threading.Event | None = None,
    source: str = "api",
) -> Purged:
    """Purge ``ctl``'s records of the jobs that ended before ``ended_before``
    (:func:`~fusesched.store.purge.purge_jobs`), the jobs it still holds and their folders
    but; :class:`~fusesched.store.purge.PurgeRefused` for a cutoff refused
    (:func:`~fusesched.store.purge.check_cutoff`), :class:`PurgeBusy` while another purge
    runs. A purge that removed jobs writes a ``Purged`` event saying what went."""
    now = ctl.clock()
    check_cutoff(ended_before, now, fair_share_since(ctl, now), force)
    lock = _lock_of(ctl)
    if not lock.acquire(blocking=False):
        raise PurgeBusy("another purge of the job records is running; try again when it ends")
    try:
        with ctl.lock:
            keep = set(ctl.jobs)
            keep.update(job_of(task_id) for task_id in ctl.outliving)
        done = purge_jobs(
            ctl.persist.store,
            ended_before,
            keep=keep,
            folders=[ctl.logs.root],
            dry_run=dry_run,
            after=after,
            budget_s=budget_s,
            stop=stop,
        )
    finally:
        lock.release()
    if not dry_run and done.counts.jobs:
        data = {"ended_before": ended_before, "source": source, **done.counts.as_dict()}
        ctl.persist.store.add_events([EventRow(ctl.clock(), PURGED, data=data)])
    return done


def _lock_of(ctl: Controller) -> threading.Lock:
    with _locks_guard:
        lock = _locks.get(ctl)
        if lock is None:
            lock = _locks[ctl] = threading.Lock()
        return lock


class Retention:
    """Purges ``ctl``'s records of the jobs that ended more than ``after_s`` ago, about once
    an hour (first :data:`FIRST_AFTER_S` after :meth:`start`), in a thread of its own."""

    def __init__(
        self,
        ctl: Controller,
        after_s: float,
        *,
        interval_s: float = INTERVAL_S,
        first_after_s: float = FIRST_AFTER_S,
    ) -> None:
        if not (after_s > 0 and math.isfinite(after_s)):
            raise ValueError(f"the retention period must be positive, not {after_s}")
        self.ctl = ctl
        self.after_s = after_s
        self.interval_s = interval_s
        self.first_after_s = first_after_s
        self.runs = 0  # purges done (tests wait on it)
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._clamped = False  # said once that the fair-share window holds it back
        self._unreachable = False  # the last purge found the database unreachable

    def start(self) -> Retention:
        self._thread = threading.Thread(target=self._loop, name="fusesched-retention", daemon=True)
        self._thread.start()
        return self

    def stop(self, wait: bool = True) -> None:
        """Stop (a purge under way stops after its batch); ``wait``: until it has."""
        self._stop.set()
        if wait and self._thread is not None and self._thread is not threading.current_thread():
            self._thread.join(timeout=10)

    def _loop(self) -> None:
        wait = self.first_after_s
        while not self._stop.wait(wait):
            started = time.monotonic()
            self.tick()
            wait = max(0.0, self.interval_s - (time.monotonic() - started))

    def tick(self) -> None:
        """One period's purge, whatever it raises said in the log (the thread outlives it):
        a database that does not answer in one line, as each period it stays so (the next
        period tries again), and once when it answers again; anything else with its
        traceback."""
        try:
            self.run_once()
        except PurgeBusy:
            log.warning("retention: a purge asked for through the API runs; skipped")
        except DB_DOWN as error:
            self._unreachable = True
            log.warning(
                "retention: the purge failed, the database did not answer (%s); "
                "trying again at the next period, in %.0f s",
                _first_line(error),
                self.interval_s,
            )
        except BaseException:  # (SystemExit too: the thread must not end in silence)
            log.exception("retention: the purge failed; trying again in %.0f s", self.interval_s)
        else:
            if self._unreachable:
                log.warning("retention: the database answers again; the purge ran")
            self._unreachable = False
        self.runs += 1

    def run_once(self) -> PurgeCounts:
        """One purge now (up to the fair-share window's start); what it removed."""
        now = self.ctl.clock()
        cutoff = now - self.after_s
        since = fair_share_since(self.ctl, now)
        if since is not None and cutoff > since:
            if not self._clamped:
                log.warning(
                    "retention: --purge-after keeps %.0f s of jobs, but fair share reads back "
                    "the runs of 20 half-lives; the jobs in that window stay",
                    self.after_s,
                )
                self._clamped = True
            if math.isinf(since):
                return PurgeCounts()
            cutoff = since
        if cutoff <= 0:  # (nothing ended before 1970)
            return PurgeCounts()
        done = purge(self.ctl, cutoff, source="retention", stop=self._stop)
        if done.counts.jobs:
            log.warning(
                "retention: removed the records of the jobs that ended before %s: %s",
                when(cutoff),
                done.counts.text(),
            )
        return done.counts


def _first_line(error: BaseException) -> str:
    """The driver's message of ``error`` (SQLAlchemy's wraps it), its first line."""
    found = getattr(error, "orig", None) or error
    lines = str(found).strip().splitlines()
    return " ".join(lines[0].split())[:300] if lines else type(found).__name__
