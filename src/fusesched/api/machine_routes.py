"""The routes machines call: node agents (register, heartbeat, say they are leaving, join with
a one-time token) and running jobs (launch a remote task or a job step, ask a task's state,
report a checkpoint)."""

from __future__ import annotations

from typing import Annotated

from fastapi import FastAPI, HTTPException, Query
from fastapi.responses import Response

from fusesched.agent.step_gpus import GpuAsk
from fusesched.api.access import Access, Caller, person, sees
from fusesched.api.responses import forbidden, json_response, unauthorized
from fusesched.api.schemas import (
    CheckpointNoted,
    CheckpointReport,
    Joined,
    JoinRequest,
)
from fusesched.api.step_schemas import RemoteLaunch, RemoteTask, StepCreated, StepRequest
from fusesched.api.wire import Heartbeat, HeartbeatReply, Leaving, NodeInventory
from fusesched.controller.auth import Role
from fusesched.controller.job_steps import StepsBusy
from fusesched.controller.logs import job_of
from fusesched.controller.records import NodeChangedError, UnknownJobError, UnknownNodeError
from fusesched.controller.step_cpus import CpuMemAsk
from fusesched.controller.steps import StepStdin


def add_machine_routes(app: FastAPI, access: Access) -> None:
    """Serve ``/v1/agents/...``, ``/v1/jobs/{job_id}/remote``, ``/v1/jobs/{job_id}/steps``,
    ``/v1/jobs/{job_id}/checkpoint`` and ``/v1/tasks/{task_id}`` from ``app``."""
    controller = access.controller
    checker = access.auth
    runs_steps = access.runs_steps

    @app.post("/v1/agents/register", status_code=201, tags=["agents"])
    def register(inventory: NodeInventory, p: Caller) -> dict[str, str]:
        access.the_node(p, inventory.name)
        try:
            controller.register(inventory)
        except NodeChangedError as exc:
            raise HTTPException(409, str(exc)) from None
        return {"node": inventory.name}

    @app.post("/v1/agents/heartbeat", response_model=HeartbeatReply, tags=["agents"])
    def heartbeat(
        beat: Heartbeat,
        p: Caller,
        wait: Annotated[float | None, Query(ge=0, le=30)] = None,
        launch: bool = False,  # the agent takes work in replies to quick reports
        signals: bool = False,  # the agent understands signals (older ones refuse them)
        probes: bool = False,  # the agent runs probes (older ones refuse them)
        outputs: bool = False,  # the agent writes output files (older ones refuse them)
        pty: bool = False,  # the agent relays pseudo-terminals (older ones refuse them)
    ) -> Response:
        access.the_node(p, beat.node)
        try:
            reply = controller.heartbeat(beat, wait, launch, signals, probes, outputs, pty)
        except UnknownNodeError:
            raise HTTPException(404, f"node {beat.node!r} is not registered") from None
        # an empty ``limit`` is left out: agents older than it (whose reply model refuses
        # fields it does not know) keep working until a time limit is actually changed
        return json_response(reply, exclude=None if reply.limit else {"limit"})

    @app.post("/v1/agents/leaving", tags=["agents"])
    def leaving(body: Leaving, p: Caller) -> dict[str, str]:
        """The node's agent is stopping and kills its tasks: the node is taken for lost now
        (down, "agent stopped"; its jobs requeued or failed by their restart policies), not
        after the node timeout, until its agent registers again. The node's own credential
        or a cluster-admin; audited."""
        if p.role is not Role.CLUSTER_ADMIN:
            access.the_node(p, body.node)
        try:
            state = controller.leaving(body.node)
        except UnknownNodeError:
            raise HTTPException(404, f"node {body.node!r} is not registered") from None
        access.audit(p, "node-leaving", node=body.node)
        return {"node": body.node, "state": state.value}

    @app.post(
        "/v1/jobs/{job_id}/remote", status_code=201, response_model=RemoteTask, tags=["agents"]
    )
    def remote(job_id: str, launch: RemoteLaunch, p: Caller) -> RemoteTask:
        if not runs_steps(p, job_id):
            raise forbidden(f"only job {job_id}'s own credential or its owner may launch its tasks")
        try:
            task_id = controller.remote_launch(
                job_id, launch.node, launch.argv, launch.env, launch.step
            )
        except UnknownJobError:
            raise HTTPException(404, f"job {job_id!r} is not running") from None
        return RemoteTask(task_id=task_id, state="launching")

    @app.post(
        "/v1/jobs/{job_id}/steps", status_code=201, response_model=StepCreated, tags=["agents"]
    )
    def step(job_id: str, body: StepRequest, p: Caller) -> StepCreated:
        """Start a job step (``srun``): its share of the job's slots and its tasks at once
        (controller/job_steps.py); 409 when running steps leave too little room now (try
        again), 400 when the job could never hold it."""
        if not runs_steps(p, job_id):
            raise forbidden(f"only job {job_id}'s own credential or its owner may run its steps")
        launches = [(t.node, t.argv, t.env) for t in body.tasks]
        het = None if body.het is None else {part.group: part.slots for part in body.het}
        gpus = None if body.gpus is None else GpuAsk(body.gpus, body.gpus_per_task)
        own = CpuMemAsk(body.cpus_per_task, body.memory)
        stdin = None if body.stdin is None else StepStdin(body.stdin, body.stdin_task)
        try:
            step_id, task_ids = controller.create_step(
                job_id,
                body.slots,
                body.overlap,
                launches,
                het,
                gpus,
                body.name,
                body.pty,
                own,
                stdin=stdin,
            )
        except UnknownJobError:
            raise HTTPException(404, f"job {job_id!r} is not running") from None
        except StepsBusy as exc:
            raise HTTPException(409, str(exc)) from None
        return StepCreated(step_id=step_id, task_ids=task_ids)

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
                raise forbidden(f"this credential is job {p.job_id}'s, not job {job_id}'s")
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
                    raise forbidden(f"task {task_id!r} is not of job {p.job_id}")
            else:
                owner = controller.owner(job_id)
                if owner is None or not sees(person(p), owner[1]):
                    raise HTTPException(404, f"no live task {task_id!r}")
        try:
            state, code, reason = controller.task_status(task_id)
        except UnknownJobError:
            raise HTTPException(404, f"no live task {task_id!r}") from None
        return RemoteTask(task_id=task_id, state=state, exit_code=code, reason=reason)

    @app.delete("/v1/tasks/{task_id}", status_code=202, tags=["agents"])
    def stop_task(task_id: str, p: Caller) -> dict[str, str]:
        """Stop one of a running job's remote tasks (``srun`` stops its step's tasks this
        way): the job's own credential, its owner or a cluster-admin; 404 when it is not
        running."""
        job_id = job_of(task_id)
        if not runs_steps(p, job_id):
            raise forbidden(f"only job {job_id}'s own credential or its owner may stop its tasks")
        try:
            controller.remote_kill(task_id)
        except UnknownJobError:
            raise HTTPException(404, f"no live task {task_id!r}") from None
        return {"task_id": task_id, "state": "stopping"}

    @app.post("/v1/agents/join", status_code=201, response_model=Joined, tags=["agents"])
    def join(body: JoinRequest, p: Caller) -> Joined:
        """Exchange a one-time join token for the node's own credential."""
        if not checker.enabled:
            return Joined(node=body.node, token="")
        if p.role is not Role.JOIN:
            raise forbidden("a join token is needed to join a node")
        if p.node and p.node != body.node:
            raise forbidden(f"this join token is for node {p.node!r}")
        token = checker.join(p, body.node)
        if token is None:
            raise unauthorized("the join token was already used")
        access.audit(p, "node-join", node=body.node)
        return Joined(node=body.node, token=token)
