"""What the portal's JSON routes return and accept (``/v1/portal/...``)."""

from __future__ import annotations

from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field

from fusesched.api.job_schemas import JobView
from fusesched.api.schemas import FairShareRow
from fusesched.api.schemas import QueueView as QueueStanding


class _View(BaseModel):
    model_config = ConfigDict(frozen=True)


class Me(_View):
    """Who the token belongs to, and what the portal may show them."""

    user: str
    tenant: str
    role: str
    auth: bool  # False: the controller runs without authentication (everyone is an admin)
    operator: bool  # may open the operator pages (cluster-admin)
    # the QoS tiers a job may name, highest priority first: the tenancy configuration's
    # (``--tenancy FILE``), else the default gold, silver and bronze
    qos_tiers: list[str] = Field(default_factory=list)
    default_qos: str = "silver"  # the tier the submit form starts from


class EventView(_View):
    time: float
    kind: str
    node: str | None = None
    data: dict[str, Any] = Field(default_factory=dict)


class Span(_View):
    """One stretch of a job's life for the timeline: waiting, running, or one task's run."""

    label: str
    kind: Literal["wait", "run", "task"]
    start: float
    end: float | None = None  # None: still going
    node: str | None = None


class JobDetailView(_View):
    job: JobView
    request: dict[str, Any]
    events: list[EventView]
    timeline: list[Span]
    # a waiting job's expected start and nodes (GET /v1/starts); None: not waiting, held, or
    # not expected within the projection's horizon
    expected_start: float | None = None
    expected_nodes: list[str] = Field(default_factory=list)
    # the job runs in an external cluster (Slurm, Kubernetes), which keeps its time limit:
    # it cannot be changed while it runs there
    external: bool = False


class ResourceUse(_View):
    name: str
    capacity: str
    used: str
    fraction: float  # used / capacity, 0..1


class DeviceSlot(_View):
    index: int
    kind: str
    model: str = ""
    mig_profile: str | None = None
    uuid: str = ""
    job_id: str | None = None  # the job holding it now


class NodeOccupancy(_View):
    name: str
    pool: str
    state: str
    reason: str = ""  # why it is not up (its last state change)
    since: float | None = None
    power: str = "on"
    drain_reason: str | None = None  # an operator's drain (None: none; external: None)
    drainable: bool = False  # a local agent's node, which operators may drain here
    resources: list[ResourceUse]
    devices: list[DeviceSlot]
    labels: dict[str, str] = Field(default_factory=dict)


class PoolSummary(_View):
    name: str
    nodes: int
    resources: list[ResourceUse]


class ClusterView(_View):
    nodes: list[NodeOccupancy]
    pools: list[PoolSummary]
    power_saving: bool
    unhealthy: list[NodeOccupancy]  # drained, down, suspended or not powered on


class QueuesView(_View):
    tenancy: bool
    queues: list[QueueStanding]
    fairshare: list[FairShareRow]


class HistoryPoint(_View):
    start: float
    end: float
    cpu_util: float
    gpu_util: float
    wait_s: float | None = None  # mean wait of the jobs that started in it
    started: int = 0
    energy_kwh: float = 0.0  # estimated (power model)


class HistoryView(_View):
    start: float
    end: float
    step_s: float
    cpus: float
    gpus: float
    points: list[HistoryPoint]


class WhatIfRequest(BaseModel):
    """A what-if run: the current queue under another policy and/or cluster size."""

    model_config = ConfigDict(extra="forbid")
    queue_order: str | None = Field(default=None, max_length=64)
    backfill: str | None = Field(default=None, max_length=64)
    placement: str | None = Field(default=None, max_length=64)
    scale: float = Field(default=1.0, gt=0, le=16, allow_inf_nan=False)
    include_finished: int = Field(default=0, ge=0, le=2000)  # recent ended jobs replayed too


class WhatIfMetrics(_View):
    jobs: int
    rejected: int
    avg_wait_s: float
    p95_wait_s: float
    avg_bounded_slowdown: float
    utilization: float
    makespan_s: float


class WhatIfRun(_View):
    id: str
    state: Literal["running", "done", "failed"]
    created: float
    request: dict[str, Any]
    baseline: dict[str, Any] = Field(default_factory=dict)  # policies and size of today
    alternative: dict[str, Any] = Field(default_factory=dict)
    jobs: int = 0
    nodes: int = 0
    alternative_nodes: int = 0
    baseline_metrics: WhatIfMetrics | None = None
    alternative_metrics: WhatIfMetrics | None = None
    error: str = ""
    notes: list[str] = Field(default_factory=list)


class WhatIfList(_View):
    options: dict[str, list[str]]
    current: dict[str, str]
    limits: dict[str, int]
    runs: list[WhatIfRun]
