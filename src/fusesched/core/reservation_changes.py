"""Advance reservations created, changed, deleted and ended: the core's side of
:class:`~fusesched.model.events.ReservationSet` and
:class:`~fusesched.model.events.ReservationDeleted`, and of a reservation's end at a cycle.

A creation or a change is refused (:class:`ReservationConflict`) when the name is in use or a
node is reserved by another in an overlapping window, and (``ValueError``) when a node's
host-name label would not single it out. A change (``ReservationSet(..., replaces=True)``)
moves its waiting jobs to its new start, nodes, users and tenants (:func:`_modify`). A
deletion or an end rejects the reservation's jobs that have not started; every other waiting
job gets its constraints without it (:func:`fusesched.core.reservations.refresh_all`).
:func:`tick` also recompiles the jobs whose right to reserved nodes ran out (the flips).

The constraints themselves, and planning ahead under them, are in
:mod:`fusesched.core.reservations`. Running jobs are never touched. Pure, like the rest of
the core.
"""

from __future__ import annotations

import heapq
from typing import TYPE_CHECKING

from fusesched.core.intake import back_in_line, dequeue
from fusesched.core.reservations import WAITING, Bookings, refresh, refresh_all, refusal
from fusesched.model.events import Decision, ReservationDeleted, ReservationSet
from fusesched.model.node import LABEL_HOSTNAME
from fusesched.model.phases import JobPhase
from fusesched.model.reservation import Reservation

if TYPE_CHECKING:
    from fusesched.core.records import JobRecord
    from fusesched.core.scheduler import SchedulerCore


class ReservationConflict(ValueError):
    """The name is in use, or a node is reserved by another in an overlapping window."""


def handle(
    core: SchedulerCore, event: ReservationSet | ReservationDeleted, now: float
) -> list[Decision]:
    """A reservation created (:class:`ReservationConflict` for a name in use or a node
    reserved by another in an overlapping window, ``ValueError`` for a node whose host-name
    label is not its name), changed (``event.replaces``: the same refusals, and ``KeyError``
    for an unknown or ended one) or deleted (``KeyError`` for an unknown name). A reservation
    whose end has come is kept until the next cycle ends it (its jobs, recovered after a
    restart, are then rejected as for any end); a new one of its name replaces it at once.
    Returns the rejections of jobs whose reservation ended, or that a change left out."""
    if isinstance(event, ReservationDeleted):
        bookings = core.bookings
        if bookings is None or event.name not in bookings.by_name:
            raise KeyError(f"unknown reservation {event.name!r}")
        res = bookings.by_name[event.name]
        reason = "" if res.end <= now else f"reservation {event.name} {event.reason}"
        return _drop(core, [res], reason, now)
    new = event.reservation
    if event.replaces:
        return _modify(core, new, now)
    _check_hosts(core, new)
    out: list[Decision] = []
    bookings = core.bookings
    if bookings is not None:
        old = bookings.by_name.get(new.name)
        if old is not None and old.end > now:
            raise ReservationConflict(f"reservation {new.name!r} already exists")
        _check_overlaps(bookings, new, old, now)
        if old is not None:  # it has ended (no cycle since): end it now
            out = _drop(core, [old], "", now, again=False)
    if core.bookings is None:
        core.bookings = _start_bookings(core)
    core.bookings.add(new)
    refresh_all(core, now)
    return out


def _check_overlaps(
    bookings: Bookings, new: Reservation, old: Reservation | None, now: float
) -> None:
    for other in bookings.by_name.values():
        if other is not old and other.end > now and other.overlaps(new):
            raise ReservationConflict(
                f"reservation {new.name!r} overlaps reservation {other.name!r} on "
                f"{', '.join(sorted(set(other.nodes) & set(new.nodes)))}"
            )


def _modify(core: SchedulerCore, new: Reservation, now: float) -> list[Decision]:
    """Replace the reservation of ``new``'s name (one that has not ended) by ``new``, with
    the checks of a creation. Running jobs are not touched (its own, on nodes it no longer
    holds or past its new end; others, on nodes it now holds). Its waiting jobs follow it:
    they wait for its new start (or may start at once when it moved earlier), and are
    rejected when their user or tenant may no longer use it or when they no longer fit on
    its nodes at all (a job that fits but must wait for room waits). Every waiting job gets
    the constraints of the new window."""
    bookings = core.bookings
    old = bookings.by_name.get(new.name) if bookings is not None else None
    if bookings is None or old is None or old.end <= now:
        raise KeyError(f"unknown reservation {new.name!r} (or it has ended)")
    _check_hosts(core, new)
    _check_overlaps(bookings, new, old, now)
    bookings.remove(old.name)
    bookings.add(new)
    out: list[Decision] = []
    own = [
        rec
        for rec in bookings.waiting.values()
        if rec.phase in WAITING and rec.spec.reservation == new.name
    ]
    for rec in own:
        refused = refusal(new, rec.spec.user, rec.spec.tenant)
        if refused:
            out.extend(
                _reject_waiting(core, rec, f"reservation {new.name} changed: {refused}", now)
            )
        else:
            _wait_for(core, rec, old.start, new.start, now)
    refresh_all(core, now)
    for rec in own:
        if rec.phase in WAITING and rec.never_fits:
            why = f"reservation {new.name} changed: the job does not fit on its nodes: "
            out.extend(_reject_waiting(core, rec, why + rec.never_fits, now))
    core._changed = True
    return out


def _wait_for(core: SchedulerCore, rec: JobRecord, old: float, new: float, now: float) -> None:
    """A reservation's waiting job, its reservation's start moved from ``old`` to ``new``:
    not eligible before ``new`` (nor before its own begin time or a requeue's backoff)."""
    if rec.not_before == old:  # (set by the reservation: its own begin time may be earlier)
        rec.not_before = rec.spec.begin_time or 0.0
    rec.not_before = max(rec.not_before, new)
    if rec.phase is JobPhase.QUEUED and rec.not_before > now and rec.id not in core._delayed:
        dequeue(core, rec, now, leaves=False)  # the window moved later: it waits again
        back_in_line(core, rec, now, "its reservation moved")
        if core.blocked_head is rec:  # (when it comes back, it is tried again)
            core.blocked_head = None


def _start_bookings(core: SchedulerCore) -> Bookings:
    """The first reservation: every job waiting now may get terms (the only walk over every
    job the core holds; afterwards the bookings know their waiting jobs)."""
    bookings = Bookings()
    for rec in core.jobs.values():
        if rec.phase in WAITING:
            bookings.enrol(rec)
    return bookings


def _check_hosts(core: SchedulerCore, res: Reservation) -> None:
    """The terms match nodes by their host-name label: refuse a reservation whose nodes the
    label would not single out (a node labelled with another host name, as an external
    cluster's ``pool:node``, or one that an agent's configuration relabelled)."""
    reserved = set(res.nodes)
    for spec in core.cluster.specs:
        host = spec.labels.get(LABEL_HOSTNAME)
        if host != spec.name and (spec.name in reserved or host in reserved):
            raise ValueError(
                f"node {spec.name} is labelled {LABEL_HOSTNAME}={host}: a reservation "
                f"cannot single out {spec.name if spec.name in reserved else host} by its name"
            )


def tick(core: SchedulerCore, now: float) -> list[Decision]:
    """At a cycle at or after ``core.bookings.due``: end the reservations whose end has come
    (their waiting jobs are rejected) and recompile the jobs whose right to the reserved
    nodes ran out."""
    bookings = core.bookings
    assert bookings is not None
    ended = [r for r in bookings.by_name.values() if r.end <= now]
    out: list[Decision] = []
    if ended:
        out = _drop(core, ended, "", now)
    bookings = core.bookings
    if bookings is None:
        return out
    flips = bookings.flips
    while flips and flips[0][0] <= now:
        _, job_id = heapq.heappop(flips)
        rec = core.jobs.get(job_id)
        if rec is not None:
            refresh(core, rec, now)
    bookings.recompute_due()
    return out


def _drop(
    core: SchedulerCore, gone: list[Reservation], reason: str, now: float, again: bool = True
) -> list[Decision]:
    """Remove reservations (ended, or deleted: ``reason``); reject their waiting jobs and
    (``again``) give every other waiting job its constraints without them."""
    bookings = core.bookings
    assert bookings is not None
    names = set()
    for res in gone:
        bookings.remove(res.name)
        names.add(res.name)
    out: list[Decision] = []
    for rec in list(bookings.waiting.values()):
        if rec.phase in WAITING and rec.spec.reservation in names:
            why = reason or f"reservation {rec.spec.reservation} ended before the job started"
            out.extend(_reject_waiting(core, rec, why, now))
    if again:
        refresh_all(core, now)
    core._changed = True
    return out


def _reject_waiting(core: SchedulerCore, rec: JobRecord, why: str, now: float) -> list[Decision]:
    if rec.phase is JobPhase.QUEUED:
        dequeue(core, rec, now)
    elif core.tenants is not None:
        core.tenants.dequeued(rec.id)
    return core._reject(rec, why, now)
