"""The job routes: submit (one, a batch, or submission files), list, show, cancel, and what the
scheduler says of a job (its priority, its route to pools); its logs are
:mod:`~fusesched.api.log_routes`."""

from __future__ import annotations

from collections.abc import Callable
from typing import Annotated

from fastapi import FastAPI, HTTPException, Query
from fastapi.responses import Response

from fusesched.api import job_filters
from fusesched.api.access import Access, Caller, person, sees
from fusesched.api.job_schemas import JobView
from fusesched.api.responses import forbidden, json_response
from fusesched.api.schemas import (
    Cancelled,
    FactorView,
    Held,
    JobHold,
    JobRequeue,
    JobUpdate,
    PriorityView,
    RouteView,
    SubmissionFiles,
    Submitted,
    SubmittedFiles,
    SubmittedMany,
    Updated,
)
from fusesched.controller import completing_views, holds, licenses, probes, requeues, updates
from fusesched.controller.auth import Principal, Role
from fusesched.controller.records import UnknownJobError
from fusesched.store.job_filters import JobFilters
from fusesched.store.records import JobState
from fusesched.submit.load import parse_submission
from fusesched.submit.request import JobRequest
from fusesched.submit.slurm_options import with_submit_host

MAX_BATCH = 10_000
MAX_LIST = 1_000


def accept_files(access: Access, files: SubmissionFiles, p: Principal) -> SubmittedFiles:
    """``POST /v1/submissions``: parse the files, submit their jobs as ``p``. Every refusal
    (:class:`HTTPException`, :class:`SubmitError`, :class:`NotReadyError`) is raised before
    anything is stored. Also called by :mod:`fusesched.api.hot_path`."""
    person(p)
    requests: list[JobRequest] = []
    warnings: list[str] = []
    now = access.controller.clock()  # relative begin times are the controller's
    for item in files.files:
        parsed_items = parse_submission(
            item.text,
            source=item.name,
            sbatch_args=item.args,
            now=now,
            submit_dir=item.submit_dir,
            submit_env=files.submit_env,
        )
        for parsed in parsed_items:
            request = with_submit_host(parsed.request, item.submit_host)
            if not access.auth.enabled and files.user and not request.user:
                request = request.model_copy(update={"user": files.user})
            requests.append(request)
            warnings.extend(parsed.warnings)
    if not requests:
        raise HTTPException(400, "the files hold no job")
    if len(requests) > MAX_BATCH:
        raise HTTPException(400, f"at most {MAX_BATCH} jobs per submission")
    ids = access.controller.submit(access.owned(p, requests))
    return SubmittedFiles(ids=ids, warnings=warnings)


def add_job_routes(app: FastAPI, access: Access) -> None:
    """Serve the ``/v1/jobs``, ``/v1/submissions`` and ``/v1/route`` routes from ``app``."""
    controller = access.controller
    checker = access.auth

    @app.post("/v1/jobs", status_code=201, response_model=Submitted, tags=["jobs"])
    def submit(request: JobRequest, p: Caller) -> Response:
        (request,) = access.owned(p, [request])
        (job_id,) = controller.submit([request])
        spec_array = request.array
        ids = (
            [f"{job_id}_{i}" for i in range(spec_array.start, spec_array.stop + 1, spec_array.step)]
            if spec_array is not None
            else []
        )
        return json_response(Submitted(id=job_id, ids=ids), 201)

    @app.post("/v1/jobs/batch", status_code=201, response_model=SubmittedMany, tags=["jobs"])
    def submit_many(requests: list[JobRequest], p: Caller) -> SubmittedMany:
        person(p)
        if not requests:
            raise HTTPException(400, "an empty batch submits nothing")
        if len(requests) > MAX_BATCH:
            raise HTTPException(400, f"at most {MAX_BATCH} jobs per batch")
        return SubmittedMany(ids=controller.submit(access.owned(p, requests)))

    @app.post("/v1/submissions", status_code=201, response_model=SubmittedFiles, tags=["jobs"])
    def submit_files(files: SubmissionFiles, p: Caller) -> Response:
        """Jobs from submission files parsed here (fusesched YAML, #SBATCH script, Kubernetes
        YAML): what lets a client stay a small program that only sends the files' text."""
        return json_response(accept_files(access, files, p), 201)

    @app.get("/v1/jobs", response_model=list[JobView], tags=["jobs"])
    def list_jobs(
        p: Caller,
        user: Annotated[list[str] | None, Query(description="any of these users")] = None,
        tenant: str | None = None,
        state: Annotated[list[JobState] | None, Query()] = None,
        queue: Annotated[list[str] | None, Query(description="any of these queues")] = None,
        limit: Annotated[int, Query(ge=1, le=MAX_LIST)] = 50,
        before: Annotated[
            int | None,
            Query(
                ge=0,
                le=2**63 - 1,
                description="jobs submitted before this seq (the last job's: the next page)",
            ),
        ] = None,
        array: Annotated[
            str | None, Query(max_length=64, description="only this array's members")
        ] = None,
        phase: Annotated[
            list[str] | None,
            Query(description="also the jobs in any of these phases (timeout, preempted, …)"),
        ] = None,
        id: Annotated[
            list[str] | None, Query(description="these jobs (an array's id: its members)")
        ] = None,
        name: Annotated[list[str] | None, Query(description="any of these job names")] = None,
        me: Annotated[bool, Query(description="the caller's own jobs (its token's user)")] = False,
        since: Annotated[
            float | None,
            job_filters.time_query("jobs not ended before this Unix time (waiting or running)"),
        ] = None,
        until: Annotated[
            float | None, job_filters.time_query("jobs submitted by this Unix time")
        ] = None,
        detail: Annotated[
            bool,
            Query(description="each job with its tasks and restarts, as GET /v1/jobs/{id}"),
        ] = False,
        steps: Annotated[
            bool,
            Query(
                description="each job with its restarts and its latest run's steps, each "
                "summarised from its tasks (as sacct shows them), not the tasks themselves: "
                "an answer that grows with steps, not tasks"
            ),
        ] = False,
        completing: Annotated[
            bool,
            Query(
                description="also the jobs shown completing (Slurm's COMPLETING: a run of "
                "theirs holds its booking where its tasks are being killed)"
            ),
        ] = False,
        combine_arrays: Annotated[
            bool,
            Query(
                description="each array's members that wait (never started) for one reason "
                "as one row, as squeue shows them without -r: the newest one's view with the "
                "id 1009_[2-999%2], array_tasks (2-999%2) and array_count; limit counts rows, "
                "and such a row pages by its newest member's seq"
            ),
        ] = False,
    ) -> list[JobView]:
        person(p)
        if p.role is not Role.CLUSTER_ADMIN:
            if tenant is not None and tenant != p.tenant:
                return []
            tenant = p.tenant
        users = job_filters.values("user", user)
        if me:
            if not checker.enabled:
                raise HTTPException(
                    400,
                    "authentication is off on this controller: me=true names no one "
                    "(name the user: user=NAME)",
                )
            users = sorted({*(users or ()), p.user})
        since, until = job_filters.window(since, until)
        shown = completing_views.jobs(controller)  # (one moment's: the filter's and the flags')
        filters = JobFilters(
            users=users,
            tenant=tenant,
            states=state or None,
            queues=job_filters.values("queue", queue),
            array_parent=array,
            phases=job_filters.phases(phase),
            ids=job_filters.job_ids(id),
            names=job_filters.values("name", name),
            since=since,
            until=until,
            also=shown if completing else None,
        )
        found = controller.persist.list_jobs(
            filters,
            limit=limit,
            before_seq=before,
            detail=detail,
            steps=steps,
            combine_arrays=combine_arrays,
        )
        found = completing_views.with_completing(controller, found, shown)
        return licenses.with_reasons(controller, found)  # (waiting for licenses: …)

    @app.get("/v1/jobs/{job_id}", response_model=JobView, tags=["jobs"])
    def show(job_id: str, p: Caller) -> JobView:
        view = access.visible_job(p, job_id)
        view = view.model_copy(update={"restarts": controller.persist.restarts(view.id)})
        shown = completing_views.with_completing(controller, [view])
        shown = licenses.with_reasons(controller, shown)
        return probes.with_readiness(controller, shown)[0]  # (its tasks ready or not)

    @app.post("/v1/jobs/{job_id}/cancel", status_code=202, response_model=Cancelled, tags=["jobs"])
    def cancel(job_id: str, p: Caller) -> Cancelled:
        person(p)
        owner = controller.owner(job_id)
        ended_array = False  # an array whose members have all ended: cancels nothing
        if owner is None:
            member = access.array_member(p, job_id)
            if member is not None:
                owner, ended_array = (member.user, member.tenant), True
        if owner is None or not sees(p, owner[1]):
            raise HTTPException(404, f"no job {job_id!r}")
        user, tenant = owner
        if checker.enabled and user != p.user and p.role is Role.USER:
            raise forbidden(f"job {job_id} is {user}'s; only they or an admin may cancel it")
        try:
            cancelled = [] if ended_array else controller.cancel(job_id)
        except UnknownJobError:
            raise HTTPException(404, f"no job {job_id!r}") from None
        if checker.enabled and user != p.user:
            access.audit(p, "cancel", job_id=job_id, owner=user, tenant=tenant, cancelled=cancelled)
        return Cancelled(cancelled=cancelled)

    def holding(change: Callable[[], list[str]], job_id: str) -> list[str]:
        """A hold, release or requeue: 404 for an unknown job, 409 for one in the wrong state,
        403 for one an administrator held (to anyone else)."""
        try:
            return change()
        except UnknownJobError:
            raise HTTPException(404, f"no job {job_id!r}") from None
        except holds.HoldRefused as exc:
            raise HTTPException(409, str(exc)) from None
        except holds.HoldForbidden as exc:
            raise forbidden(str(exc)) from None

    def authority(p: Principal) -> holds.Authority:
        """What ``p`` may do to an administrator's hold, and what kind its own holds are."""
        if not checker.enabled:
            return holds.Authority.OPEN
        admin = p.role is Role.CLUSTER_ADMIN
        return holds.Authority.ADMIN if admin else holds.Authority.USER

    @app.post("/v1/jobs/{job_id}/hold", response_model=Held, tags=["jobs"])
    def hold(job_id: str, body: JobHold, p: Caller) -> Held:
        """Keep a waiting job (or an array's waiting members) from starting until released
        (Slurm's scontrol hold); 409 for a running or ended job. A cluster-admin's hold is an
        administrator hold: only an administrator may release or replace it."""
        user, tenant = access.may_act(p, job_id, "hold", ended_arrays=True)
        by = authority(p)
        held = holding(lambda: holds.hold(controller, job_id, body.reason, by), job_id)
        if checker.enabled and user != p.user:
            access.audit(p, "hold", job_id=job_id, owner=user, tenant=tenant, held=held)
        return Held(held=held)

    @app.post("/v1/jobs/{job_id}/release", response_model=Held, tags=["jobs"])
    def release(job_id: str, p: Caller) -> Held:
        """Let a held job (or an array's held members) start again; 403 for an administrator's
        hold, unless a cluster-admin releases it."""
        user, tenant = access.may_act(p, job_id, "release", ended_arrays=True)
        by = authority(p)
        released = holding(lambda: holds.release(controller, job_id, by), job_id)
        if checker.enabled and user != p.user:
            access.audit(p, "release", job_id=job_id, owner=user, tenant=tenant, released=released)
        return Held(released=released)

    @app.post("/v1/jobs/{job_id}/requeue", response_model=Held, tags=["jobs"])
    def requeue(job_id: str, body: JobRequeue, p: Caller) -> Held:
        """Stop a running job and queue it again (Slurm's scontrol requeue; with ``hold``,
        requeuehold); 409 for a job that does not run here."""
        user, tenant = access.may_act(p, job_id, "requeue", ended_arrays=True)
        by = authority(p)
        requeued = holding(
            lambda: requeues.requeue(controller, job_id, body.reason, body.hold, by), job_id
        )
        if checker.enabled and user != p.user:
            access.audit(p, "requeue", job_id=job_id, owner=user, tenant=tenant, requeued=requeued)
        return Held(requeued=requeued)

    @app.post("/v1/jobs/{job_id}/update", response_model=Updated, tags=["jobs"])
    def update(job_id: str, body: JobUpdate, p: Caller) -> Updated:
        """Change a waiting job's priority, QoS, time limit, name, comment, queue (Slurm's
        partition), dependencies or begin time, or a running job's time limit, name or
        comment (Slurm's scontrol update); 409 for an ended job (or an array whose members
        have all ended), for what a running job may not change, and for a queue or
        dependencies a submission would be refused (an unknown queue or job, a dependency
        that can never be met, on itself or closing a circle). As in Slurm, users may only
        lower the priority and the QoS and shorten the time limit of their jobs (403
        otherwise); admins may change all."""
        user, tenant = access.may_act(p, job_id, "change", ended_arrays=True)
        only_lower = checker.enabled and p.role is Role.USER
        try:
            changed = holding(
                lambda: updates.update(
                    controller,
                    job_id,
                    body.priority,
                    body.qos,
                    body.walltime_s,
                    only_lower,
                    name=body.name,
                    comment=body.comment,
                    queue=body.queue,
                    dependencies=body.dependencies,
                    begin_time=body.begin_time,
                ),
                job_id,
            )
        except updates.UpdateForbidden as exc:
            raise forbidden(str(exc)) from None
        if checker.enabled and user != p.user:
            access.audit(p, "update", job_id=job_id, owner=user, tenant=tenant, updated=changed)
        return Updated(updated=changed)

    @app.get("/v1/jobs/{job_id}/priority", response_model=PriorityView, tags=["jobs"])
    def priority(job_id: str, p: Caller) -> PriorityView:
        """The job's multifactor priority now: age, fair share, size, QoS and job priority,
        each with its weight and contribution (needs a tenancy configuration)."""
        access.visible_job(p, job_id)
        try:
            breakdown = controller.priority(job_id)
        except UnknownJobError:
            raise HTTPException(404, f"job {job_id} is no longer known to the scheduler") from None
        except ValueError as exc:
            raise HTTPException(409, str(exc)) from None
        return PriorityView(
            job_id=job_id,
            total=breakdown.total,
            factors=[
                FactorView(
                    name=f.name,
                    value=f.value,
                    weight=f.weight,
                    contribution=f.contribution,
                    detail=f.detail,
                )
                for f in breakdown.factors
            ],
        )

    @app.get("/v1/jobs/{job_id}/route", response_model=RouteView, tags=["jobs"])
    def job_route(job_id: str, p: Caller) -> RouteView:
        """How the job's request is routed to pools now (the rules and loads of this moment),
        and the pool it runs or ran in."""
        view = access.visible_job(p, job_id)
        detail = controller.persist.store.get_job(job_id)
        if detail is None:
            raise HTTPException(404, f"no job {job_id!r}")
        request = JobRequest.model_validate(detail.job.request)
        found = controller.route(request)
        return RouteView(
            job_id=job_id,
            pools=list(found.pools),
            rule=found.rule,
            explanation=list(found.explanation),
            pool=view.pool,
        )

    @app.post("/v1/route", response_model=RouteView, tags=["jobs"])
    def dry_route(request: JobRequest, p: Caller) -> RouteView:
        """Where a job would be routed if it were submitted now (nothing is submitted)."""
        (request,) = access.owned(p, [request])
        found = controller.route(request)
        return RouteView(
            pools=list(found.pools), rule=found.rule, explanation=list(found.explanation)
        )
