"""The REST API: validate, hand the change to the controller, answer from the store.

Routes never set job state themselves; everything goes through :class:`Controller`.
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from typing import Annotated, Any

from fastapi import Depends, FastAPI, HTTPException, Query, Request
from fastapi.responses import JSONResponse, PlainTextResponse, Response
from fastapi.security import HTTPAuthorizationCredentials, HTTPBearer
from pydantic import BaseModel

from fusesched import __version__
from fusesched.api.schemas import (
    Cancelled,
    CheckpointNoted,
    CheckpointReport,
    FactorView,
    Health,
    JobView,
    Joined,
    JoinRequest,
    NodeView,
    PriorityView,
    QueueView,
    RemoteLaunch,
    RemoteTask,
    RouteView,
    SubmissionFiles,
    Submitted,
    SubmittedFiles,
    SubmittedMany,
    TokenCreate,
    TokenCreated,
    TokenRevoked,
    TokenView,
    UsageView,
    usage_view,
)
from fusesched.api.wire import Heartbeat, HeartbeatReply, NodeInventory
from fusesched.controller.auth import Authenticator, AuthError, Principal, Role
from fusesched.controller.logs import job_of
from fusesched.controller.metrics import CONTENT_TYPE as METRICS_CONTENT_TYPE
from fusesched.controller.metrics import metrics_for
from fusesched.controller.records import NotReadyError, UnknownJobError, UnknownNodeError
from fusesched.controller.service import Controller
from fusesched.model.resources import format_quantity
from fusesched.store import EventRow, TokenKind, TokenRow
from fusesched.store.records import JobState
from fusesched.store.usage import (
    UsageForbidden,
    UsageQueryError,
    parse_by,
    parse_time,
    usage_report,
    usage_scope,
)
from fusesched.submit.errors import SubmitError
from fusesched.submit.load import parse_submission
from fusesched.submit.request import JobRequest

MAX_BATCH = 10_000
MAX_LIST = 1_000

#: The tenant of a request that names none.
DEFAULT_TENANT = JobRequest.model_fields["tenant"].default

#: Event kind of the audit log (admin actions, node joins).
AUDIT = "Audit"

_bearer = HTTPBearer(
    auto_error=False,
    description="An API token (fsk_...): a person's, a node's, or a running job's.",
)


def _principal(
    request: Request,
    credentials: Annotated[HTTPAuthorizationCredentials | None, Depends(_bearer)],
) -> Principal:
    """The caller (a FastAPI dependency): 401 through :class:`AuthError` without a valid
    bearer token, :data:`~fusesched.controller.auth.ANONYMOUS` when authentication is off."""
    auth: Authenticator = request.app.state.auth
    return auth.authenticate(credentials.credentials if credentials else None)


Caller = Annotated[Principal, Depends(_principal)]


def _unauthorized(message: str) -> HTTPException:
    return HTTPException(401, message, headers={"WWW-Authenticate": "Bearer"})


def _forbidden(message: str) -> HTTPException:
    return HTTPException(403, message)


def _token_view(row: TokenRow) -> TokenView:
    return TokenView(
        id=row.id,
        kind=row.kind.value,
        user=row.user,
        tenant=row.tenant,
        role=row.role,
        node=row.node,
        job_id=row.job_id,
        created_at=row.created_at,
        expires_at=row.expires_at,
        used_at=row.used_at,
        revoked=row.revoked,
    )


def _json(model: BaseModel, status: int = 200) -> Response:
    """``model`` as the response, serialised once: the hottest routes (submissions, agents'
    heartbeats) skip FastAPI's second validation of what they return (the route's
    ``response_model`` still documents it)."""
    return Response(model.model_dump_json(), status_code=status, media_type="application/json")


def create_app(controller: Controller, auth: Authenticator | None = None) -> FastAPI:
    """The API of ``controller``. Without ``auth`` (or with it disabled) every caller may do
    everything; with it, every route but ``/healthz`` needs a valid bearer token."""
    if auth is None:
        auth = Authenticator(controller.persist.store, enabled=False)
    checker = auth
    app = FastAPI(
        title="fusesched",
        version=__version__,
        description="The fused scheduler: HPC, AI and general workloads on one pool.",
    )

    @app.exception_handler(SubmitError)
    async def _submit_error(_: Request, exc: SubmitError) -> JSONResponse:
        return JSONResponse(status_code=400, content={"detail": str(exc)})

    @app.exception_handler(NotReadyError)
    async def _not_ready(_: Request, exc: NotReadyError) -> JSONResponse:
        return JSONResponse(status_code=503, content={"detail": str(exc)})

    @app.exception_handler(AuthError)
    async def _auth_error(_: Request, exc: AuthError) -> JSONResponse:
        return JSONResponse(
            status_code=401, content={"detail": str(exc)}, headers={"WWW-Authenticate": "Bearer"}
        )

    app.state.auth = checker

    def person(p: Principal) -> Principal:
        if not p.person:
            raise _forbidden(f"a {p.role.value} credential cannot use this endpoint")
        return p

    def sees(p: Principal, tenant: str) -> bool:
        return p.role is Role.CLUSTER_ADMIN or (p.person and p.tenant == tenant)

    def audit(p: Principal, action: str, **data: Any) -> None:
        if not checker.enabled:
            return
        job_id = data.pop("job_id", None)
        node = data.pop("node", None)
        row = EventRow(
            time.time(),
            AUDIT,
            job_id=job_id,
            node=node,
            data={"action": action, "by": p.user, "role": p.role.value, "token": p.token_id} | data,
        )
        controller.persist.store.add_events([row])

    def owned(p: Principal, requests: Sequence[JobRequest]) -> list[JobRequest]:
        """The requests as ``p`` may submit them: user and tenant from the token."""
        person(p)
        if not checker.enabled:
            return list(requests)
        out = []
        for request in requests:
            user = request.user or p.user
            # the tenant named, else the token's; for people below cluster-admin the default
            # tenant's name means "mine" too (the CLI's parsers always write it out)
            named = "tenant" in request.model_fields_set and not (
                request.tenant == DEFAULT_TENANT and p.role is not Role.CLUSTER_ADMIN
            )
            tenant = request.tenant if named else p.tenant
            if p.role is not Role.CLUSTER_ADMIN:
                if tenant != p.tenant:
                    raise _forbidden(f"you cannot submit jobs for tenant {tenant!r}")
                if p.role is Role.USER and user != p.user:
                    raise _forbidden(f"you cannot submit jobs as user {user!r}")
            out.append(request.model_copy(update={"user": user, "tenant": tenant}))
        return out

    def visible_job(p: Principal, job_id: str) -> JobView:
        view = controller.persist.get_job(job_id)
        if view is None or not sees(person(p), view.tenant):
            raise HTTPException(404, f"no job {job_id!r}")
        return view

    def the_node(p: Principal, name: str) -> None:
        if checker.enabled and (p.role is not Role.AGENT or p.node != name):
            raise _forbidden(f"this credential is not node {name!r}'s")

    @app.get("/healthz", response_model=Health, tags=["meta"])
    def health() -> Health:
        return Health(
            status="ok",
            nodes=len(controller.nodes),
            jobs_active=len(controller.jobs),
            cycles=controller.cycles,
        )

    # ----------------------------------------------------------------- jobs

    @app.post("/v1/jobs", status_code=201, response_model=Submitted, tags=["jobs"])
    def submit(request: JobRequest, p: Caller) -> Response:
        (request,) = owned(p, [request])
        (job_id,) = controller.submit([request])
        spec_array = request.array
        ids = (
            [f"{job_id}_{i}" for i in range(spec_array.start, spec_array.stop + 1, spec_array.step)]
            if spec_array is not None
            else []
        )
        return _json(Submitted(id=job_id, ids=ids), 201)

    @app.post("/v1/jobs/batch", status_code=201, response_model=SubmittedMany, tags=["jobs"])
    def submit_many(requests: list[JobRequest], p: Caller) -> SubmittedMany:
        person(p)
        if not requests:
            raise HTTPException(400, "an empty batch submits nothing")
        if len(requests) > MAX_BATCH:
            raise HTTPException(400, f"at most {MAX_BATCH} jobs per batch")
        return SubmittedMany(ids=controller.submit(owned(p, requests)))

    @app.post("/v1/submissions", status_code=201, response_model=SubmittedFiles, tags=["jobs"])
    def submit_files(files: SubmissionFiles, p: Caller) -> SubmittedFiles:
        """Jobs from submission files parsed here (fusesched YAML, #SBATCH script, Kubernetes
        YAML): what lets a client stay a small program that only sends the files' text."""
        person(p)
        requests: list[JobRequest] = []
        warnings: list[str] = []
        for item in files.files:
            for parsed in parse_submission(item.text, source=item.name, sbatch_args=item.args):
                request = parsed.request
                if not checker.enabled and files.user and not request.user:
                    request = request.model_copy(update={"user": files.user})
                requests.append(request)
                warnings.extend(parsed.warnings)
        if not requests:
            raise HTTPException(400, "the files hold no job")
        if len(requests) > MAX_BATCH:
            raise HTTPException(400, f"at most {MAX_BATCH} jobs per submission")
        ids = controller.submit(owned(p, requests))
        return SubmittedFiles(ids=ids, warnings=warnings)

    @app.get("/v1/jobs", response_model=list[JobView], tags=["jobs"])
    def list_jobs(
        p: Caller,
        user: str | None = None,
        tenant: str | None = None,
        state: Annotated[list[JobState] | None, Query()] = None,
        queue: str | None = None,
        limit: Annotated[int, Query(ge=1, le=MAX_LIST)] = 50,
        before: Annotated[int | None, Query(ge=0, description="jobs older than this id")] = None,
    ) -> list[JobView]:
        person(p)
        if p.role is not Role.CLUSTER_ADMIN:
            if tenant is not None and tenant != p.tenant:
                return []
            tenant = p.tenant
        states = [s.value for s in state] if state else None
        return controller.persist.list_jobs(
            user=user, states=states, queue=queue, limit=limit, before_seq=before, tenant=tenant
        )

    @app.get("/v1/jobs/{job_id}", response_model=JobView, tags=["jobs"])
    def show(job_id: str, p: Caller) -> JobView:
        return visible_job(p, job_id)

    @app.post("/v1/jobs/{job_id}/cancel", status_code=202, response_model=Cancelled, tags=["jobs"])
    def cancel(job_id: str, p: Caller) -> Cancelled:
        person(p)
        owner = controller.owner(job_id)
        if owner is None or not sees(p, owner[1]):
            raise HTTPException(404, f"no job {job_id!r}")
        user, tenant = owner
        if checker.enabled and user != p.user and p.role is Role.USER:
            raise _forbidden(f"job {job_id} is {user}'s; only they or an admin may cancel it")
        try:
            cancelled = controller.cancel(job_id)
        except UnknownJobError:
            raise HTTPException(404, f"no job {job_id!r}") from None
        if checker.enabled and user != p.user:
            audit(p, "cancel", job_id=job_id, owner=user, tenant=tenant, cancelled=cancelled)
        return Cancelled(cancelled=cancelled)

    @app.get("/v1/jobs/{job_id}/priority", response_model=PriorityView, tags=["jobs"])
    def priority(job_id: str, p: Caller) -> PriorityView:
        """The job's multifactor priority now: age, fair share, size, QoS and job priority,
        each with its weight and contribution (needs a tenancy configuration)."""
        visible_job(p, job_id)
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
        view = visible_job(p, job_id)
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
        (request,) = owned(p, [request])
        found = controller.route(request)
        return RouteView(
            pools=list(found.pools), rule=found.rule, explanation=list(found.explanation)
        )

    @app.get("/v1/jobs/{job_id}/logs", response_class=PlainTextResponse, tags=["jobs"])
    def logs(
        job_id: str,
        p: Caller,
        task: str | None = None,
        offset: Annotated[int, Query(ge=0)] = 0,
    ) -> str:
        visible_job(p, job_id)
        tasks = controller.logs.tasks(job_id)
        if task is not None:
            if task not in tasks:
                raise HTTPException(404, f"job {job_id} has no log for task {task!r}")
            return controller.logs.read(task, offset)
        return controller.logs.read_job(job_id, offset)

    # ----------------------------------------------------------------- cluster

    @app.get("/v1/nodes", response_model=list[NodeView], tags=["cluster"])
    def nodes(p: Caller) -> list[NodeView]:
        person(p)
        now = controller.clock()
        out = []
        for inventory, state, seen, free in controller.snapshot_nodes():
            live = controller.nodes.get(inventory.name)
            held = None if live is None or live.datasets is None else sorted(live.datasets)
            out.append(
                NodeView(
                    name=inventory.name,
                    state=state.value,
                    address=inventory.address,
                    capacity=dict(inventory.resources),
                    free={k: format_quantity(k, v) for k, v in free.items()},
                    labels=dict(inventory.labels),
                    devices=len(inventory.devices),
                    last_heartbeat_s_ago=round(max(0.0, now - seen), 3),
                    datasets=held,
                )
            )
        return out

    @app.get("/metrics", response_class=PlainTextResponse, tags=["cluster"])
    def metrics(p: Caller) -> Response:
        """Prometheus metrics (text exposition format; docs/METRICS.md). Cluster-wide like
        /v1/nodes and /v1/queues: any person's token (a user token made for the Prometheus
        server is enough); machine credentials (agent, job, join) get 403."""
        person(p)
        return Response(metrics_for(controller).exposition(), media_type=METRICS_CONTENT_TYPE)

    @app.get("/v1/queues", response_model=list[QueueView], tags=["cluster"])
    def queues(p: Caller) -> list[QueueView]:
        person(p)
        return [
            QueueView(name=name, pending=pending, running=running)
            for name, pending, running in controller.queue_counts()
        ]

    # ----------------------------------------------------------------- accounting

    @app.get("/v1/usage", response_model=UsageView, tags=["cluster"])
    def usage(
        p: Caller,
        start: Annotated[str, Query(description="ISO date/time, epoch s, now or -7d")] = "-30d",
        end: Annotated[str, Query(description="ISO date/time, epoch s, now or -1d")] = "now",
        by: Annotated[str, Query(description="comma-separated: tenant, user, queue")] = (
            "tenant,user"
        ),
        tenant: str | None = None,
        user: str | None = None,
    ) -> UsageView:
        """CPU-hours, GPU-hours by GPU model and estimated energy over a window (sreport).
        Cluster-admins see all; tenant-admins their tenant; users their own usage."""
        person(p)
        now = time.time()
        try:
            fields = parse_by(by)
            window = (parse_time(start, now), parse_time(end, now))
            if checker.enabled:
                tenant, user = usage_scope(p.role.value, p.user, p.tenant, tenant, user)
            report = usage_report(controller.persist.store, *window, fields, tenant, user, now=now)
        except UsageForbidden as exc:
            raise _forbidden(str(exc)) from None
        except UsageQueryError as exc:
            raise HTTPException(422, str(exc)) from None
        return usage_view(report)

    # ----------------------------------------------------------------- agents

    @app.post("/v1/agents/register", status_code=201, tags=["agents"])
    def register(inventory: NodeInventory, p: Caller) -> dict[str, str]:
        the_node(p, inventory.name)
        controller.register(inventory)
        return {"node": inventory.name}

    @app.post("/v1/agents/heartbeat", response_model=HeartbeatReply, tags=["agents"])
    def heartbeat(
        beat: Heartbeat,
        p: Caller,
        wait: Annotated[float | None, Query(ge=0, le=30)] = None,
        launch: bool = False,  # the agent takes work in replies to quick reports
    ) -> Response:
        the_node(p, beat.node)
        try:
            return _json(controller.heartbeat(beat, wait, launch))
        except UnknownNodeError:
            raise HTTPException(404, f"node {beat.node!r} is not registered") from None

    @app.post(
        "/v1/jobs/{job_id}/remote", status_code=201, response_model=RemoteTask, tags=["agents"]
    )
    def remote(job_id: str, launch: RemoteLaunch, p: Caller) -> RemoteTask:
        own_job = p.role is Role.JOB and p.job_id == job_id
        if checker.enabled and p.role is not Role.CLUSTER_ADMIN and not own_job:
            raise _forbidden(f"only job {job_id}'s own credential may launch its tasks")
        try:
            task_id = controller.remote_launch(job_id, launch.node, launch.argv)
        except UnknownJobError:
            raise HTTPException(404, f"job {job_id!r} is not running") from None
        return RemoteTask(task_id=task_id, state="launching")

    @app.post(
        "/v1/jobs/{job_id}/checkpoint",
        status_code=202,
        response_model=CheckpointNoted,
        tags=["jobs"],
    )
    def checkpoint(job_id: str, body: CheckpointReport, p: Caller) -> CheckpointNoted:
        """A running job reports a checkpoint (its own credential, or someone who sees it)."""
        if checker.enabled and p.role is Role.JOB:
            if p.job_id != job_id:
                raise _forbidden(f"this credential is job {p.job_id}'s, not job {job_id}'s")
        elif checker.enabled and p.role is not Role.CLUSTER_ADMIN:
            owner = controller.owner(job_id)
            if owner is None or not sees(person(p), owner[1]):
                raise HTTPException(404, f"no job {job_id!r}")
        try:
            at = controller.checkpointed(job_id, body.time)
        except UnknownJobError:
            raise HTTPException(404, f"job {job_id!r} is not running") from None
        return CheckpointNoted(job_id=job_id, time=at)

    @app.get("/v1/tasks/{task_id}", response_model=RemoteTask, tags=["agents"])
    def task(task_id: str, p: Caller) -> RemoteTask:
        job_id = job_of(task_id)
        if checker.enabled and p.role is not Role.CLUSTER_ADMIN:
            if p.role is Role.JOB:
                if p.job_id != job_id:
                    raise _forbidden(f"task {task_id!r} is not of job {p.job_id}")
            else:
                owner = controller.owner(job_id)
                if owner is None or not sees(person(p), owner[1]):
                    raise HTTPException(404, f"no live task {task_id!r}")
        try:
            state, code, reason = controller.task_status(task_id)
        except UnknownJobError:
            raise HTTPException(404, f"no live task {task_id!r}") from None
        return RemoteTask(task_id=task_id, state=state, exit_code=code, reason=reason)

    @app.post("/v1/agents/join", status_code=201, response_model=Joined, tags=["agents"])
    def join(body: JoinRequest, p: Caller) -> Joined:
        """Exchange a one-time join token for the node's own credential."""
        if not checker.enabled:
            return Joined(node=body.node, token="")
        if p.role is not Role.JOIN:
            raise _forbidden("a join token is needed to join a node")
        if p.node and p.node != body.node:
            raise _forbidden(f"this join token is for node {p.node!r}")
        token = checker.join(p, body.node)
        if token is None:
            raise _unauthorized("the join token was already used")
        audit(p, "node-join", node=body.node)
        return Joined(node=body.node, token=token)

    # ----------------------------------------------------------------- tokens

    @app.post("/v1/tokens", status_code=201, response_model=TokenCreated, tags=["tokens"])
    def create_token(body: TokenCreate, p: Caller) -> TokenCreated:
        """Cluster-admins make any token; tenant-admins make user tokens of their tenant."""
        if not checker.enabled:
            raise HTTPException(409, "authentication is off on this controller")
        if p.role is Role.CLUSTER_ADMIN:
            tenant = body.tenant or p.tenant or "default"
        elif p.role is Role.TENANT_ADMIN:
            if body.kind != "user" or body.role != Role.USER.value:
                raise _forbidden("a tenant-admin may only make tokens with the role user")
            if body.tenant and body.tenant != p.tenant:
                raise _forbidden(f"you cannot make tokens for tenant {body.tenant!r}")
            tenant = p.tenant
        else:
            raise _forbidden("only admins may make tokens")
        if body.kind == "user":
            if not body.user:
                raise HTTPException(400, "a user token needs a user name")
            token, row = checker.issue(
                TokenKind.USER,
                user=body.user,
                tenant=tenant,
                role=body.role,
                expires_in_s=body.expires_in_s,
            )
        else:
            token, row = checker.issue(
                TokenKind.JOIN, role=Role.JOIN.value, node=body.node, expires_in_s=body.expires_in_s
            )
        audit(
            p,
            "token-create",
            token_id=row.id,
            kind=row.kind.value,
            user=row.user,
            tenant=row.tenant,
            token_role=row.role,
            node=row.node,
        )
        return TokenCreated(token=token, **_token_view(row).model_dump())

    def managed(p: Principal) -> str | None:
        """The tenant whose user tokens ``p`` manages (``None``: every token); 403 if none."""
        if checker.enabled and p.role is Role.CLUSTER_ADMIN:
            return None
        if checker.enabled and p.role is Role.TENANT_ADMIN:
            return p.tenant
        if not checker.enabled:
            raise HTTPException(409, "authentication is off on this controller")
        raise _forbidden("only admins may manage tokens")

    @app.get("/v1/tokens", response_model=list[TokenView], tags=["tokens"])
    def list_tokens(
        p: Caller,
        kind: TokenKind | None = None,
        include_revoked: bool = False,
    ) -> list[TokenView]:
        tenant = managed(p)
        if tenant is not None:
            if kind not in (None, TokenKind.USER):
                return []
            kind = TokenKind.USER
        rows = controller.persist.store.list_tokens(
            kind=kind, tenant=tenant, include_revoked=include_revoked
        )
        return [_token_view(r) for r in rows]

    @app.delete("/v1/tokens/{token_id}", response_model=TokenRevoked, tags=["tokens"])
    def revoke_token(token_id: str, p: Caller) -> TokenRevoked:
        tenant = managed(p)
        row = controller.persist.store.get_token(token_id)
        mine = row is not None and (
            tenant is None or (row.kind is TokenKind.USER and row.tenant == tenant)
        )
        if row is None or not mine:
            raise HTTPException(404, f"no token {token_id!r}")
        controller.persist.store.revoke_token(token_id)
        audit(p, "token-revoke", token_id=token_id, kind=row.kind.value, user=row.user)
        return TokenRevoked(revoked=token_id)

    from fusesched.portal import mount as mount_portal  # the portal's routes use Caller

    mount_portal(app, controller, checker)
    return app
