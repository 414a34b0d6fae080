"""Backfilling: which waiting jobs may overtake a blocked one without delaying it.

* **EASY** — the first blocked job (the head) gets one reservation computed from the requested
  walltimes of the running jobs (the *shadow time*). Another job may start now if it ends, by
  its own estimate, no later than the shadow time, or if it only uses resources the head will
  not need at the shadow time.
* **Conservative** — every waiting job, in order, up to a depth, gets a reservation in a
  time/resource profile; a job starts now only when its earliest slot is now, so no earlier
  job's reservation is ever pushed back.

Both use the same filter/score/statement machinery of the core; estimates are always the
requested walltime (never a hidden true runtime).

With advance reservations (``core.bookings``) both plan a job's later start under the rules
that hold *then* (:func:`fusesched.core.reservations.plan_at`): a window is capacity the
job cannot use unless it would end before the window opens, a reservation's own job has
only its nodes until its end, and the reservations' ends are times worth trying. Without
any, nothing here changes.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass
from itertools import chain
from typing import TYPE_CHECKING

import numpy as np

from fusesched.core import completing, reservations
from fusesched.core.cluster import ClusterArrays, IntArray, rows_within
from fusesched.core.licenses import LicenseHold, backfilled, may_backfill
from fusesched.core.licenses import reserve as reserve_licenses
from fusesched.core.placement import slot_bound
from fusesched.core.profile import Profile, SumProfile
from fusesched.model.events import Decision, ReserveJob
from fusesched.model.fast import builder

if TYPE_CHECKING:
    from fusesched.core.placement import Allocation, Plan
    from fusesched.core.records import JobRecord
    from fusesched.core.scheduler import SchedulerCore

#: A new reservation's announcement (one per change of the head's reservation): built without
#: calling the class (see fusesched.model.fast.builder).
_reserve_job: Callable[[str, float, tuple[str, ...]], ReserveJob] = builder(ReserveJob)


@dataclass(slots=True)
class Reservation:
    """The head job's reservation.

    ``column`` ≥ 0: the head needs only that resource and sums decide (``extra`` is what is
    left of it at the shadow time after the head takes its share). ``column`` = -1: node-exact,
    and ``remaining`` is the per-node free matrix at the shadow time minus the head's plan.
    """

    shadow: float
    column: int
    extra: int
    remaining: IntArray | None
    nodes: tuple[int, ...] = ()  # node-exact: the rows the head would start on
    # the head asks for licenses: what of them a job still running at the shadow time may
    # take (the shadow time is then also when they come back: core/licenses.py)
    licenses: LicenseHold | None = None


def reserve_head(core: SchedulerCore, head: JobRecord, now: float) -> Reservation:
    """Compute the head's earliest start from the running jobs' estimated ends (what ended
    runs still hold: free now, core/completing.py)."""
    cluster = core.cluster
    held = bool(core.completing)
    if not core.running and core.bookings is None and not held:
        return Reservation(math.inf, -1, 0, None)
    col = core.fluid_column(head)
    if col >= 0 and (core.running or held):
        need = head.single_total  # (its need of that column: it is fluid in it)
        have = cluster.free_sums[col] + (completing.held_sum(core, col) if held else 0)
        found = (now, 0) if held and need <= have else core.running.release_time(col, need - have)
        if found is None:
            return Reservation(math.inf, col, 0, None)
        end, released = found
        shadow = max(end, now)
        # (no reservation bears on it then: the sums decide, else node by node below)
        if core.bookings is None or reservations.start_key(core, head, shadow) == (None, ()):
            return Reservation(shadow, col, have + released - need, None)
    if core.bookings is not None:
        return _reserve_booked(core, head, now)
    run = core.running.view()
    free, total = completing.soon(core) if held else (cluster.free.copy(), cluster.free_total)
    deficit = head.bound - total
    first = 0
    for c in np.flatnonzero(deficit > 0).tolist():
        cum = run.column(c).cumsum()
        first = max(first, int(cum.searchsorted(deficit[c], side="left")))
    if held and (plan := core.plan(head, free)) is not None:
        return Reservation(now, -1, 0, free, _take(free, plan))
    ends = run.ends
    k = 0
    while k < len(run):
        # release every job ending at the same instant; before the sums allow the head to
        # fit at all (index ``first``), release them all in one go
        upto = ends[max(k, first)] if k < first and first < len(run) else ends[k]
        last = int(ends.searchsorted(upto, side="right")) - 1
        run.release(free, k, last + 1)
        if last >= first:
            plan = core.plan(head, free)
            if plan is not None:
                rows = _take(free, plan)
                return Reservation(max(float(ends[last]), now), -1, 0, free, rows)
        k = last + 1
    return Reservation(math.inf, -1, 0, None)


def _reserve_booked(core: SchedulerCore, head: JobRecord, now: float) -> Reservation:
    """:func:`reserve_head` node by node with advance reservations: the earliest of the
    running jobs' estimated ends and the reservations' ends at which the head fits on what
    is free then, on the nodes the reservations let it start on then."""
    cluster = core.cluster
    run = core.running.view()
    ends = run.ends
    held = bool(core.completing)
    free, total = completing.soon(core) if held else (cluster.free.copy(), cluster.free_total)
    deficit = head.bound - total
    lower = now  # (before then the sums rule it out)
    for c in np.flatnonzero(deficit > 0).tolist():
        cum = run.column(c).cumsum()
        first = int(cum.searchsorted(deficit[c], side="left"))
        if first >= len(run):
            return Reservation(math.inf, -1, 0, None)
        lower = max(lower, float(ends[first]))
    times = {t for t in reservations.stops(core, now) if t >= lower}
    # (jobs past their estimated end are taken to end now, as above)
    start = 0 if lower <= now else int(ends.searchsorted(lower))
    times.update(max(t, now) for t in ends[start:].tolist())
    if held:
        times.add(lower)
    k = 0
    for t in sorted(times):
        last = int(ends.searchsorted(t, side="right"))
        if last > k:
            run.release(free, k, last)
            k = last
        plan = reservations.plan_at(core, head, free, t)
        if plan is not None:
            return Reservation(t, -1, 0, free, _take(free, plan))
    return Reservation(math.inf, -1, 0, None)


def _take(free: IntArray, plan: Plan) -> tuple[int, ...]:
    """Take ``plan``'s tasks off ``free`` (the head's reservation); the rows it uses."""
    for group, nodes, counts in plan:
        np.subtract.at(free, nodes, counts[:, None] * group.per_task[None, :])
    return tuple(sorted({int(n) for _, nodes, _ in plan for n in nodes}))


def _announce(
    core: SchedulerCore, head: JobRecord, shadow: float, rows: tuple[int, ...] = ()
) -> list[Decision]:
    if shadow == math.inf:
        return []
    said = (head.spec.id, shadow, rows)
    if core.last_reservation == said:
        return []  # said already (a change of nodes is news: they may stage its data)
    core.last_reservation = said
    names = core.cluster.name_array
    return [_reserve_job(head.id, shadow, tuple(str(names[row]) for row in rows))]


def easy(core: SchedulerCore, now: float, only: list[JobRecord] | None) -> list[Decision]:
    """EASY backfilling. ``only``: scan just these (newly queued) jobs; None: the whole queue."""
    queue = core.queue
    head = queue.records[0]
    res = core.reservation
    if isinstance(res, Reservation):
        out: list[Decision] = []  # a kept reservation (same head) was announced when made
    else:
        res = core.reservation = reserve_head(core, head, now)
        if core.licenses is not None and head.spec.licenses:
            # (resources only grow free later: what is left at the earlier shadow time is
            # left at the later one too, so ``extra``/``remaining`` still bound long jobs)
            res.shadow, res.licenses = reserve_licenses(core, head, res.shadow, now)
        out = _announce(core, head, res.shadow, res.nodes)
    if len(queue.records) == 1:
        return out
    failed: set[int] = set()  # kinds that failed in this scan, see _scan
    if only is None:
        index = _queue_candidates(core, res, now)
        if index is None:
            return out
        blocks = _blocks(core, res, now, index, failed)
    else:
        positions = _fresh_candidates(core, res, only)
        if not positions:
            return out
        blocks = iter([positions])
    out.extend(_scan(core, res, now, blocks, failed))
    return out


#: Candidates per block in :func:`_blocks` (doubling while no new kind fails).
FIRST_BLOCK = 256


def _queue_candidates(core: SchedulerCore, res: Reservation, now: float) -> IntArray | None:
    """The queue positions after the head of the jobs that the sums allow to start now;
    None when there are none."""
    rows = core.queue.rows
    cluster = core.cluster
    col = res.column
    if col >= 0:
        # sums of the head's column only (a superset: _scan checks every column anyway)
        need = rows[:, 2 + col]
        have = cluster.free_sums[col]
        if need.item(need.argmin()) > have:  # (argmin: far cheaper than a NumPy reduction)
            return None  # nothing waiting is small enough for what is free (the common case)
        candidates = need <= have
        if res.extra < have:  # else every job that fits now leaves the head enough
            candidates &= ((now + rows[:, 0]) <= res.shadow) | (need <= res.extra)
    else:
        candidates = rows_within(rows[:, 2:], cluster.free_total)
    candidates[0] = False  # the head
    index: IntArray = candidates.nonzero()[0]
    return index if len(index) else None


def _blocks(
    core: SchedulerCore, res: Reservation, now: float, index: IntArray, failed: set[int]
) -> Iterator[list[int]]:
    """The candidates at ``index`` (see :func:`_queue_candidates`) as queue positions, in
    blocks; each block after the first leaves out the kinds that :func:`_scan` has put into
    ``failed`` by then, so a deep queue whose few kinds all fail early is not walked job by
    job. A block in which no new kind failed doubles the next.
    """
    yield index[:FIRST_BLOCK].tolist()
    if len(index) <= FIRST_BLOCK:
        return
    rows = core.queue.rows
    short = (now + rows[:, 0]) <= res.shadow
    kinds = (rows[:, 1] * 2 + short).astype(np.int64)  # as _scan numbers them
    dead = np.zeros(int(kinds.max()) + 1, dtype=np.bool_)
    start, block = FIRST_BLOCK, FIRST_BLOCK
    while start < len(index):
        part = index[start : start + block]
        known = len(failed)
        if known:
            dead[list(failed)] = True
            part = part[~dead[kinds[part]]]
        yield part.tolist()
        start += block
        block = FIRST_BLOCK if len(failed) > known else 2 * block


def _fresh_candidates(core: SchedulerCore, res: Reservation, only: list[JobRecord]) -> list[int]:
    """The queue positions of the newly queued jobs (a few: plain Python), in order; the
    jobs that the head's column rules out by its sum are left out."""
    queue = core.queue
    col = res.column
    have = core.cluster.free_sums[col] if col >= 0 else 0
    positions: list[int] = []
    for rec in only:
        if col >= 0:
            # (a job fluid in that column: its single-column total, cheaper than an array's)
            need = rec.single_total if rec.single_column == col else rec.total.item(col)
            if need > have:
                continue
        pos = queue.position(rec)
        if pos:  # neither the head nor gone
            positions.append(pos)
    positions.sort()
    return positions


def _scan(
    core: SchedulerCore,
    res: Reservation,
    now: float,
    blocks: Iterator[list[int]],
    failed: set[int],
) -> list[Decision]:
    """Start every job at the queue positions in ``blocks`` (ascending) that fits now
    without delaying the head's reservation.

    Free resources only shrink during the scan, so once a job of some kind (shape, and short
    or long) fails, by the sums or by placement, every later job of that kind fails too: its
    kind goes into ``failed``. Likewise every later job of the same shape family (see
    ``Shape.family``), equally short or long, with at least as many tasks. (Not a job held to
    the nodes caching its data: its failure says nothing of the others.)
    """
    records = core.queue.records
    cluster = core.cluster
    free_sums = cluster.free_sums  # (changed in place: current all along)
    long_view: IntArray | None = None  # min(free now, free at the shadow time) per node
    fewest: dict[int, int] = {}  # family (and short or long) -> fewest tasks that failed
    started: list[int] = []
    out: list[Decision] = []
    shadow, col = res.shadow, res.column
    try_place, bind = core.try_place, core.bind
    free = cluster.free
    # with tenancy, try_place asks the queue's quota first (and notes its verdict on the
    # job), so every candidate goes to it; else a job that may need them makes the bounds
    bounded = core.tenants is None
    bounds: _SlotBounds | None = None
    licensed = core.licenses is not None
    for pos in chain.from_iterable(blocks):
        rec = records[pos]
        short_job = now + rec.estimate <= shadow
        kind = rec.shape_id * 2 + short_job
        if kind in failed:
            continue
        family = rec.family * 2 + short_job if rec.family >= 0 else -1
        tasks = rec.groups[0].replicas if rec.groups else 0
        if family >= 0 and tasks >= fewest.get(family, tasks + 1):
            failed.add(kind)
            continue
        # (a job its licenses hold back says nothing of its kind: not put into ``failed``)
        asks = licensed and bool(rec.spec.licenses)
        if asks and not may_backfill(core, rec, short_job, res.licenses):
            continue
        if bounded and bounds is None and (rec.single_column < 0 or (col < 0 and not short_job)):
            bounds = _SlotBounds(cluster)
        alloc: Allocation | None = None
        if col >= 0:
            need = rec.single_total if rec.single_column == col else rec.total.item(col)
            if (
                need <= free_sums[col]
                and (short_job or need <= res.extra)
                and (bounds is None or rec.single_column >= 0 or bounds.may_fit(rec, free, 0))
            ):
                alloc = try_place(rec, search=False)
                if alloc is not None and not short_job:
                    res.extra -= need
        elif short_job:
            if bounds is None or rec.single_column >= 0 or bounds.may_fit(rec, free, 0):
                alloc = try_place(rec, search=False)
        else:
            assert res.remaining is not None
            if long_view is None:
                long_view = np.minimum(cluster.free, res.remaining)
            if bounds is None or bounds.may_fit(rec, long_view, 1):
                alloc = try_place(rec, res.remaining, long_view, search=False)
        if alloc is None:
            if rec.data_wait_until <= now:  # a job waiting for its data's nodes says
                failed.add(kind)  # nothing about its kind elsewhere
                if family >= 0:
                    fewest[family] = min(tasks, fewest.get(family, tasks))
            continue
        if long_view is not None and res.remaining is not None:
            rows = alloc.nodes
            long_view[rows] = np.minimum(cluster.free[rows], res.remaining[rows])
        if bounds is not None:
            bounds.version += 1  # free resources shrank: the bounds so far still hold, but
            # a fresh one is tighter
        if asks:
            backfilled(rec, short_job, res.licenses)
        started.append(pos)
        out.append(bind(rec, alloc, now, True))
    if started:
        core.queue.remove_at(started)
    return out


class _SlotBounds:
    """A necessary condition for a gang to fit, cheaper than a placement attempt: every task
    group's :func:`~fusesched.core.placement.slot_bound` on the free matrix the attempt would
    see must reach the group's size. The bounds are kept per (view, eligible rows, per-task
    request, cap per node); free resources only shrink during a scan, so a bound stays an
    upper bound after a job starts (``version`` counts the starts), only a looser one: one
    below a group's size is used as it is, a bigger one is computed again. A failed attempt
    changes nothing. A job that fails this test would fail the attempt too, so the scan's
    decisions are the same."""

    __slots__ = ("_counts", "cluster", "version")

    def __init__(self, cluster: ClusterArrays) -> None:
        self.cluster = cluster
        self.version = 0
        self._counts: dict[tuple[int, int, bytes, int | None, object], tuple[int, int]] = {}

    def may_fit(self, rec: JobRecord, free: IntArray, view: int) -> bool:
        """False if ``rec`` cannot be placed on ``free`` (``view`` numbers that matrix)."""
        groups = rec.groups
        spec = rec.spec
        if groups is None or spec.min_member is not None:  # (partial gangs: no bound)
            return True
        cluster = self.cluster
        eligible = cluster.shape_filter(rec.shape_id, spec.placement)[0]
        cap = spec.placement.max_tasks_per_node
        version = self.version
        counts = self._counts
        for group in groups:
            if not len(group.cols):
                continue
            own = group.placement  # (its own label filters narrow its rows)
            key = (view, id(eligible), group.key, cap, None if own is None else own.cache_key())
            found = counts.get(key)
            if found is not None and (found[0] == version or found[1] < group.replicas):
                bound = found[1]  # (an old bound still bounds: free resources only shrank)
            else:
                rows = cluster.rows_with_free(group.cols, eligible)
                if own is not None:
                    rows = rows[cluster.allowed(own)[rows]]
                if 2 * len(rows) >= len(free):
                    continue  # room on most nodes (a cluster filling up): the attempt is
                    # likely to succeed, and reading that many rows would cost as much
                bound = slot_bound(group, free, rows, cap)
                counts[key] = (version, bound)
            if bound < group.replicas:
                return False
        return True


def _common_fluid_column(core: SchedulerCore, records: list[JobRecord]) -> int:
    """The column in which every one of ``records`` is fluid, or -1."""
    cols = {core.fluid_column(rec) for rec in records}
    return cols.pop() if len(cols) == 1 and min(cols, default=-1) >= 0 else -1


def _conservative_sums(
    core: SchedulerCore, now: float, records: list[JobRecord], col: int
) -> list[Decision]:
    profile = SumProfile(core, now, col)
    out: list[Decision] = []
    started: list[int] = []
    for pos, rec in enumerate(records):
        need = int(rec.total[col])
        index = profile.earliest(need, rec.estimate)
        if index is None:
            continue
        start = profile.times[index]
        if index == 0:
            alloc = core.try_place(rec)
            if alloc is not None:
                started.append(pos)
                out.append(core.bind(rec, alloc, now, backfilled=pos > 0))
                profile.reserve(start, start + rec.estimate, need)
                continue
        profile.reserve(start, start + rec.estimate, need)
        if pos == 0:
            out.extend(_announce(core, rec, start))
    core.queue.remove_at(started)
    return out


def conservative(core: SchedulerCore, now: float, only: list[JobRecord] | None) -> list[Decision]:
    """Conservative backfilling: rebuild the profile and reserve for the first jobs in order.

    With nothing freed since the last cycle (``only`` = the jobs queued since), the earlier
    reservations still hold; only new jobs within the depth can change anything.
    """
    queue = core.queue
    records = queue.records[: core.config.conservative_depth]
    if only is not None:
        window = {id(rec) for rec in records}
        if not any(id(rec) in window for rec in only):
            return []
    col = _common_fluid_column(core, records) if core.bookings is None else -1
    licensed = core.licenses is not None and core.licenses.involved(records)
    if licensed:
        col = -1  # (the sums' profile counts no licenses)
    if col >= 0 and all(  # running jobs hold only that column too
        core.fluid_column(core.jobs[job_id]) == col for job_id in core.running.ids()
    ):
        return _conservative_sums(core, now, records, col)
    profile = Profile(core, now, licensed)
    out: list[Decision] = []
    started: list[int] = []
    for pos, rec in enumerate(queue.records[: core.config.conservative_depth]):
        found = profile.earliest(rec)
        if found is None:
            continue
        index, plan = found
        start = profile.times[index]
        end = start + rec.estimate
        if index == 0:
            j = int(np.searchsorted(profile.times, end, side="left"))
            limit = np.minimum.reduce(profile.frees[0 : max(j, 1)]).copy()
            alloc = core.try_place(rec, limit)
            if alloc is not None:
                started.append(pos)
                out.append(core.bind(rec, alloc, now, backfilled=pos > 0))
                profile.reserve(start, end, alloc.nodes, alloc.amounts, rec.spec.licenses)
                continue
        nodes = np.concatenate([n for _, n, _ in plan])
        amounts = np.concatenate([c[:, None] * g.per_task[None, :] for g, _, c in plan])
        profile.reserve(start, end, nodes, amounts, rec.spec.licenses)
        if pos == 0:
            out.extend(_announce(core, rec, start))
    queue.remove_at(started)
    return out


Backfiller = Callable[["SchedulerCore", float, "list[JobRecord] | None"], list[Decision]]

BACKFILLERS: Mapping[str, Backfiller] = {
    "easy": easy,
    "conservative": conservative,
}
