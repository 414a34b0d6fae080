"""What the REST API returns to users (agents' messages are in :mod:`fusesched.api.wire`)."""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict, Field


class _View(BaseModel):
    model_config = ConfigDict(frozen=True)


class TaskView(_View):
    task_id: str
    node: str
    state: str
    exit_code: int | None = None
    reason: str = ""
    start_time: float | None = None
    end_time: float | None = None
    cpu_ids: list[int] = Field(default_factory=list)
    gpu_indices: list[int] = Field(default_factory=list)


class JobView(_View):
    id: str
    name: str = ""
    user: str = ""
    tenant: str = "default"
    queue: str = "default"
    type: str = "batch"
    state: str  # Pending, Running, Completed, Failed, Cancelled
    phase: str  # the core's finer phase (queued, timeout, ...)
    exit_code: int | None = None
    reason: str = ""
    nodes: list[str] = Field(default_factory=list)
    submit_time: float | None = None
    start_time: float | None = None
    end_time: float | None = None
    array_parent: str | None = None
    tasks: list[TaskView] = Field(default_factory=list)


class Submitted(_View):
    id: str
    ids: list[str] = Field(default_factory=list)  # array members, when it is an array


class SubmittedMany(_View):
    ids: list[str]


class Cancelled(_View):
    cancelled: list[str]


class NodeView(_View):
    name: str
    state: str
    address: str
    capacity: dict[str, str]
    free: dict[str, str]
    labels: dict[str, str]
    devices: int
    last_heartbeat_s_ago: float


class QueueView(_View):
    name: str
    pending: int
    running: int


class RemoteLaunch(BaseModel):
    model_config = ConfigDict(extra="forbid")
    node: str
    argv: list[str] = Field(min_length=1)


class RemoteTask(_View):
    task_id: str
    state: str
    exit_code: int | None = None
    reason: str = ""


class Health(_View):
    status: str
    nodes: int
    jobs_active: int
    cycles: int
