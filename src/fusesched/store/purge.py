"""Job-record retention (Slurm's ``PurgeJobAfter``, Kubernetes' ``ttlSecondsAfterFinished``):
the jobs that ended before a cutoff go, each whole, with its tasks, its events, its job tokens,
its folder in the controller's data directory, and the submitting environments no job names
any more.

Never purged:

* a job that has not ended (Pending or Running; a requeued job waits again), or that ended at
  no recorded time;
* a job the caller keeps (``keep``: the controller's live jobs, the jobs of tasks that outlive
  their job);
* a job a waiting job depends on, by its id or by its array's (the dependency is settled from
  the job's row after a restart: controller/dependencies.py); one being submitted meanwhile
  too, or that submission is refused (store/dependency_lock.py);
* a member of an array while any member of that array is kept or has not ended before the
  cutoff: an array goes whole (in several batches when it is large), never leaving a part;
* the audit log (events of kind ``Audit``, which may name a job) and the events of no job.

A job is one row with its task groups, so a heterogeneous job (its components are its groups)
goes whole: its row, tasks, events and tokens in one transaction.

**Bounded work.** The jobs are read through the index on ``end_time``, :data:`BATCH` at a time
after a cursor ``(end_time, id)``; each batch is deleted in a transaction of its own (so the
store is never locked for long, and memory does not grow with the purge), with a short pause
between batches for the controller's own writes. With ``budget_s`` the purge stops after the
batch that spends it and says where to go on (:attr:`Purged.after`): the API's route answers
within seconds and its callers call again.

**Environments** are swept once per call, after the jobs: every kept environment no job names
is deleted (:func:`_sweep`: the jobs are scanned without a lock — there is no index on
``env_id`` —, then a short transaction that keeps submissions out spares what the waiting and
running jobs name, so a job submitted meanwhile never loses its environment).

Dry runs count what would go and change nothing. Their environment count is exact for one call;
a purge spread over several calls (``more``) counts in each only the environments that call's
jobs alone name.
"""

from __future__ import annotations

import math
import os
import re
import shutil
import threading
import time
from collections.abc import Collection, Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field, fields
from datetime import UTC, datetime
from pathlib import Path
from typing import Final

from sqlalchemy import (
    ColumnElement,
    Connection,
    Double,
    String,
    delete,
    func,
    literal,
    literal_column,
    or_,
    select,
    text,
)

from fusesched.store.dependency_lock import dependency_ids, hold_for_purge
from fusesched.store.records import UNFINISHED, JobState, TokenKind
from fusesched.store.schema import environments, events, jobs, tasks, tokens, unfinished
from fusesched.store.store import Store

#: Jobs read, judged and deleted per transaction.
BATCH: Final = 1000
#: Ids per ``IN (...)`` list (well under SQLite's limit on bound values).
CHUNK: Final = 500
#: Seconds between two deleting transactions: the controller's writes go in between.
PAUSE_S: Final = 0.02
#: The audit log's event kind (``fusesched.api.access.AUDIT``; the store imports no API).
AUDIT_KIND: Final = "Audit"

_UNFINISHED: Final = tuple(s.value for s in UNFINISHED)
_SAFE_NAME: Final = re.compile(r"[A-Za-z0-9_.-]+")

#: A place in the order jobs are purged in: (end time, job id).
Cursor = tuple[float, str]


class PurgeRefused(ValueError):
    """A cutoff that is refused: not a time, before 1970 or in the future (and
    :class:`InFairShareWindow`)."""


class InFairShareWindow(PurgeRefused):
    """A cutoff young enough to erase usage fair share still counts (without ``force``)."""


@dataclass(frozen=True, slots=True)
class PurgeCounts:
    """What a purge removed (a dry run: would remove)."""

    jobs: int = 0
    tasks: int = 0
    events: int = 0
    tokens: int = 0  # the purged jobs' own API tokens
    environments: int = 0
    files: int = 0  # in the purged jobs' folders of the controller's data directory
    bytes: int = 0  # those files' sizes
    kept: int = 0  # jobs ended before the cutoff that stay (see the module docstring)

    def __add__(self, other: PurgeCounts) -> PurgeCounts:
        return PurgeCounts(*(getattr(self, f.name) + getattr(other, f.name) for f in fields(self)))

    def as_dict(self) -> dict[str, int]:
        return {f.name: getattr(self, f.name) for f in fields(self)}

    def text(self) -> str:
        """``12 jobs, 40 tasks, 96 events, 12 job tokens, 2 environments, 30 files
        (1.2 MiB)`` (what is kept not said)."""
        parts = (
            _many(self.jobs, "job"),
            _many(self.tasks, "task"),
            _many(self.events, "event"),
            _many(self.tokens, "job token"),
            _many(self.environments, "environment"),
            f"{_many(self.files, 'file')} ({_size(self.bytes)})",
        )
        return ", ".join(parts)


@dataclass(frozen=True, slots=True)
class Purged:
    """One call's outcome: its counts; ``more``: it stopped at its time budget with jobs
    left to judge, from ``after`` on (pass it back to go on)."""

    counts: PurgeCounts
    more: bool = False
    after: Cursor | None = None


def check_cutoff(
    ended_before: float, now: float, recalled_since: float | None, force: bool = False
) -> None:
    """:class:`PurgeRefused` for a cutoff that is no time, before 1970, after ``now``, or —
    unless ``force`` — after ``recalled_since``, the earliest end of a run fair share still
    reads back after a restart (``-inf``: all of them; ``None``: no fair share)."""
    if not math.isfinite(ended_before):
        raise PurgeRefused(f"the cutoff must be a time, not {ended_before}")
    if ended_before < 0:
        raise PurgeRefused(f"the cutoff {ended_before} is before 1970")
    if ended_before > now:
        raise PurgeRefused(f"the cutoff {when(ended_before)} is in the future (now is {when(now)})")
    if force or recalled_since is None or ended_before <= recalled_since:
        return
    if math.isinf(recalled_since):
        window = "every ended run (its half-life is infinite: usage never decays)"
    else:
        window = f"the runs that ended since {when(recalled_since)} (20 half-lives)"
    raise InFairShareWindow(
        f"purging the jobs that ended before {when(ended_before)} would erase usage fair "
        f"share still counts: after a restart it reads back {window}; choose an earlier "
        "cutoff, or force it (that usage is then forgotten at the next restart)"
    )


def purge_jobs(
    store: Store,
    ended_before: float,
    *,
    keep: Collection[str] = (),
    folders: Sequence[Path] = (),
    dry_run: bool = False,
    after: Cursor | None = None,
    budget_s: float | None = None,
    batch: int = BATCH,
    pause_s: float = PAUSE_S,
    stop: threading.Event | None = None,
) -> Purged:
    """Purge the jobs that ended before ``ended_before`` (epoch seconds) as the module
    docstring says, but those of ``keep``; each purged job's folder ``<folder>/<job id>`` in
    each of ``folders`` goes too (files counted, and their bytes). ``dry_run``: count only.
    ``after``: go on from there; ``budget_s``: stop once that many seconds are spent;
    ``stop``: stop once it is set (both between batches, saying where to go on)."""
    if not math.isfinite(ended_before):
        raise PurgeRefused(f"the cutoff must be a time, not {ended_before}")
    if batch < 1:
        raise ValueError(f"batch must be at least 1, got {batch}")
    started = time.monotonic()
    with store._read() as conn:  # the store's own connections (same package)
        guard = _guard(conn, keep)
    arrays: dict[str, bool] = {}  # array -> whether all of it may go (judged once)
    named: dict[str, int] = {}  # environment -> jobs purged (a dry run: to purge) naming it
    total = PurgeCounts()
    cursor, more = after, False
    while True:
        with store._read() as conn:
            rows = _candidates(conn, ended_before, cursor, batch)
            chosen = _choose(conn, rows, ended_before, guard, arrays)
        if rows:
            cursor = (rows[-1][3], rows[-1][0])
        done = PurgeCounts(kept=len(rows) - len(chosen))
        if chosen:
            if dry_run:
                with store._read() as conn:
                    done += _count(conn, chosen)
                gone = list(chosen)
            else:
                counted, gone = _delete(store, chosen, ended_before)
                done += counted
            for job_id in gone:
                env = chosen[job_id]
                if env is not None:
                    named[env] = named.get(env, 0) + 1
            done += _folders(folders, gone, remove=not dry_run)
        total += done
        if len(rows) < batch:
            break
        spent = budget_s is not None and time.monotonic() - started >= budget_s
        if spent or (stop is not None and stop.is_set()):
            more = True
            break
        if chosen and not dry_run:
            time.sleep(pause_s)
        if len(arrays) > 100_000:  # (a cache: judged again if met again)
            arrays.clear()
    if named:
        total += PurgeCounts(environments=_sweep(store, named, dry_run))
    return Purged(total, more, cursor if more else None)


# --------------------------------------------------------------------------- what stays


@dataclass(frozen=True, slots=True)
class _Guard:
    """The jobs kept by id, and the arrays kept whole."""

    ids: frozenset[str] = field(default_factory=frozenset)
    arrays: frozenset[str] = field(default_factory=frozenset)


#: A waiting job's dependencies as JSON text (``[]`` when none), read cheaply per dialect.
_DEPENDENCIES: Final = {
    "sqlite": func.json_extract(jobs.c.request, "$.dependencies"),
    "postgresql": literal_column("(jobs.request -> 'dependencies')::text", String),
}


def _guard(conn: Connection, keep: Collection[str]) -> _Guard:
    """``keep`` and the jobs waiting jobs depend on, and the arrays any of them is of (or
    names: a dependency on ``12`` may be on array 12)."""
    deps = _DEPENDENCIES[conn.dialect.name]
    stmt = select(deps).where(jobs.c.state == JobState.PENDING.value).distinct()
    wanted = {str(k) for k in keep}
    for (found,) in conn.execute(stmt):
        wanted.update(dependency_ids(found))
    ids = sorted(wanted)
    arrays = set(ids)
    for chunk in _chunks(ids):
        parents = select(jobs.c.array_parent).where(
            jobs.c.id.in_(chunk), jobs.c.array_parent.is_not(None)
        )
        arrays.update(conn.execute(parents).scalars())
    return _Guard(frozenset(ids), frozenset(arrays))


_Row = tuple[str, str | None, str | None, float]  # id, array_parent, env_id, end_time


def _candidates(
    conn: Connection, ended_before: float, cursor: Cursor | None, batch: int
) -> list[_Row]:
    """The next ``batch`` ended jobs after ``cursor`` that ended before the cutoff, by end."""
    end = jobs.c.end_time
    stmt = select(jobs.c.id, jobs.c.array_parent, jobs.c.env_id, end).where(
        # (NOT IN: an ``IN`` of the ended states would lead SQLite to the state index)
        jobs.c.state.not_in(_UNFINISHED),
        end < literal(ended_before, Double),
    )
    if cursor is not None:
        at = literal(cursor[0], Double)
        stmt = stmt.where(end >= at, or_(end > at, jobs.c.id > cursor[1]))
    stmt = stmt.order_by(end, jobs.c.id).limit(batch)
    return [(r[0], r[1], r[2], r[3]) for r in conn.execute(stmt)]


def _choose(
    conn: Connection,
    rows: Sequence[_Row],
    ended_before: float,
    guard: _Guard,
    arrays: dict[str, bool],
) -> dict[str, str | None]:
    """The env_id of each of ``rows`` that may go (see the module docstring), by id."""
    unjudged = sorted(
        {p for _, p, _, _ in rows if p is not None and p not in arrays and p not in guard.arrays}
    )
    for chunk in _chunks(unjudged):
        stmt = (
            select(jobs.c.array_parent)
            .where(
                jobs.c.array_parent.in_(chunk),
                or_(
                    jobs.c.state.in_(_UNFINISHED),
                    jobs.c.end_time.is_(None),
                    jobs.c.end_time >= literal(ended_before, Double),
                ),
            )
            .distinct()
        )
        open_arrays = set(conn.execute(stmt).scalars())
        arrays.update((p, p not in open_arrays) for p in chunk)
    chosen: dict[str, str | None] = {}
    for job_id, parent, env, _ in rows:
        if job_id in guard.ids or job_id in guard.arrays:
            continue
        if parent is not None and (parent in guard.arrays or not arrays.get(parent, False)):
            continue
        chosen[job_id] = env
    return chosen


# --------------------------------------------------------------------------- rows


def _count(conn: Connection, chosen: Mapping[str, str | None]) -> PurgeCounts:
    """What deleting ``chosen`` would remove (a dry run)."""
    n_tasks = n_events = n_tokens = 0
    count = select(func.count())
    for chunk in _chunks(sorted(chosen)):
        n_tasks += conn.execute(count.where(tasks.c.job_id.in_(chunk))).scalar_one()
        n_events += conn.execute(count.where(*_job_events(chunk))).scalar_one()
        n_tokens += conn.execute(count.where(*_job_tokens(chunk))).scalar_one()
    return PurgeCounts(jobs=len(chosen), tasks=n_tasks, events=n_events, tokens=n_tokens)


def _delete(
    store: Store, chosen: Mapping[str, str | None], ended_before: float
) -> tuple[PurgeCounts, list[str]]:
    """Delete ``chosen`` in one transaction, each still ended before the cutoff and named by
    no waiting job (one submitted meanwhile too); counts and ids deleted.

    The transaction first takes the lock a submission's insert shares
    (store/dependency_lock.py: why that is enough), then reads the waiting jobs'
    dependencies: a submission committed before is seen, one after finds what is gone."""
    n_jobs = n_tasks = n_events = n_tokens = n_kept = 0
    gone: list[str] = []
    with store._write() as conn:
        hold_for_purge(conn)
        held = _guard(conn, ()).arrays  # (the waiting jobs' dependencies, and their arrays)
        for chunk in _chunks(sorted(chosen)):
            still = select(jobs.c.id, jobs.c.array_parent).where(
                jobs.c.id.in_(chunk),
                jobs.c.state.not_in(_UNFINISHED),
                jobs.c.end_time < literal(ended_before, Double),
            )
            if conn.dialect.name == "postgresql":
                still = still.with_for_update()
            found = conn.execute(still).all()
            ids = [i for i, parent in found if i not in held and parent not in held]
            n_kept += len(found) - len(ids)
            if not ids:
                continue
            n_tasks += conn.execute(delete(tasks).where(tasks.c.job_id.in_(ids))).rowcount
            n_events += conn.execute(delete(events).where(*_job_events(ids))).rowcount
            n_tokens += conn.execute(delete(tokens).where(*_job_tokens(ids))).rowcount
            n_jobs += conn.execute(delete(jobs).where(jobs.c.id.in_(ids))).rowcount
            gone.extend(ids)
    return PurgeCounts(n_jobs, n_tasks, n_events, n_tokens, kept=n_kept), gone


def _job_events(ids: Sequence[str]) -> tuple[ColumnElement[bool], ...]:
    """The events of ``ids``, the audit log's but (it outlives the jobs it names)."""
    return (events.c.job_id.in_(ids), events.c.kind != AUDIT_KIND)


def _job_tokens(ids: Sequence[str]) -> tuple[ColumnElement[bool], ...]:
    return (tokens.c.job_id.in_(ids), tokens.c.kind == TokenKind.JOB.value)


def _sweep(store: Store, named: Mapping[str, int], dry_run: bool) -> int:
    """Delete every kept environment no job names (a dry run: count those no job would name
    once the jobs counted in ``named`` went); how many.

    The jobs' names are read without a lock (a scan); then, in one transaction that keeps
    submissions out (SQLite's write lock; PostgreSQL: a table lock on ``environments``, which
    a submission writes first), those a waiting or running job names now are spared: a job
    submitted meanwhile names an environment that stays. (A job that has ended needs its
    environment no more: only a restart's recovery and adoption read one.)"""
    with store._read() as conn:
        unnamed = _unnamed(conn, named if dry_run else {})
    if dry_run or not unnamed:
        return len(unnamed)
    with store._write() as conn:
        if conn.dialect.name == "postgresql":
            conn.execute(text("LOCK TABLE environments IN SHARE ROW EXCLUSIVE MODE"))
        live = (
            select(jobs.c.env_id)
            .where(unfinished(jobs.c.state), jobs.c.env_id.is_not(None))
            .distinct()
        )
        gone = sorted(unnamed - set(conn.execute(live).scalars()))
        for chunk in _chunks(gone):
            conn.execute(delete(environments).where(environments.c.id.in_(chunk)))
    return len(gone)


def _unnamed(conn: Connection, leaving: Mapping[str, int]) -> set[str]:
    """The environments named by no job but those ``leaving`` counts (jobs per key)."""
    stmt = (
        select(jobs.c.env_id, func.count())
        .where(jobs.c.env_id.is_not(None))
        .group_by(jobs.c.env_id)
    )
    named = {key for key, n in conn.execute(stmt) if n > leaving.get(key, 0)}
    kept = conn.execute(select(environments.c.id)).scalars()
    return {key for key in kept if key not in named}


# --------------------------------------------------------------------------- files


def _folders(roots: Sequence[Path], job_ids: Iterable[str], remove: bool) -> PurgeCounts:
    """The files (and their bytes) in each job's folder under each of ``roots``; with
    ``remove`` the folders are deleted (a folder that cannot be is left, its files not
    counted)."""
    n_files = n_bytes = 0
    for job_id in job_ids:
        if not _SAFE_NAME.fullmatch(job_id) or job_id in (".", ".."):
            continue
        for root in roots:
            found = _tree(root / job_id)
            if found is None:
                continue
            if remove:
                try:
                    shutil.rmtree(root / job_id)
                except OSError:
                    continue
            n_files += found[0]
            n_bytes += found[1]
    return PurgeCounts(files=n_files, bytes=n_bytes)


def _tree(folder: Path) -> tuple[int, int] | None:
    """(files, bytes) in ``folder`` and below; None when it is no folder (a link is not
    followed)."""
    try:
        if not folder.is_dir() or folder.is_symlink():
            return None
    except OSError:
        return None
    n_files = n_bytes = 0
    for top, dirs, files in os.walk(folder):
        for name in files + [d for d in dirs if os.path.islink(os.path.join(top, d))]:
            try:
                n_bytes += os.lstat(os.path.join(top, name)).st_size
            except OSError:
                continue
            n_files += 1
    return n_files, n_bytes


# --------------------------------------------------------------------------- helpers


def _chunks(values: Sequence[str]) -> Iterator[Sequence[str]]:
    for start in range(0, len(values), CHUNK):
        yield values[start : start + CHUNK]


def _many(n: int, noun: str) -> str:
    return f"{n} {noun}" if n == 1 else f"{n} {noun}s"


def _size(n: int) -> str:
    """``n`` bytes for people: ``512 B``, ``1.2 MiB``."""
    value = float(n)
    for unit in ("B", "KiB", "MiB", "GiB"):
        if value < 1024 or unit == "GiB":
            return f"{n} B" if unit == "B" else f"{value:.1f} {unit}"
        value /= 1024
    raise AssertionError("unreachable")  # pragma: no cover


def when(t: float) -> str:
    """``t`` as an ISO time (UTC), or as given when it is none."""
    try:
        return datetime.fromtimestamp(t, UTC).isoformat(timespec="seconds")
    except (OverflowError, OSError, ValueError):
        return str(t)
