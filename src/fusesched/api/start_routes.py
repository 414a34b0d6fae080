"""``GET /v1/starts``: when the waiting jobs are expected to start (``squeue --start``)."""

from __future__ import annotations

from fastapi import FastAPI, HTTPException

from fusesched.api.access import Access, Caller, person
from fusesched.api.schemas import (
    ExpectedStartView,
    StartsView,
    TrialJob,
    TrialMember,
    TrialView,
)
from fusesched.controller import forecasts
from fusesched.controller.auth import Role
from fusesched.controller.records import LiveJob
from fusesched.core.forecast import WAITING, ExpectedStart
from fusesched.submit.request import JobRequest

#: at most this many jobs tried in one request
MAX_TRIAL = 100


def add_start_routes(app: FastAPI, access: Access) -> None:
    controller = access.controller

    def waits(live: LiveJob) -> bool:
        """Whether the job still waits (called with the lock held): not held, not started
        (its record in the core, or none yet: submitted since the last cycle)."""
        if live.hold is not None or live.nodes:
            return False
        rec = controller.core.jobs.get(live.id)
        return rec is None or rec.phase in WAITING

    @app.get("/v1/starts", response_model=StartsView, tags=["jobs"])
    def starts(p: Caller, user: str | None = None, queue: str | None = None) -> StartsView:
        """The waiting jobs in expected start order, each with the nodes it would start on;
        jobs not expected within the horizon last, without a time. The scheduler is run
        forward on a copy of its state as if every job ran until its time limit (or its
        predicted run time) and nothing else were submitted; held jobs are left out."""
        person(p)
        tenant = None if p.role is Role.CLUSTER_ADMIN else p.tenant
        projection = controller.forecasts.get(controller)
        rows: list[ExpectedStartView] = []
        with controller.lock:  # (jobs started, held or ended since the projection are left out)
            still: list[tuple[ExpectedStart, LiveJob]] = []
            for expected in projection.jobs:
                live = controller.jobs.get(expected.job_id)
                if live is not None and waits(live):
                    still.append((expected, live))
        for expected, live in still:
            spec = live.spec
            if tenant is not None and spec.tenant != tenant:
                continue
            if (user is not None and spec.user != user) or (
                queue is not None and spec.queue != queue
            ):
                continue
            rows.append(
                ExpectedStartView(
                    id=expected.job_id,
                    user=spec.user,
                    tenant=spec.tenant,
                    queue=spec.queue,
                    phase=expected.phase.value,
                    expected_start=expected.start,
                    nodes=list(expected.nodes),
                )
            )
        return StartsView(
            at=projection.now,
            horizon_s=projection.horizon_s,
            complete=projection.complete,
            jobs=rows,
        )

    @app.post("/v1/starts/test", response_model=TrialView, tags=["jobs"])
    def test_start(requests: list[JobRequest], p: Caller) -> TrialView:
        """When these jobs would start if they were submitted now (``sbatch --test-only``):
        checked as a submission is (the same refusals), projected as ``GET /v1/starts``
        projects the queue, and neither stored nor queued."""
        if not requests:
            raise HTTPException(400, "no job to try")
        if len(requests) > MAX_TRIAL:
            raise HTTPException(400, f"at most {MAX_TRIAL} jobs per try")
        try:
            tried = forecasts.trial(controller, access.owned(p, requests))
        except forecasts.TrialsBusy as busy:
            retry = {"Retry-After": str(round(forecasts.TRIAL_WAIT_S))}
            raise HTTPException(429, str(busy), headers=retry) from None
        jobs = []
        for request, members, refused, held in zip(
            requests, tried.starts, tried.refused, tried.held, strict=True
        ):
            shown = [
                TrialMember(
                    array_index=_index(m.job_id),
                    expected_start=m.start,
                    nodes=list(m.nodes),
                )
                for m in members
            ]
            jobs.append(
                TrialJob(name=request.name or "", refused=refused, held=held, members=shown)
            )
        return TrialView(at=tried.at, horizon_s=tried.horizon_s, jobs=jobs)


def _index(job_id: str) -> int | None:
    """An array member's index (ids are ``<array>_<index>``), or None."""
    _, sep, index = job_id.rpartition("_")
    return int(index) if sep else None
