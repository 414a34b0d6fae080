"""Advance reservations in the simulator (docs/RESERVATIONS.md, "In the simulator and the
digital twin").

A :class:`SimReservation` is a :class:`~fusesched.model.reservation.Reservation` (its times
in the simulation's seconds) and the moment it is made. The engine hands it to the core at
that moment as the live controller does (``ReservationSet``, the same core call), so the
core's rules apply unchanged: jobs submitted into it (``JobSpec.reservation``) run on its
nodes inside its window, every other job keeps off those nodes while it could run into the
window, and the backfill planners plan around it.

This module also reads the command line's form of a reservation
(:func:`parse_reservation`), checks a set of them against the nodes before a run (:func:`check`,
the refusals the core would give, up front and naming the reservation), and fits them to a
changed cluster or workload (:func:`fit_to`, :func:`bind`).
"""

from __future__ import annotations

import dataclasses
import math
import re
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

from fusesched.hostlist import expand_hostlist
from fusesched.model.events import ReservationSet
from fusesched.model.job import JobSpec
from fusesched.model.node import LABEL_HOSTNAME, NodeSpec
from fusesched.model.reservation import Reservation

if TYPE_CHECKING:
    from fusesched.sim.engine import SimJob

#: the command line's form (``fusesched simulate --reservation``, ``fusesched twin run``)
FORM = "NAME:NODES:START:END[:users=A,B][:tenants=T]"

#: a number of seconds on the command line: ASCII digits only (``float()`` alone would also
#: take other scripts' digits, ``1_000`` and spaces)
_SECONDS = re.compile(r"[+-]?(?:[0-9]+(?:\.[0-9]*)?|\.[0-9]+)(?:[eE][+-]?[0-9]+)?")


@dataclass(frozen=True, slots=True)
class SimReservation:
    """``reservation`` (times in the simulation's seconds), handed to the core at
    ``made_at`` (before the jobs submitted at that instant)."""

    reservation: Reservation
    made_at: float = 0.0


def parse_reservation(text: str) -> Reservation:
    """A reservation from ``NAME:NODES:START:END[:users=A,B][:tenants=T]``: NODES a Slurm
    host list (``n[1-4],gpu7``), START and END seconds of the simulation (a trace's seconds
    after its first submission), END also ``+SECONDS`` (a duration). ``ValueError`` saying
    what is wrong."""
    parts = text.split(":")
    if len(parts) < 4:
        raise ValueError(f"reservation {text!r}: expected {FORM}")
    name, hosts, start_text, end_text, *rest = parts
    try:
        nodes = tuple(expand_hostlist(hosts)) if hosts.strip() else ()
    except ValueError as exc:
        raise ValueError(f"reservation {text!r}: nodes: {exc}") from None
    start = _seconds(start_text, text, "START")
    if end_text.startswith("+"):
        end = start + _seconds(end_text[1:], text, "the duration", signed=False)
    else:
        end = _seconds(end_text, text, "END")
    people: dict[str, tuple[str, ...]] = {"users": (), "tenants": ()}
    for extra in rest:
        key, sep, value = extra.partition("=")
        if not sep or key not in people:
            raise ValueError(f"reservation {text!r}: {extra!r} is not users=A,B or tenants=T")
        if people[key]:
            raise ValueError(f"reservation {text!r}: {key} is given twice")
        names = tuple(n.strip() for n in value.split(","))
        if not all(names):
            raise ValueError(f"reservation {text!r}: {key}: an empty name")
        people[key] = names
    return Reservation(name, nodes, start, end, people["users"], people["tenants"])


def _seconds(value: str, text: str, what: str, signed: bool = True) -> float:
    if not _SECONDS.fullmatch(value) or (not signed and value[:1] in "+-"):
        raise ValueError(f"reservation {text!r}: {what} {value!r} is not a number of seconds")
    seconds = float(value)
    if not math.isfinite(seconds):
        raise ValueError(f"reservation {text!r}: {what} must be a finite number of seconds")
    return seconds


def check(nodes: Sequence[NodeSpec], reservations: Sequence[SimReservation]) -> None:
    """Refuse, before a run, what the core would refuse when handed them (``ValueError``
    naming the reservation): an unknown node, a node whose host-name label is not its name
    (the core's terms match nodes by that label), two of one name, or one node in two
    reservations whose windows overlap while both exist; and one that ends before it is
    made (live, refused as "its end has passed"; in a replay it would hold nothing)."""
    known = {n.name for n in nodes}
    for item in reservations:
        res = item.reservation
        if not (math.isfinite(item.made_at) and item.made_at >= 0):
            raise ValueError(f"reservation {res.name}: made at {item.made_at:g}, before 0")
        if res.end <= item.made_at:
            raise ValueError(
                f"reservation {res.name}: it ends at {res.end:g} s, not after it is made "
                f"({item.made_at:g} s): it would never hold its nodes"
            )
        unknown = [n for n in res.nodes if n not in known]
        if unknown:
            few = ", ".join(unknown[:3]) + (" …" if len(unknown) > 3 else "")
            raise ValueError(
                f"reservation {res.name}: no node {few} in the simulated cluster ({_sample(nodes)})"
            )
        reserved = set(res.nodes)
        for spec in nodes:
            host = spec.labels.get(LABEL_HOSTNAME)
            if host != spec.name and (spec.name in reserved or host in reserved):
                raise ValueError(
                    f"reservation {res.name}: node {spec.name} is labelled "
                    f"{LABEL_HOSTNAME}={host}, so a reservation cannot single it out"
                )
    ordered = sorted(reservations, key=lambda r: r.made_at)
    for k, later in enumerate(ordered):
        for earlier in ordered[:k]:
            a, b = earlier.reservation, later.reservation
            if a.end <= later.made_at:
                continue  # it has ended when the other is made (the core ends it first)
            if a.name == b.name:
                raise ValueError(f"reservation {a.name} is given twice with overlapping lives")
            if a.overlaps(b):
                shared = sorted(set(a.nodes) & set(b.nodes))
                raise ValueError(
                    f"reservations {a.name} and {b.name} hold {', '.join(shared[:3])} in "
                    "overlapping windows"
                )


def _sample(nodes: Sequence[NodeSpec]) -> str:
    if not nodes:
        return "no nodes"
    if len(nodes) <= 3:
        return "nodes " + ", ".join(n.name for n in nodes)
    return f"{len(nodes)} nodes, {nodes[0].name} … {nodes[-1].name}"


def from_live(res: Reservation, created_at: float | None, origin: float) -> SimReservation:
    """A live reservation (Unix seconds) in a replay whose 0 is ``origin`` (the first
    submission): its window shifted like the jobs', made when it was created (``None``:
    before anything replayed), or at 0 if that was earlier."""
    shifted = dataclasses.replace(res, start=res.start - origin, end=res.end - origin)
    made = created_at - origin if created_at is not None else 0.0
    return SimReservation(shifted, max(0.0, made))


def timeline(reservations: Sequence[SimReservation]) -> list[tuple[float, ReservationSet]]:
    """The core's events, in the order the engine hands them over: by the time they are
    made, then by start and name (so the input's order does not matter)."""
    ordered = sorted(
        reservations, key=lambda r: (r.made_at, r.reservation.start, r.reservation.name)
    )
    return [(r.made_at, ReservationSet(r.reservation)) for r in ordered]


def fit_to(
    reservations: Iterable[SimReservation], nodes: Sequence[NodeSpec]
) -> tuple[list[SimReservation], list[str]]:
    """The reservations on the nodes of a changed cluster: each keeps the nodes that are
    still there; one with none left is dropped (its name in the second list)."""
    known = {n.name for n in nodes}
    kept: list[SimReservation] = []
    dropped: list[str] = []
    for item in reservations:
        res = item.reservation
        left = tuple(n for n in res.nodes if n in known)
        if not left:
            dropped.append(res.name)
        elif len(left) == len(res.nodes):
            kept.append(item)
        else:
            kept.append(dataclasses.replace(item, reservation=dataclasses.replace(res, nodes=left)))
    return kept, dropped


def unreserved(spec: JobSpec, names: set[str]) -> JobSpec:
    """``spec`` without its reservation when that is not one of ``names`` (a reservation
    the replay does not have: the job runs as an ordinary one, as it did run live)."""
    if spec.reservation is None or spec.reservation in names:
        return spec
    return dataclasses.replace(spec, reservation=None)


def made_before_its_jobs(item: SimReservation, submits: Iterable[float]) -> SimReservation:
    """``item`` made no later than the first of ``submits`` (the submit times of the jobs
    submitted into it): live, it existed when they were submitted."""
    first = min(submits, default=math.inf)
    if first < item.made_at:
        return dataclasses.replace(item, made_at=max(0.0, first))
    return item


def bind(
    jobs: Sequence[SimJob], booked: Sequence[SimReservation]
) -> tuple[list[SimJob], list[SimReservation], int]:
    """``jobs`` and ``booked`` fitted to each other: a reservation is made no later than
    the first job submitted into it (live, it existed when they were submitted); a job
    naming a reservation that is not in ``booked`` (one that ended, was deleted or left out)
    runs as an ordinary job, and the third value counts those. Nothing changes when no job
    names a reservation."""
    if not any(j.spec.reservation is not None for j in jobs):
        return list(jobs), list(booked), 0
    from fusesched.sim.engine import SimJob

    names = {b.reservation.name for b in booked}
    submits: dict[str, list[float]] = {}
    out: list[SimJob] = []
    without = 0
    for job in jobs:
        name = job.spec.reservation
        if name is None:
            out.append(job)
        elif name in names:
            submits.setdefault(name, []).append(job.spec.submit_time)
            out.append(job)
        else:
            without += 1
            out.append(SimJob(unreserved(job.spec, names), job.runtime, job.exit_code))
    made = [made_before_its_jobs(b, submits.get(b.reservation.name, ())) for b in booked]
    return out, made, without
