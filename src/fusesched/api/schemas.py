"""What the REST API returns to users (agents' messages are in :mod:`fusesched.api.wire`; jobs
and their tasks in :mod:`fusesched.api.job_schemas`; job steps and the tasks launched in a
running job in :mod:`fusesched.api.step_schemas`)."""

from __future__ import annotations

from typing import TYPE_CHECKING, Literal

from pydantic import BaseModel, ConfigDict, Field, field_validator

from fusesched.model.job import QoS
from fusesched.model.submit_env import checked_env
from fusesched.model.submit_host import SUBMIT_HOST_PATTERN
from fusesched.model.text import refuse_nul
from fusesched.model.time_field import UnixTime
from fusesched.submit.request import DependencyRequest, JobRequest

if TYPE_CHECKING:
    from fusesched.store.usage import UsageReport, UsageRow


class _View(BaseModel):
    model_config = ConfigDict(frozen=True)


class _Input(BaseModel):
    """A request body: unknown fields are errors, and no text holds a NUL character (the
    store cannot keep one)."""

    model_config = ConfigDict(extra="forbid")

    @field_validator("*")
    @classmethod
    def _no_nul(cls, value: object) -> object:
        return refuse_nul(value)


class LicenseView(_View):
    """``GET /v1/licenses``: one cluster license (as ``scontrol show licenses``)."""

    name: str
    total: int  # as configured (controller --licenses)
    in_use: int  # held by running jobs
    free: int
    waiting_demand: int  # what waiting jobs ask for in all
    waiting_jobs: int  # how many waiting jobs ask for it


class ExpectedStartView(_View):
    id: str
    user: str = ""
    tenant: str = "default"
    queue: str = "default"
    phase: str  # queued, or pending (waiting for its dependencies)
    expected_start: float | None  # Unix time; None: not within the horizon
    nodes: list[str] = Field(default_factory=list)  # where it would start


class StartsView(_View):
    """``GET /v1/starts``: when the waiting jobs are expected to start."""

    at: float  # when the projection was made (Unix time)
    horizon_s: float  # how far it looked
    complete: bool  # False: it stopped early (too many steps); later jobs show no start
    jobs: list[ExpectedStartView]


class TrialMember(_View):
    array_index: int | None = None  # an array's member; None for a plain job
    expected_start: float | None  # Unix time; None: not within the horizon
    nodes: list[str] = Field(default_factory=list)


class TrialJob(_View):
    name: str = ""
    refused: str | None = None  # why the scheduler would refuse it (then no members)
    held: bool = False  # submitted held: it would not start until released (no members)
    members: list[TrialMember] = Field(default_factory=list)


class TrialView(_View):
    """``POST /v1/starts/test``: when jobs would start if submitted now (nothing is)."""

    at: float
    horizon_s: float
    jobs: list[TrialJob]


class Submitted(_View):
    id: str
    ids: list[str] = Field(default_factory=list)  # array members, when it is an array


class SubmittedMany(_View):
    ids: list[str]


class SubmissionFile(BaseModel):
    model_config = ConfigDict(extra="forbid")
    name: str = Field(default="<file>", max_length=4096)  # for messages: "job.sh:3: ..."
    text: str = Field(max_length=4_000_000)  # its parser says what a NUL in it means
    args: list[str] = Field(default_factory=list, max_length=200)  # sbatch options
    # the folder the submitting command runs in: a batch script's default working directory
    # (``JobRequest.submit_dir``); left out by clients older than it
    submit_dir: str | None = Field(default=None, max_length=4096)
    submit_host: str | None = Field(default=None, pattern=SUBMIT_HOST_PATTERN)  # (the same)

    @field_validator("name", "args", "submit_dir")
    @classmethod
    def _no_nul(cls, value: object) -> object:
        return refuse_nul(value)


class SubmissionFiles(_Input):
    files: list[SubmissionFile] = Field(min_length=1, max_length=10_000)
    # the submitting shell's environment, which its batch scripts' jobs inherit (sbatch's
    # default --export=ALL; model/submit_env.py); left out by clients older than it, and
    # by the REST API's callers that want none of theirs carried
    submit_env: dict[str, str] | None = None
    user: str = Field(default="", max_length=200)  # without authentication: who submits

    @field_validator("submit_env")
    @classmethod
    def _environment(cls, environ: dict[str, str] | None) -> dict[str, str] | None:
        return checked_env(environ)


class SubmittedFiles(_View):
    ids: list[str]
    warnings: list[str] = Field(default_factory=list)


class Cancelled(_View):
    cancelled: list[str]


class JobHold(_Input):
    reason: str = Field("", max_length=1_000)  # empty: "held by user"


class Held(_View):
    """The jobs a hold, release or requeue changed (array members one by one)."""

    held: list[str] = Field(default_factory=list)
    released: list[str] = Field(default_factory=list)
    requeued: list[str] = Field(default_factory=list)


class JobUpdate(_Input):
    """What to change of a job (Slurm's scontrol update); fields left out stay as they are.
    A running job may change only ``walltime_s``, ``name`` and ``comment``."""

    priority: int | None = Field(None, ge=-(2**31), le=2**31 - 1)
    qos: QoS | None = None
    walltime_s: float | None = Field(None, gt=0, le=10 * 365 * 86400.0)
    name: str | None = Field(None, max_length=200)  # "": no name (as Slurm's Name=)
    comment: str | None = None  # "": none; one line, at most 1024 characters (sbatch --comment)
    queue: str | None = Field(None, min_length=1, max_length=200)  # Slurm's partition
    # what it waits for from now on (sbatch --dependency); []: nothing any more
    dependencies: list[DependencyRequest] | None = Field(None, max_length=10_000)
    begin_time: UnixTime | None = None  # not eligible before (sbatch --begin; now: at once)

    @field_validator("name")
    @classmethod
    def _name(cls, name: str | None) -> str | None:
        """As a submitted job's name (one line)."""
        return None if name is None else JobRequest._one_line(name)

    @field_validator("comment")
    @classmethod
    def _comment(cls, comment: str | None) -> str | None:
        """As a submitted job's comment (one line, printable, at most 1024 characters)."""
        return None if comment is None else JobRequest._comment(comment)


class Updated(_View):
    updated: list[str]


class JobRequeue(_Input):
    reason: str = Field("", max_length=1_000)  # empty: "requeued by user"
    hold: bool = False  # held once queued again (scontrol requeuehold)


class NodeView(_View):
    name: str
    state: str
    address: str
    capacity: dict[str, str]
    free: dict[str, str]
    labels: dict[str, str]
    devices: int
    last_heartbeat_s_ago: float
    datasets: list[str] | None = None  # what its dataset cache holds (None: no cache)
    drain_reason: str | None = None  # why an operator drained it (None: not drained)
    # when the drain was set and by whom (None: not drained, or not known: who only with
    # authentication on)
    drained_at: float | None = None
    drained_by: str | None = None
    # why it is not up (its latest state change; None: up) and since when (sinfo -R)
    reason: str | None = None
    since: float | None = None
    # its agent's heartbeats arrive (a powered-down node's are not expected; sinfo's "*")
    responding: bool = True
    # all that is booked on it is ended jobs' whose tasks are being killed there: Slurm's
    # COMPLETING (sinfo's comp; controller/completing_views.py)
    completing: bool = False
    # its free memory (the kernel's MemFree, bytes) and 1- and 5-minute load averages as its
    # agent last said (None: not known, as for an agent older than them); Slurm's FreeMem
    # and CPULoad (the 5-minute one)
    free_memory_bytes: int | None = None
    load1: float | None = None
    load5: float | None = None


class NodeDrain(_Input):
    reason: str = Field(min_length=1, max_length=1_000)


class NodeDrained(_View):
    """A node after a drain or undrain: its state and the operator's drain (None: none)."""

    node: str
    state: str
    drain_reason: str | None


class QuotaCell(_View):
    """One quota column of a queue: amounts as quantities ("4", "16Gi"), ``available``
    "unlimited" when nothing bounds it; ``fraction`` = used ÷ nominal."""

    flavor: str
    resource: str
    nominal: str
    used: str
    borrowed: str
    available: str
    fraction: float


class QueueView(_View):
    """A queue's jobs; for a queue of the tenancy configuration also its tenant, cohort,
    fair-share weight and quota (a queue that only has jobs: those alone)."""

    name: str
    tenant: str | None = None
    cohort: str | None = None
    shares: float | None = None
    pending: int = 0
    running: int = 0
    quota: list[QuotaCell] = Field(default_factory=list)
    borrowing: bool = False


class FairShareRow(_View):
    """One account of the fair-share tree (as Slurm's sshare): its shares, its decayed usage,
    and its fair-share factor (1 best, 0 worst)."""

    account: str  # organisation/tenant/queue/user
    depth: int
    shares: float
    norm_shares: float
    usage: float
    norm_usage: float
    level_fs: float | None = None  # None: no usage yet (infinite)
    position: int | None = None
    factor: float | None = None


class Health(_View):
    status: str
    nodes: int
    jobs_active: int
    cycles: int


class TokenCreate(_Input):
    """A new token: ``user`` tokens for people (with a role), ``join`` tokens for nodes."""

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


class JoinRequest(_Input):
    node: str = Field(min_length=1, max_length=253)


class Joined(_View):
    node: str
    token: str  # the node's own credential (empty when the controller runs without auth)


class UsageRowView(_View):
    """The usage of one group: ``group`` maps the report's ``by`` fields to their values."""

    group: dict[str, str]
    jobs: int
    cpu_hours: float
    gpu_hours: dict[str, float]  # GPU model -> GPU-hours
    gpu_hours_total: float
    energy_kwh_est: float  # estimated from a power model, not measured
    billing: float  # the fair-share charge: CPU-hours + weight x GPU-hours


class UsageView(_View):
    """``GET /v1/usage``: usage over ``[start, end]`` (epoch seconds) by ``by``."""

    start: float
    end: float
    by: list[str]
    tenant: str | None = None  # the filters applied (None: all the caller may see)
    user: str | None = None
    rows: list[UsageRowView]
    total: UsageRowView


def usage_view(report: UsageReport) -> UsageView:
    """The API's view of a usage report."""

    def row(r: UsageRow) -> UsageRowView:
        return UsageRowView(
            group=dict(zip(report.by, r.key, strict=False)),
            jobs=r.jobs,
            cpu_hours=r.cpu_hours,
            gpu_hours=dict(r.gpu_hours),
            gpu_hours_total=r.gpu_hours_total,
            energy_kwh_est=r.energy_kwh_est,
            billing=r.billing,
        )

    return UsageView(
        start=report.start,
        end=report.end,
        by=list(report.by),
        tenant=report.tenant,
        user=report.user,
        rows=[row(r) for r in report.rows],
        total=row(report.total),
    )


class FactorView(_View):
    name: str
    value: float  # normalised, in [0, 1]
    weight: float
    contribution: float
    detail: str = ""


class PriorityView(_View):
    """A waiting job's multifactor priority, factor by factor (``fusesched priority``)."""

    job_id: str
    total: float
    factors: list[FactorView]


class RouteView(_View):
    """Which pools may take a job, in order of preference, and why (``fusesched route``)."""

    job_id: str | None = None
    pools: list[str]
    rule: str | None = None
    explanation: list[str]
    pool: str | None = None  # where it runs or ran, when it has started


class CheckpointReport(BaseModel):
    """A running job wrote a checkpoint (``time``: when; now when omitted)."""

    model_config = ConfigDict(extra="forbid")
    time: float | None = Field(default=None, ge=0, allow_inf_nan=False)


class CheckpointNoted(_View):
    job_id: str
    time: float
