"""``POST /v1/jobs/cancel``: cancel every unfinished job that matches filters, in one request
(Slurm's ``scancel -u USER``, ``--me``, ``-n NAME``, ``-t STATE``, ``-p PARTITION``, and
job ids with them). See :mod:`fusesched.controller.bulk_cancel`."""

from __future__ import annotations

from collections.abc import Collection
from typing import Annotated, Literal

from fastapi import FastAPI, HTTPException
from pydantic import BaseModel, ConfigDict, Field, StringConstraints

from fusesched.api.access import Access, Caller, person, sees
from fusesched.controller.auth import Role
from fusesched.controller.bulk_cancel import CancelFilter, cancel_matching
from fusesched.model.job import JobSpec

#: most values in one filter
MAX_VALUES = 10_000

Value = Annotated[str, StringConstraints(min_length=1, max_length=256)]
Values = Annotated[list[Value], Field(min_length=1, max_length=MAX_VALUES)]


class CancelFilters(BaseModel):
    """Which jobs to cancel: those matching every filter given (each a list: any of its
    values). At least one is needed; ``me``: the caller's own (its token's user)."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    user: Values | None = None
    me: bool = False
    name: Values | None = None
    queue: Values | None = None
    state: Annotated[list[Literal["Pending", "Running"]], Field(min_length=1)] | None = None
    id: Values | None = Field(None, description="these jobs (an array's id: its members)")


class BulkCancelled(BaseModel):
    model_config = ConfigDict(frozen=True)

    cancelled: list[str]  # the job ids cancelled, in submission order
    denied: list[str]  # matched, but the caller may not cancel them (another user's)


def add_cancel_routes(app: FastAPI, access: Access) -> None:
    """Serve ``POST /v1/jobs/cancel`` from ``app``."""
    controller = access.controller
    checker = access.auth

    @app.post("/v1/jobs/cancel", response_model=BulkCancelled, tags=["jobs"])
    def cancel_matching_jobs(body: CancelFilters, p: Caller) -> BulkCancelled:
        """Cancel the unfinished jobs that match (an array's members one by one; one being
        stopped is not matched). Whom a caller may cancel is as for ``POST
        /v1/jobs/{job_id}/cancel``: with authentication on, a user only their own jobs, a
        tenant-admin its tenant's, a cluster-admin any; the jobs of its tenant it may not
        cancel are answered in ``denied`` (scancel's "Access/permission denied"), those of
        other tenants are not seen. 400 without any filter."""
        person(p)
        named = (body.user, body.name, body.queue, body.state, body.id)
        if not body.me and all(given is None for given in named):
            raise HTTPException(400, "no job identification provided (name ids or a filter)")
        users = set(body.user) if body.user is not None else None
        if body.me:
            if not checker.enabled:
                raise HTTPException(
                    400,
                    "authentication is off on this controller: me=true names no one "
                    "(name the user: user=NAME)",
                )
            users = {*(users or ()), p.user}  # (as GET /v1/jobs: -u X --me is X's and mine)
        tenants = None if p.role is Role.CLUSTER_ADMIN else frozenset({p.tenant})

        def may(spec: JobSpec) -> bool:
            if not checker.enabled:
                return True
            return sees(p, spec.tenant) and (spec.user == p.user or p.role is not Role.USER)

        done = cancel_matching(
            controller,
            CancelFilter(
                users=_set(users),
                names=_set(body.name),
                queues=_set(body.queue),
                states=_set(body.state),
                ids=_set(body.id),
                tenants=tenants if checker.enabled else None,
            ),
            may,
        )
        others = [j for j in done.cancelled if done.users[j] != p.user]
        if checker.enabled and others:
            access.audit(p, "cancel", cancelled=others, filters=body.model_dump(exclude_none=True))
        return BulkCancelled(cancelled=done.cancelled, denied=done.denied)


def _set(values: Collection[str] | None) -> frozenset[str] | None:
    return None if values is None else frozenset(values)
