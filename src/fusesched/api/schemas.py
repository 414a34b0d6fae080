"""What the REST API returns to users (agents' messages are in :mod:`fusesched.api.wire`)."""

from __future__ import annotations

from typing import Literal

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


class SubmissionFile(BaseModel):
    model_config = ConfigDict(extra="forbid")
    name: str = Field(default="<file>", max_length=4096)  # for messages: "job.sh:3: ..."
    text: str = Field(max_length=4_000_000)
    args: list[str] = Field(default_factory=list, max_length=200)  # sbatch options


class SubmissionFiles(BaseModel):
    model_config = ConfigDict(extra="forbid")
    files: list[SubmissionFile] = Field(min_length=1, max_length=10_000)
    user: str = Field(default="", max_length=200)  # without authentication: who submits


class SubmittedFiles(_View):
    ids: list[str]
    warnings: list[str] = Field(default_factory=list)


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


class TokenCreate(BaseModel):
    """A new token: ``user`` tokens for people (with a role), ``join`` tokens for nodes."""

    model_config = ConfigDict(extra="forbid")
    kind: Literal["user", "join"] = "user"
    user: str = Field(default="", max_length=200)
    tenant: str = Field(default="", max_length=200)  # default: the caller's tenant
    role: Literal["user", "tenant-admin", "cluster-admin"] = "user"
    node: str | None = Field(default=None, max_length=253)  # a join token for this node only
    expires_in_s: float | None = Field(default=None, gt=0, le=10 * 365 * 86400)


class TokenView(_View):
    """A stored token, without its secret (which is never stored)."""

    id: str
    kind: str
    user: str = ""
    tenant: str = ""
    role: str = ""
    node: str | None = None
    job_id: str | None = None
    created_at: float
    expires_at: float | None = None
    used_at: float | None = None
    revoked: bool = False


class TokenCreated(TokenView):
    token: str  # shown once: only its hash is stored


class TokenRevoked(_View):
    revoked: str


class JoinRequest(BaseModel):
    model_config = ConfigDict(extra="forbid")
    node: str = Field(min_length=1, max_length=253)


class Joined(_View):
    node: str
    token: str  # the node's own credential (empty when the controller runs without auth)
