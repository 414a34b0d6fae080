"""The REST API: validate, hand the change to the controller, answer from the store.

Routes never set job state themselves; everything goes through :class:`Controller`.
"""

from __future__ import annotations

from typing import Annotated

from fastapi import FastAPI, HTTPException, Query, Request
from fastapi.responses import JSONResponse, PlainTextResponse

from fusesched import __version__
from fusesched.api.schemas import (
    Cancelled,
    Health,
    JobView,
    NodeView,
    QueueView,
    RemoteLaunch,
    RemoteTask,
    Submitted,
    SubmittedMany,
)
from fusesched.api.wire import Heartbeat, HeartbeatReply, NodeInventory
from fusesched.controller.service import (
    Controller,
    NotReadyError,
    UnknownJobError,
    UnknownNodeError,
)
from fusesched.model.resources import format_quantity
from fusesched.store.records import JobState
from fusesched.submit.errors import SubmitError
from fusesched.submit.request import JobRequest

MAX_BATCH = 10_000
MAX_LIST = 1_000


def create_app(controller: Controller) -> FastAPI:
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
    def submit(request: JobRequest) -> Submitted:
        (job_id,) = controller.submit([request])
        spec_array = request.array
        ids = (
            [f"{job_id}_{i}" for i in range(spec_array.start, spec_array.stop + 1, spec_array.step)]
            if spec_array is not None
            else []
        )
        return Submitted(id=job_id, ids=ids)

    @app.post("/v1/jobs/batch", status_code=201, response_model=SubmittedMany, tags=["jobs"])
    def submit_many(requests: list[JobRequest]) -> SubmittedMany:
        if not requests:
            raise HTTPException(400, "an empty batch submits nothing")
        if len(requests) > MAX_BATCH:
            raise HTTPException(400, f"at most {MAX_BATCH} jobs per batch")
        return SubmittedMany(ids=controller.submit(requests))

    @app.get("/v1/jobs", response_model=list[JobView], tags=["jobs"])
    def list_jobs(
        user: str | None = None,
        state: Annotated[list[JobState] | None, Query()] = None,
        queue: str | None = None,
        limit: Annotated[int, Query(ge=1, le=MAX_LIST)] = 50,
        before: Annotated[int | None, Query(ge=0, description="jobs older than this id")] = None,
    ) -> list[JobView]:
        states = [s.value for s in state] if state else None
        return controller.persist.list_jobs(
            user=user, states=states, queue=queue, limit=limit, before_seq=before
        )

    @app.get("/v1/jobs/{job_id}", response_model=JobView, tags=["jobs"])
    def show(job_id: str) -> JobView:
        view = controller.persist.get_job(job_id)
        if view is None:
            raise HTTPException(404, f"no job {job_id!r}")
        return view

    @app.post("/v1/jobs/{job_id}/cancel", status_code=202, response_model=Cancelled, tags=["jobs"])
    def cancel(job_id: str) -> Cancelled:
        try:
            return Cancelled(cancelled=controller.cancel(job_id))
        except UnknownJobError:
            raise HTTPException(404, f"no job {job_id!r}") from None

    @app.get("/v1/jobs/{job_id}/logs", response_class=PlainTextResponse, tags=["jobs"])
    def logs(
        job_id: str,
        task: str | None = None,
        offset: Annotated[int, Query(ge=0)] = 0,
    ) -> str:
        if controller.persist.get_job(job_id) is None:
            raise HTTPException(404, f"no job {job_id!r}")
        tasks = controller.logs.tasks(job_id)
        if task is not None:
            if task not in tasks:
                raise HTTPException(404, f"job {job_id} has no log for task {task!r}")
            return controller.logs.read(task, offset)
        if not tasks:
            return ""
        return controller.logs.read(tasks[0], offset)

    # ----------------------------------------------------------------- cluster

    @app.get("/v1/nodes", response_model=list[NodeView], tags=["cluster"])
    def nodes() -> list[NodeView]:
        now = controller.clock()
        out = []
        for inventory, state, seen, free in controller.snapshot_nodes():
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
                )
            )
        return out

    @app.get("/v1/queues", response_model=list[QueueView], tags=["cluster"])
    def queues() -> list[QueueView]:
        return [
            QueueView(name=name, pending=pending, running=running)
            for name, pending, running in controller.queue_counts()
        ]

    # ----------------------------------------------------------------- agents

    @app.post("/v1/agents/register", status_code=201, tags=["agents"])
    def register(inventory: NodeInventory) -> dict[str, str]:
        controller.register(inventory)
        return {"node": inventory.name}

    @app.post("/v1/agents/heartbeat", response_model=HeartbeatReply, tags=["agents"])
    def heartbeat(
        beat: Heartbeat, wait: Annotated[float | None, Query(ge=0, le=30)] = None
    ) -> HeartbeatReply:
        try:
            return controller.heartbeat(beat, wait)
        except UnknownNodeError:
            raise HTTPException(404, f"node {beat.node!r} is not registered") from None

    @app.post(
        "/v1/jobs/{job_id}/remote", status_code=201, response_model=RemoteTask, tags=["agents"]
    )
    def remote(job_id: str, launch: RemoteLaunch) -> RemoteTask:
        try:
            task_id = controller.remote_launch(job_id, launch.node, launch.argv)
        except UnknownJobError:
            raise HTTPException(404, f"job {job_id!r} is not running") from None
        return RemoteTask(task_id=task_id, state="launching")

    @app.get("/v1/tasks/{task_id}", response_model=RemoteTask, tags=["agents"])
    def task(task_id: str) -> RemoteTask:
        try:
            state, code, reason = controller.task_status(task_id)
        except UnknownJobError:
            raise HTTPException(404, f"no live task {task_id!r}") from None
        return RemoteTask(task_id=task_id, state=state, exit_code=code, reason=reason)

    return app
