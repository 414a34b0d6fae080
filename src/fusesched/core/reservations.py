"""Advance reservations in the core: which nodes a waiting job may start on, now.

A reservation (:class:`~fusesched.model.reservation.Reservation`) sets nodes aside from its
start to its end. The core turns it into node constraints on the waiting jobs, the same
host-name label terms that ``sbatch -w``/``-x`` and a requeue's excluded nodes use, so the
placement, backfilling and quota code sees nothing new:

* a job submitted into reservation R (``JobSpec.reservation``) must run on R's nodes
  (``kubernetes.io/hostname In R.nodes`` joins its required terms) and is not eligible
  before R's start (its ``not_before``, as a begin time); when R ends or is deleted, its
  jobs that have not started are rejected;
* every other job is kept off R's nodes (``hostname In R.nodes`` joins its anti-affinity)
  unless its time limit ends it before R starts: ``now + walltime < R.start``. A job without
  a time limit is kept off them from the moment R exists until R ends. As time passes a job
  may lose that right: the core notes when (``R.start - walltime``) and recompiles the job
  at the first cycle from then on (:meth:`SchedulerCore.next_wakeup` names the time).

A job that only waits for a reservation to end is not one that never fits: its
``never_fits`` is worked out without the nodes it is kept off (:func:`fits_anyway`), so the
requeue's excluded nodes, the quota flavours' pinning and the projection see it as waiting.

The backfill planner looks ahead, so it asks :func:`plan_at` where a job could start at a
later time ``t``: without the nodes the job is kept off *now*, but on no node of a
reservation it may not use *at t* (one whose window has not ended by ``t`` and that the job,
by its time limit, would run into), and, for a reservation's own job, only before its end.
:func:`stops` names the times at which that changes for the better (the ends).

Creating, changing, deleting and ending a reservation (its waiting jobs follow a change,
and are rejected at its end) is :mod:`fusesched.core.reservation_changes`.

Running jobs are never touched. With no reservation, the core holds no :class:`Bookings`
(``core.bookings`` is None) and nothing here runs. Pure, like the rest of the core.
"""

from __future__ import annotations

import copy
import heapq
import math
from dataclasses import replace
from typing import TYPE_CHECKING, Any

import numpy as np

from fusesched.core.records import _RECORD_SLOTS, JobRecord
from fusesched.model.job import JobSpec, LabelOp, LabelRequirement
from fusesched.model.node import LABEL_HOSTNAME
from fusesched.model.phases import JobPhase
from fusesched.model.reservation import Reservation, when

if TYPE_CHECKING:
    from fusesched.core.cluster import BoolArray, IntArray
    from fusesched.core.placement import Plan
    from fusesched.core.scheduler import SchedulerCore

#: (the term on the nodes the job must run on, the term on those it must keep off); the
#: terms are shared by every job with the same reservations (:class:`Bookings` caches them)
Mark = tuple[LabelRequirement | None, LabelRequirement | None]
NO_MARK: Mark = (None, None)

WAITING = (JobPhase.PENDING, JobPhase.QUEUED)


#: what :meth:`Bookings.__deepcopy__` does not copy
_CACHES = frozenset({"_masks", "_plain"})


class Bookings:
    """The core's reservations that have not ended, and the constraints they put on jobs."""

    def __init__(self) -> None:
        self.by_name: dict[str, Reservation] = {}
        self.flips: list[tuple[float, str]] = []  # (when a job's constraints change, job id)
        self.due = math.inf  # the earliest flip or reservation end: tick() then
        # the waiting jobs that may carry terms (those seen since the bookings exist; the
        # ones that stopped waiting are dropped as they are met, or when it doubles)
        self.waiting: dict[str, JobRecord] = {}
        self._prune_at = 1024
        # the terms, one object per reservation (own) or set of them (kept off), shared
        self._own: dict[str, LabelRequirement] = {}
        self._off: dict[tuple[str, ...], LabelRequirement] = {}
        # for planning ahead (plan_at): the node masks per (own, kept off) and the cluster
        # size they were made for; per job, its record without the kept-off term
        self._masks: dict[tuple[str | None, tuple[str, ...]], BoolArray] = {}
        self._masks_for = -1
        self._plain: dict[str, tuple[JobSpec, int, JobRecord]] = {}

    def __deepcopy__(self, memo: dict[int, Any]) -> Bookings:
        """A copy for a projection: the planning caches start empty (they are rebuilt)."""
        new = object.__new__(Bookings)
        memo[id(self)] = new
        for name, value in self.__dict__.items():
            setattr(new, name, {} if name in _CACHES else copy.deepcopy(value, memo))
        return new

    def recompute_due(self) -> None:
        ends = min((r.end for r in self.by_name.values()), default=math.inf)
        self.due = min(ends, self.flips[0][0]) if self.flips else ends

    def add(self, res: Reservation) -> None:
        self.by_name[res.name] = res
        self._masks.clear()

    def remove(self, name: str) -> None:
        del self.by_name[name]
        self._own.clear()  # (the name may come back with other nodes)
        self._off.clear()
        self._masks.clear()

    def enrol(self, rec: JobRecord) -> None:
        self.waiting[rec.id] = rec
        if len(self.waiting) > self._prune_at:
            self.waiting = {k: r for k, r in self.waiting.items() if r.phase in WAITING}
            self._prune_at = 2 * len(self.waiting) + 1024

    def own_term(self, res: Reservation) -> LabelRequirement:
        term = self._own.get(res.name)
        if term is None:
            term = self._own[res.name] = _host_in(tuple(sorted(res.nodes)))
        return term

    def off_term(self, names: tuple[str, ...]) -> LabelRequirement:
        term = self._off.get(names)
        if term is None:
            nodes = set().union(*(self.by_name[n].nodes for n in names))
            term = self._off[names] = _host_in(tuple(sorted(nodes)))
        return term


def admit(core: SchedulerCore, rec: JobRecord, now: float) -> str:
    """A new job (not rejected so far): why it may not run in the reservation it names, or
    ``""`` once its constraints are in place (and its start not before the reservation's)."""
    spec = rec.spec
    name = spec.reservation
    if name is not None:
        bookings = core.bookings
        res = bookings.by_name.get(name) if bookings is not None else None
        if res is None:
            return f"reservation {name!r} does not exist (or has ended)"
        refused = refusal(res, spec.user, spec.tenant)
        if refused:
            return refused
        rec.not_before = max(rec.not_before, res.start)
    if core.bookings is not None:
        refresh(core, rec, now, submitted=True)
        if name is not None and rec.never_fits:
            return f"does not fit on the nodes of reservation {name}: {rec.never_fits}"
    return ""


def refusal(res: Reservation, user: str, tenant: str) -> str:
    """Why a job of ``user`` in ``tenant`` may not be submitted into ``res``, or ``""``."""
    if res.maintenance:
        return f"reservation {res.name} is a maintenance reservation: no job runs in it"
    if not res.admits(user, tenant):
        who = f"user {user!r}" if user else "a job without a user"
        return f"{who} (tenant {tenant!r}) may not use reservation {res.name}"
    return ""


def waits_for(core: SchedulerCore, rec: JobRecord) -> str:
    """How a job kept from starting by its reservation's start says so, or ``""``."""
    name = rec.spec.reservation
    bookings = core.bookings
    if name is None or bookings is None or name not in bookings.by_name:
        return ""
    start = bookings.by_name[name].start
    return f"reservation {name} starts at {when(start)}" if rec.not_before == start else ""


def stops(core: SchedulerCore, now: float) -> list[float]:
    """The times after ``now`` at which a job may gain nodes (reservations' ends), sorted:
    between two of them the nodes a job may start on only shrink as time passes."""
    bookings = core.bookings
    assert bookings is not None
    return sorted({r.end for r in bookings.by_name.values() if r.end > now})


def plan_at(core: SchedulerCore, rec: JobRecord, free: IntArray, t: float) -> Plan | None:
    """Where ``rec`` would go on ``free`` if it started at ``t`` (at or after now), under
    the reservations' rules at ``t`` (:func:`start_mask`); None if it would not fit."""
    key = start_key(core, rec, t)
    if key is None:
        return None
    bookings = core.bookings
    assert bookings is not None
    mask = _mask(core, bookings, key) if key != (None, ()) else None
    return core.plan(_plain(core, bookings, rec), free, mask=mask)


def start_key(
    core: SchedulerCore, rec: JobRecord, t: float
) -> tuple[str | None, tuple[str, ...]] | None:
    """Which reservations bear on ``rec`` starting at ``t``: (its own one, or None; those
    whose nodes it must keep off); None if it may not start at ``t`` at all (its own one
    has ended by then). A job kept off a reservation at ``t`` is one that would not end,
    by its time limit, before the window starts, and whose window has not ended by ``t``."""
    bookings = core.bookings
    assert bookings is not None
    name = rec.spec.reservation
    own = bookings.by_name.get(name) if name is not None else None
    if own is not None and not t < own.end:
        return None
    walltime = rec.spec.walltime_s
    off = tuple(
        res.name
        for res in bookings.by_name.values()
        if res is not own and t < res.end and (walltime is None or not t + walltime < res.start)
    )
    return (name if own is not None else None, off)


def _mask(
    core: SchedulerCore, bookings: Bookings, key: tuple[str | None, tuple[str, ...]]
) -> BoolArray:
    """The nodes outside the reservations ``key[1]`` (and inside ``key[0]``), cached (the
    placement's own filter adds that they are up)."""
    cluster = core.cluster
    if bookings._masks_for != cluster.size:
        bookings._masks.clear()
        bookings._masks_for = cluster.size
    mask = bookings._masks.get(key)
    if mask is None:
        index = cluster.index
        mask = np.ones(cluster.size, np.bool_)
        for name in key[1]:
            rows = [index[n] for n in bookings.by_name[name].nodes if n in index]
            mask[rows] = False
        if key[0] is not None:
            inside = np.zeros(cluster.size, np.bool_)
            inside[[index[n] for n in bookings.by_name[key[0]].nodes if n in index]] = True
            mask &= inside
        bookings._masks[key] = mask
    return mask


def _plain(core: SchedulerCore, bookings: Bookings, rec: JobRecord) -> JobRecord:
    """``rec`` for planning ahead: without the term that keeps it off reserved nodes now (a
    copy, cached while its spec and the cluster's size are the same; the mask of the start
    time replaces the term)."""
    booked = rec.booked
    if booked is None or booked[1] is None:
        return rec
    size = core.cluster.size
    found = bookings._plain.get(rec.id)
    if found is not None and found[0] is rec.spec and found[1] == size:
        twin = found[2]
    else:
        from fusesched.core.intake import reshape  # (intake imports this module)

        twin = object.__new__(JobRecord)
        for name in _RECORD_SLOTS:
            object.__setattr__(twin, name, getattr(rec, name))
        reshape(core, twin, _swap(rec.spec, (None, booked[1]), NO_MARK))
        if len(bookings._plain) >= PLAIN_LIMIT:
            bookings._plain.clear()
        bookings._plain[rec.id] = (rec.spec, size, twin)
    twin.data_wait_until = rec.data_wait_until  # (what planning reads that may change)
    return twin


#: at most this many jobs' planning copies are kept (see :func:`_plain`)
PLAIN_LIMIT = 4096


def refresh_job(core: SchedulerCore, job_id: str, now: float) -> None:
    """Re-check one job's constraints (after a change of its time limit, or a requeue)."""
    rec = core.jobs.get(job_id)
    if rec is not None and core.bookings is not None:
        refresh(core, rec, now)


def requeued(core: SchedulerCore, rec: JobRecord, now: float) -> str:
    """A run of ``rec`` ended and it goes back to wait: why it may not (its reservation has
    ended or was deleted, no longer admits its user or tenant, or it no longer fits on its
    nodes), or ``""`` once its constraints are those of now (the caller keeps it waiting
    until its reservation's start: :func:`opens`)."""
    name = rec.spec.reservation
    bookings = core.bookings
    if name is not None and (bookings is None or name not in bookings.by_name):
        return f"requeued, but reservation {name} has ended or was deleted"
    if name is not None and bookings is not None:  # (changed since it started, perhaps)
        refused = refusal(bookings.by_name[name], rec.spec.user, rec.spec.tenant)
        if refused:
            return f"requeued, but {refused}"
    if bookings is not None:
        refresh(core, rec, now, submitted=True)
        if name is not None and rec.never_fits:
            return f"does not fit on the nodes of reservation {name}: {rec.never_fits}"
    elif rec.booked is not None:  # the reservations it kept off are gone
        _apply(core, rec, rec.booked, NO_MARK)
        rec.booked = None
    return ""


def opens(core: SchedulerCore, rec: JobRecord) -> float:
    """When the window of ``rec``'s reservation opens (0 without one): a requeued job of
    a reservation whose start was moved later waits for it again."""
    name = rec.spec.reservation
    bookings = core.bookings
    res = bookings.by_name.get(name) if bookings is not None and name is not None else None
    return res.start if res is not None else 0.0


def fits_anyway(core: SchedulerCore, rec: JobRecord) -> None:
    """After ``rec`` was recompiled (a requeue's excluded nodes, its quota flavours): its
    ``never_fits`` without the nodes reservations keep it off — a job that only waits for
    a window to end fits. Nothing to do unless it was found never to fit."""
    booked = rec.booked
    if rec.never_fits and booked is not None and booked[1] is not None:
        rec.never_fits = core.shapes.shape_of(
            _swap(rec.spec, (None, booked[1]), NO_MARK)
        ).never_fits


def refresh_all(core: SchedulerCore, now: float) -> None:
    """Re-check every waiting job's constraints (the reservations changed). With none left,
    the core holds no bookings any more (a running job that still carries constraints loses
    them if it is requeued: see :func:`requeued`)."""
    bookings = core.bookings
    assert bookings is not None
    waiting = bookings.waiting
    for job_id, rec in list(waiting.items()):
        if rec.phase in WAITING:
            refresh(core, rec, now)
        else:
            del waiting[job_id]
    if not bookings.by_name:
        core.bookings = None  # nothing left to do: the core is as without reservations
    else:
        bookings.recompute_due()


def refresh(core: SchedulerCore, rec: JobRecord, now: float, submitted: bool = False) -> None:
    """Give a waiting job the constraints the reservations put on it now, and note when they
    change next (a flip)."""
    bookings = core.bookings
    assert bookings is not None
    if rec.phase not in WAITING and not submitted:
        return
    bookings.enrol(rec)
    spec = rec.spec
    own = bookings.by_name.get(spec.reservation) if spec.reservation is not None else None
    off: list[str] = []
    flip = math.inf
    walltime = spec.walltime_s
    for res in bookings.by_name.values():
        if res is own or res.end <= now:
            continue
        # may it still end before the window opens? (a flip at or before now would come
        # back at once: then not)
        if walltime is None or now + walltime >= res.start or res.start - walltime <= now:
            off.append(res.name)
        else:
            flip = min(flip, res.start - walltime)
    mark: Mark = (
        bookings.own_term(own) if own is not None else None,
        bookings.off_term(tuple(off)) if off else None,
    )
    old = rec.booked or NO_MARK
    if mark != old:
        _apply(core, rec, old, mark)
        rec.booked = mark if mark != NO_MARK else None
    if flip < math.inf:
        heapq.heappush(bookings.flips, (flip, rec.id))
        bookings.due = min(bookings.due, flip)


def _apply(core: SchedulerCore, rec: JobRecord, old: Mark, new: Mark) -> None:
    """Recompile ``rec`` with the constraints ``new`` instead of ``old`` (its spec and, with
    quota flavours, the spec they are built from)."""
    if rec.base_spec is not None:
        rec.base_spec = _swap(rec.base_spec, old, new)
        rec.flavour_key = ()  # (rebuilt from the base spec before it is placed)
    old_shape = rec.shape_id
    core.reshape(rec, _swap(rec.spec, old, new))
    rec.booked = new if new != NO_MARK else None
    fits_anyway(core, rec)  # (the nodes it is kept off do not count)
    if rec.phase is JobPhase.QUEUED and rec.shape_id != old_shape:
        pos = core.queue.position(rec)
        if pos is not None:
            core.queue.rows[pos, 1] = rec.shape_id  # (backfilling skips failed shapes by it)
    core._changed = True


def _swap(spec: JobSpec, old: Mark, new: Mark) -> JobSpec:
    """``spec`` with the terms ``new`` instead of ``old``."""
    placement = spec.placement
    required = _without(placement.required, old[0])
    anti = _without(placement.anti_affinity, old[1])
    if new[0] is not None:
        required = (*required, new[0])
    if new[1] is not None:
        anti = (*anti, new[1])
    return replace(spec, placement=replace(placement, required=required, anti_affinity=anti))


def _host_in(nodes: tuple[str, ...]) -> LabelRequirement:
    return LabelRequirement(LABEL_HOSTNAME, LabelOp.IN, nodes)


def _without(
    terms: tuple[LabelRequirement, ...], term: LabelRequirement | None
) -> tuple[LabelRequirement, ...]:
    """``terms`` less the last one equal to ``term`` (the one this module added: an equal one
    another added constrains the same, so either may go)."""
    if term is None:
        return terms
    for k in range(len(terms) - 1, -1, -1):
        if terms[k] == term:
            return terms[:k] + terms[k + 1 :]
    return terms
