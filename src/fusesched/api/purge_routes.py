"""``POST /v1/admin/purge``: remove the records of the jobs that ended before a cutoff (their
rows, tasks, events, job tokens, environments no job names any more, and their log folders;
controller/retention.py, store/purge.py; ``fusesched purge``). Cluster-admins only; a purge
that removes something goes to the audit log.

One call works for at most :data:`BUDGET_S` seconds: when jobs are left to judge it answers
``more: true`` and ``after``, which the next call passes back (the SDK's
:meth:`~fusesched.sdk.Client.purge` goes on by itself).
"""

from __future__ import annotations

from typing import Annotated, Final

from fastapi import FastAPI, HTTPException
from pydantic import BaseModel, ConfigDict, Field, StringConstraints

from fusesched.api.access import Access, Caller, person
from fusesched.api.responses import forbidden
from fusesched.controller import retention
from fusesched.controller.auth import Role
from fusesched.store.purge import InFairShareWindow, PurgeRefused

#: Seconds one call purges for at most (then ``more``).
BUDGET_S: Final = 10.0

FiniteTime = Annotated[float, Field(ge=0, allow_inf_nan=False)]


class PurgeCursor(BaseModel):
    """Where a purge stopped: the last job judged (its end time and id)."""

    model_config = ConfigDict(extra="forbid")

    end_time: Annotated[float, Field(allow_inf_nan=False)]
    id: Annotated[str, StringConstraints(min_length=1, max_length=1000)]


class PurgeRequest(BaseModel):
    """Which jobs' records to remove."""

    model_config = ConfigDict(extra="forbid")

    ended_before: FiniteTime = Field(
        description="Unix time: the jobs that ended before it are purged. Not in the future; "
        "refused (409) when fair share still reads back runs that ended before it after a "
        "restart (20 half-lives), unless `force`."
    )
    dry_run: bool = Field(default=False, description="Count what would go; remove nothing.")
    force: bool = Field(
        default=False,
        description="Purge within the fair-share window too: that usage is forgotten at the "
        "controller's next restart.",
    )
    after: PurgeCursor | None = Field(
        default=None, description="Go on from where the previous call stopped (its `after`)."
    )


class PurgeReply(BaseModel):
    """What went (a dry run: would go)."""

    dry_run: bool
    ended_before: float
    jobs: int
    tasks: int
    events: int
    tokens: int  # the jobs' own API tokens
    environments: int  # submitting environments no job names any more
    files: int  # in the jobs' log folders
    bytes: int  # those files' sizes
    kept: int  # jobs ended before the cutoff that stay: a waiting job depends on them,
    # their array has not all ended before it, or the controller still holds them
    more: bool  # stopped after BUDGET_S: call again with `after`
    after: PurgeCursor | None


def add_purge_routes(app: FastAPI, access: Access) -> None:
    """Serve ``POST /v1/admin/purge`` from ``app``."""
    controller = access.controller

    @app.post("/v1/admin/purge", response_model=PurgeReply, tags=["cluster"])
    def purge(body: PurgeRequest, p: Caller) -> PurgeReply:
        """Remove the records of the jobs that ended before `ended_before`, each whole (row,
        tasks, events, job tokens, log folder), and the submitting environments no job
        names any more; as Slurm's `PurgeJobAfter`. Waiting and running jobs stay, and so do
        the jobs waiting jobs depend on, arrays not all ended before the cutoff, and the
        audit log. 400: the cutoff is in the future; 409: it would erase usage fair share
        still counts (without `force`), or another purge runs. Purged jobs also leave
        `fusesched usage` and `sacct`."""
        person(p)
        if access.auth.enabled and p.role is not Role.CLUSTER_ADMIN:
            raise forbidden("only cluster-admins may purge job records")
        after = None if body.after is None else (body.after.end_time, body.after.id)
        try:
            done = retention.purge(
                controller,
                body.ended_before,
                dry_run=body.dry_run,
                force=body.force,
                after=after,
                budget_s=BUDGET_S,
            )
        except PurgeRefused as exc:
            status = 409 if isinstance(exc, InFairShareWindow) else 400
            raise HTTPException(status, str(exc)) from None
        except retention.PurgeBusy as exc:
            raise HTTPException(409, str(exc)) from None
        counts = done.counts
        if not body.dry_run and counts.jobs:
            access.audit(
                p, "purge", ended_before=body.ended_before, force=body.force, **counts.as_dict()
            )
        cursor = (
            None if done.after is None else PurgeCursor(end_time=done.after[0], id=done.after[1])
        )
        return PurgeReply(
            dry_run=body.dry_run,
            ended_before=body.ended_before,
            more=done.more,
            after=cursor,
            **counts.as_dict(),
        )
