"""Advance reservations (docs/RESERVATIONS.md; controller/reservations.py): anyone signed in
lists them, cluster-admins create, change and delete them (every change goes to the audit
log)."""

from __future__ import annotations

from typing import Annotated

from fastapi import FastAPI, HTTPException
from pydantic import Field

from fusesched.api.access import Access, Caller, person
from fusesched.api.responses import forbidden
from fusesched.api.schemas import _Input, _View
from fusesched.controller import reservations
from fusesched.controller.auth import Principal, Role
from fusesched.model.reservation import Reservation
from fusesched.model.time_field import UnixTime
from fusesched.model.times import LATEST_TIME

_NAME = r"^[A-Za-z0-9][A-Za-z0-9_.-]{0,63}$"
_Node = Annotated[str, Field(min_length=1, max_length=253)]
_Who = Annotated[str, Field(min_length=1, max_length=200)]  # a user's or tenant's name


class ReservationCreate(_Input):
    """A new reservation: nodes by name, the window in Unix seconds, and whom it is for
    (neither users nor tenants: a maintenance reservation, for nobody)."""

    name: str = Field(pattern=_NAME)
    nodes: list[_Node] = Field(min_length=1, max_length=100_000)
    start: UnixTime
    end: UnixTime
    users: list[_Who] = Field(default_factory=list)
    tenants: list[_Who] = Field(default_factory=list)


class ReservationUpdate(_Input):
    """What to change (a field left out is kept): the window (``end`` or ``duration_s``,
    counted from the new or kept start), the nodes, whom it is for (an empty list clears
    it; with neither users nor tenants it is a maintenance reservation)."""

    start: UnixTime | None = None
    end: UnixTime | None = None
    duration_s: Annotated[float, Field(gt=0, le=LATEST_TIME)] | None = None
    nodes: list[_Node] | None = Field(default=None, min_length=1, max_length=100_000)
    users: list[_Who] | None = None
    tenants: list[_Who] | None = None


class ReservationView(_View):
    name: str
    nodes: list[str]
    start: float
    end: float
    users: list[str]
    tenants: list[str]
    maintenance: bool
    active: bool  # its window has opened
    created_at: float
    created_by: str


class ReservationCreated(_View):
    reservation: ReservationView
    warnings: list[str]  # running jobs that run into the window (they are not touched)


class ReservationList(_View):
    reservations: list[ReservationView]


def _view(stored: reservations.Stored, now: float) -> ReservationView:
    res = stored.reservation
    return ReservationView(
        name=res.name,
        nodes=list(res.nodes),
        start=res.start,
        end=res.end,
        users=list(res.users),
        tenants=list(res.tenants),
        maintenance=res.maintenance,
        active=res.start <= now,
        created_at=stored.created_at,
        created_by=stored.created_by,
    )


def add_reservation_routes(app: FastAPI, access: Access) -> None:
    """Serve ``/v1/reservations`` and ``/v1/reservations/{name}`` from ``app``."""
    controller = access.controller

    def operator(p: Principal) -> None:
        person(p)
        if access.auth.enabled and p.role is not Role.CLUSTER_ADMIN:
            raise forbidden("only cluster-admins may create, change or delete reservations")

    @app.get("/v1/reservations", response_model=ReservationList, tags=["cluster"])
    def list_reservations(p: Caller) -> ReservationList:
        """Every reservation that has not ended, by start."""
        person(p)
        now = controller.clock()
        return ReservationList(
            reservations=[_view(s, now) for s in reservations.current(controller)]
        )

    @app.post(
        "/v1/reservations", response_model=ReservationCreated, status_code=201, tags=["cluster"]
    )
    def create_reservation(body: ReservationCreate, p: Caller) -> ReservationCreated:
        """Reserve nodes for a window: 400 for unknown nodes, an external pool's or relabelled
        ones, an end not after the start or one that has passed; 409 for a name in use or a
        node another reservation holds in an overlapping window (nothing is stored then: a
        201 is a reservation the scheduler enforces). Running jobs are not touched:
        ``warnings`` names those whose time limit lets them run into the window."""
        operator(p)
        try:
            res = Reservation(
                body.name,
                tuple(body.nodes),
                body.start,
                body.end,
                tuple(dict.fromkeys(body.users)),
                tuple(dict.fromkeys(body.tenants)),
            )
            stored, warnings = reservations.create(controller, res, p.user)
        except reservations.ReservationConflict as exc:
            raise HTTPException(409, str(exc)) from None
        except ValueError as exc:  # (ReservationRefused, or the model's own checks)
            raise HTTPException(400, str(exc)) from None
        access.audit(p, "reservation-create", reservation=res.name, nodes=list(res.nodes))
        return ReservationCreated(reservation=_view(stored, controller.clock()), warnings=warnings)

    @app.patch("/v1/reservations/{name}", response_model=ReservationCreated, tags=["cluster"])
    def update_reservation(name: str, body: ReservationUpdate, p: Caller) -> ReservationCreated:
        """Change a reservation (``scontrol update reservation``), with the checks of a
        creation: 404 for an unknown (or ended) one; 400 for unknown, external or relabelled
        nodes, an end not after the start or one that has passed, nothing to change, or both
        an end and a duration; 409 for a node another reservation holds in an overlapping
        window (nothing changes then). Running jobs are not touched; its waiting jobs follow
        the change (rejected when their user or tenant is no longer admitted, or when they
        no longer fit on its nodes)."""
        operator(p)
        change = reservations.Change(
            start=body.start,
            end=body.end,
            duration=body.duration_s,
            nodes=tuple(body.nodes) if body.nodes is not None else None,
            users=tuple(dict.fromkeys(body.users)) if body.users is not None else None,
            tenants=tuple(dict.fromkeys(body.tenants)) if body.tenants is not None else None,
        )
        try:
            stored, warnings = reservations.update_reservation(controller, name, change)
        except reservations.UnknownReservation as exc:
            raise HTTPException(404, str(exc)) from None
        except reservations.ReservationConflict as exc:
            raise HTTPException(409, str(exc)) from None
        except ValueError as exc:  # (ReservationRefused, or the model's own checks)
            raise HTTPException(400, str(exc)) from None
        res = stored.reservation
        access.audit(
            p,
            "reservation-update",
            reservation=name,
            nodes=list(res.nodes),
            start=res.start,
            end=res.end,
            users=list(res.users),
            tenants=list(res.tenants),
        )
        return ReservationCreated(reservation=_view(stored, controller.clock()), warnings=warnings)

    @app.delete("/v1/reservations/{name}", status_code=204, tags=["cluster"])
    def delete_reservation(name: str, p: Caller) -> None:
        """Delete a reservation: its nodes are ordinary again, and the jobs waiting to run in
        it are rejected. 404 for an unknown (or ended) one."""
        operator(p)
        try:
            reservations.delete_reservation(controller, name)
        except reservations.UnknownReservation as exc:
            raise HTTPException(404, str(exc)) from None
        access.audit(p, "reservation-delete", reservation=name)
