"""Advance reservations in the live controller (docs/RESERVATIONS.md): create, list, change
and delete them, check a submission that names one, and give them back to the core after a
restart.

A change is decided by the core, under the controller's lock: a new or changed reservation
is handed to the core first and stored only if the core took it (so a 201 or 200 means the
core enforces it, and a refusal stores nothing); a deletion is stored and handed to the core
together.
A restarted controller hands the core every stored reservation before any recovered job
(:func:`recover`) — the ended ones too, so that their waiting jobs are rejected as for any
end. The core ends a reservation by itself at its end; the store's row of an ended one is
removed the next time the table is read.
"""

from __future__ import annotations

import logging
import math
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from sqlalchemy import delete, insert, select, update
from sqlalchemy.exc import IntegrityError

from fusesched.core import reservation_changes as core_changes
from fusesched.core import reservations as core_reservations
from fusesched.core.reservations import refusal as core_refusal
from fusesched.model.events import Decision, ReservationDeleted, ReservationSet
from fusesched.model.job import JobSpec
from fusesched.model.node import LABEL_HOSTNAME
from fusesched.model.reservation import Reservation, when
from fusesched.model.times import LATEST_TIME
from fusesched.store.schema import reservations as table
from fusesched.submit.begin import begin_reason
from fusesched.submit.feasibility import check_feasible

if TYPE_CHECKING:
    from fusesched.controller.service import Controller
    from fusesched.store.store import Store

log = logging.getLogger(__name__)

#: what joins an external pool's name and its node's (federation.remote_name)
POOL_SEPARATOR = ":"


class ReservationRefused(ValueError):
    """A reservation that cannot be made as asked (unknown nodes, an end before the start…)."""


class ReservationConflict(ValueError):
    """The name is taken, or a node is reserved by another in an overlapping window (409)."""


class UnknownReservation(KeyError):
    """No reservation of that name (or it has ended)."""

    def __str__(self) -> str:
        return f"no reservation {self.args[0]!r} (or it has ended)"


@dataclass(frozen=True, slots=True)
class Stored:
    """A stored reservation, with who made it and when."""

    reservation: Reservation
    created_at: float
    created_by: str


# ---------------------------------------------------------------------------- the store


def _read(store: Store) -> list[Stored]:
    with store._read() as conn:  # the store's own connection (as store/usage.py)
        rows = conn.execute(select(table).order_by(table.c.start_time, table.c.name))
        return [_stored(m) for m in rows.mappings()]


def _stored(m: Any) -> Stored:
    res = Reservation(
        m["name"],
        tuple(m["nodes"]),
        float(m["start_time"]),
        float(m["end_time"]),
        tuple(m["users"]),
        tuple(m["tenants"]),
    )
    return Stored(res, float(m["created_at"]), m["created_by"])


def _insert(store: Store, res: Reservation, now: float, by: str) -> None:
    row = {
        "name": res.name,
        "nodes": list(res.nodes),
        "start_time": res.start,
        "end_time": res.end,
        "users": list(res.users),
        "tenants": list(res.tenants),
        "created_at": now,
        "created_by": by,
    }
    with store._write() as conn:
        conn.execute(insert(table), [row])


def _replace(store: Store, res: Reservation) -> int:
    """Store ``res`` over the row of its name (who made it and when stay)."""
    values = {
        "nodes": list(res.nodes),
        "start_time": res.start,
        "end_time": res.end,
        "users": list(res.users),
        "tenants": list(res.tenants),
    }
    with store._write() as conn:
        return conn.execute(update(table).where(table.c.name == res.name).values(values)).rowcount


def _remove(store: Store, names: Sequence[str]) -> int:
    with store._write() as conn:
        return conn.execute(delete(table).where(table.c.name.in_(list(names)))).rowcount


def waiting_reason(store: Store, name: str, now: float) -> str:
    """What a job submitted into reservation ``name`` says while it waits for the window
    (``fusesched show``'s reason, as the core says it); ``""`` once the window is open."""
    found = next((s.reservation for s in _read(store) if s.reservation.name == name), None)
    if found is None or found.start <= now:
        return ""
    return f"reservation {name} starts at {when(found.start)}"


def current(ctl: Controller) -> list[Stored]:
    """The stored reservations that have not ended, by start (ended ones are removed)."""
    now = ctl.clock()
    rows = _read(ctl.persist.store)
    ended = [s.reservation.name for s in rows if s.reservation.end <= now]
    if ended:
        _remove(ctl.persist.store, ended)
    return [s for s in rows if s.reservation.end > now]


# ---------------------------------------------------------------------------- operations


def recover(ctl: Controller) -> None:
    """At a controller's start: every stored reservation goes to the core first (before the
    recovered jobs that may name one); one that ended while the controller was down is
    ended by the first cycle, and its waiting jobs are rejected as at any end."""
    now = ctl.clock()
    rows = _read(ctl.persist.store)
    for stored in rows:
        try:
            ctl.core.handle(ReservationSet(stored.reservation), now)
        except ValueError as exc:  # (a node relabelled since, say: the rest still count)
            log.error("stored reservation %s refused by the core: %s", stored.reservation.name, exc)
    ended = [s.reservation.name for s in rows if s.reservation.end <= now]
    if ended:
        _remove(ctl.persist.store, ended)


def create(ctl: Controller, res: Reservation, by: str) -> tuple[Stored, list[str]]:
    """Hand ``res`` to the core and store it (both or neither); returns it and warnings:
    the running jobs whose time limit lets them run into the window (they are not
    touched)."""
    with ctl.lock:
        now = ctl.clock()
        if res.end <= now:
            raise ReservationRefused(
                f"reservation {res.name}: its end ({when(res.end)}) has passed"
            )
        _check_nodes(ctl, res)
        existing = current(ctl)
        if any(other.reservation.name == res.name for other in existing):
            raise ReservationConflict(f"reservation {res.name!r} already exists")
        _check_overlaps(existing, res)
        warnings = overlapping_jobs(ctl, res)
        try:
            decisions = ctl.core.handle(ReservationSet(res), now)
        except core_changes.ReservationConflict as exc:
            raise ReservationConflict(str(exc)) from None
        except ValueError as exc:
            raise ReservationRefused(str(exc)) from None
        try:
            _insert(ctl.persist.store, res, now, by)
        except Exception as exc:  # the core forgets it: both or neither
            gone = ctl.core.handle(ReservationDeleted(res.name, "could not be stored"), now)
            _settle(ctl, [*decisions, *gone], now)
            if isinstance(exc, IntegrityError):  # (made meanwhile by another controller)
                raise ReservationConflict(f"reservation {res.name!r} already exists") from None
            raise
        _settle(ctl, decisions, now)
    ctl.wake()
    return Stored(res, now, by), warnings


@dataclass(frozen=True, slots=True)
class Change:
    """What to change in a reservation (None: keep it). ``duration`` sets the end from the
    (new or kept) start; with ``end`` too it is refused. An empty ``users`` or ``tenants``
    clears them (with both empty, it becomes a maintenance reservation)."""

    start: float | None = None
    end: float | None = None
    duration: float | None = None
    nodes: tuple[str, ...] | None = None
    users: tuple[str, ...] | None = None
    tenants: tuple[str, ...] | None = None

    def applied(self, old: Reservation) -> Reservation:
        """``old`` changed (``ValueError`` with the reason, as the model checks a new one)."""
        if self == Change():
            raise ReservationRefused(
                "nothing to change: give a start, an end or a duration, nodes, users or tenants"
            )
        if self.end is not None and self.duration is not None:
            raise ReservationRefused("give an end or a duration, not both")
        if self.duration is not None and not 0 < self.duration < math.inf:
            raise ReservationRefused(f"the duration must be positive, not {self.duration:g} s")
        start = old.start if self.start is None else self.start
        end = old.end if self.end is None else self.end
        if self.duration is not None:
            end = start + self.duration
        return Reservation(
            old.name,
            old.nodes if self.nodes is None else self.nodes,
            start,
            end,
            old.users if self.users is None else self.users,
            old.tenants if self.tenants is None else self.tenants,
        )


def update_reservation(ctl: Controller, name: str, change: Change) -> tuple[Stored, list[str]]:
    """Change a reservation that has not ended, with the checks of a creation; the core
    takes the change first and it is stored only then. Returns it and warnings: running
    jobs whose time limit lets them run into the new window on its nodes (not touched).
    ``UnknownReservation`` for an unknown or ended one."""
    with ctl.lock:
        now = ctl.clock()
        rows = current(ctl)
        found = next((s for s in rows if s.reservation.name == name), None)
        if found is None:
            raise UnknownReservation(name)
        res = change.applied(found.reservation)
        if res.end <= now:
            raise ReservationRefused(
                f"reservation {res.name}: its new end ({when(res.end)}) has passed"
            )
        _check_nodes(ctl, res)
        _check_overlaps([r for r in rows if r.reservation.name != name], res)
        warnings = overlapping_jobs(ctl, res)
        try:
            decisions = ctl.core.handle(ReservationSet(res, replaces=True), now)
        except KeyError:  # (refused by the core at a restart: only the row was left)
            raise UnknownReservation(name) from None
        except core_changes.ReservationConflict as exc:
            raise ReservationConflict(str(exc)) from None
        except ValueError as exc:
            raise ReservationRefused(str(exc)) from None
        try:
            stored = _replace(ctl.persist.store, res)
        except Exception:  # (the store failed): the core goes back to the stored window
            back = ctl.core.handle(ReservationSet(found.reservation, replaces=True), now)
            _settle(ctl, [*decisions, *back], now)  # (jobs the change rejected stay so)
            raise
        if not stored:  # (deleted meanwhile by another controller): the core forgets it
            gone = ctl.core.handle(ReservationDeleted(name, "could not be stored"), now)
            _settle(ctl, [*decisions, *gone], now)
            raise UnknownReservation(name)
        _settle(ctl, decisions, now)
        _new_reasons(ctl, res, now)
    ctl.wake()
    return Stored(res, found.created_at, found.created_by), warnings


def _new_reasons(ctl: Controller, res: Reservation, now: float) -> None:
    """The reasons its waiting jobs show (``fusesched show``) after a change of its window,
    as at submission: its new start, or their own later begin time, or none once the
    window is open (written with the next cycle's flush)."""
    for live in ctl.jobs.values():
        if live.spec.reservation != res.name or live.hold is not None or live.nodes:
            continue
        rec = ctl.core.jobs.get(live.id)
        if rec is not None and rec.phase not in core_reservations.WAITING:
            continue
        begin = live.spec.begin_time
        if begin is not None and begin > now and begin > res.start:
            reason = begin_reason(begin)
        elif res.start > now:
            reason = f"reservation {res.name} starts at {when(res.start)}"
        else:
            reason = ""
        ctl.persist.job_reason(live.id, reason)


def _check_overlaps(others: Iterable[Stored], res: Reservation) -> None:
    """No node in two overlapping windows: a conflict names the nodes and the other one."""
    for other in others:
        if other.reservation.overlaps(res):
            shared = sorted(set(other.reservation.nodes) & set(res.nodes))
            raise ReservationConflict(
                f"{', '.join(shared[:5])} already reserved by {other.reservation.name} "
                f"({when(other.reservation.start)} to {when(other.reservation.end)})"
            )


def _check_nodes(ctl: Controller, res: Reservation) -> None:
    """Refuse unknown nodes, an external pool's (``pool:node``: not ours to keep free),
    and local ones whose host-name label is not their name (the core matches by it)."""
    rows = {n.name: n for n in ctl.persist.store.list_nodes()}
    unknown = [n for n in res.nodes if n not in rows and n not in ctl.nodes]
    if unknown:
        raise ReservationRefused(f"unknown node(s): {_few(unknown)}")
    pooled = [n for n in res.nodes if POOL_SEPARATOR in n]
    if pooled:
        raise ReservationRefused(
            f"{_few(pooled)}: an external pool's node(s) cannot be reserved (its cluster "
            "schedules them); reserve local agents' nodes"
        )
    for name in res.nodes:
        live = ctl.nodes.get(name)
        labels = live.spec.labels if live is not None else rows[name].labels
        host = labels.get(LABEL_HOSTNAME, name)
        if host != name:
            raise ReservationRefused(
                f"node {name} is labelled {LABEL_HOSTNAME}={host} (its agent's configuration): "
                "a reservation cannot single it out; remove that label to reserve it"
            )


def _few(names: Sequence[str]) -> str:
    return ", ".join(names[:5]) + (" …" if len(names) > 5 else "")


def _settle(ctl: Controller, decisions: Sequence[Decision], now: float) -> None:
    """The core's rejections of jobs whose reservation ended or was deleted, as a cycle
    applies them (written with the next cycle's flush)."""
    for decision in decisions:
        ctl._apply(decision, now)


def overlapping_jobs(ctl: Controller, res: Reservation) -> list[str]:
    """Running jobs on ``res``'s nodes whose time limit lets them run past its start (not
    its own jobs)."""
    nodes = set(res.nodes)
    out: list[str] = []
    for live in ctl.jobs.values():
        rec = ctl.core.jobs.get(live.id)
        if not live.nodes or rec is None or rec.start_time is None:
            continue
        if live.spec.reservation == res.name:
            continue
        if nodes.isdisjoint(live.nodes):
            continue
        limit = live.spec.walltime_s
        end = rec.start_time + limit if limit is not None else math.inf
        if end > res.start:
            until = "without a time limit" if limit is None else f"until {when(end)}"
            if end > LATEST_TIME:
                until = "past year 9999 (its time limit)"
            on = ", ".join(sorted(nodes & set(live.nodes)))
            out.append(f"job {live.id} runs on {on} {until}, into the reservation")
    return out


def delete_reservation(ctl: Controller, name: str) -> None:
    """Delete a reservation that has not ended; its waiting jobs are rejected."""
    with ctl.lock:
        now = ctl.clock()
        if name not in {s.reservation.name for s in current(ctl)}:
            raise UnknownReservation(name)
        _remove(ctl.persist.store, [name])
        try:
            decisions = ctl.core.handle(ReservationDeleted(name), now)
        except KeyError:  # (refused by the core at a restart: only the row was left)
            decisions = []
        _settle(ctl, decisions, now)
    ctl.wake()


def refusal(ctl: Controller, spec: JobSpec) -> str | None:
    """Why a submission may not run in the reservation it names (unknown, ended, not for its
    user or tenant, too big for its nodes), or None."""
    name = spec.reservation
    if name is None:
        return None
    found = next((s.reservation for s in current(ctl) if s.reservation.name == name), None)
    if found is None:
        return f"reservation {name!r} does not exist (or has ended)"
    refused = core_refusal(found, spec.user, spec.tenant)
    if refused:
        return refused
    nodes = set(found.nodes)
    specs = [live.spec for n, live in ctl.nodes.items() if n in nodes]
    reason = check_feasible(spec, specs)
    if reason:
        return f"does not fit on the nodes of reservation {name}: {reason}"
    return None
