"""What the REST API shows of jobs: a job (``GET /v1/jobs/{id}``, ``GET /v1/jobs``), its tasks,
its heterogeneous components, its steps summarised and its dependencies (the other views are
in :mod:`fusesched.api.schemas`)."""

from __future__ import annotations

from pydantic import Field

from fusesched.api.schemas import _View


class TaskView(_View):
    task_id: str
    node: str
    state: str
    exit_code: int | None = None
    reason: str = ""
    start_time: float | None = None
    end_time: float | None = None
    group: str = ""  # its task group ("remote": a helper or job step's task the job started)
    step_id: int | None = None  # its job step (srun); None: the job's own task, or of no step
    # that step's tasks in all (srun -n, an MPI step's ranks); None: no step's, or a daemon
    step_tasks: int | None = None
    step_name: str | None = None  # that step's name (srun -J, else its command's); None: unknown
    # what it used, once ended (agents' samples; None: not sampled, or still running)
    cpu_seconds: float | None = None
    max_rss_bytes: int | None = None
    cpu_ids: list[int] = Field(default_factory=list)
    gpu_indices: list[int] = Field(default_factory=list)
    external_id: str | None = None  # the external cluster's id (a Slurm job id, …)
    # a task with a readiness probe, not ended: whether it is ready, and since when (None:
    # unknown, or no readiness probe)
    ready: bool | None = None
    ready_since: float | None = None


class ComponentView(_View):
    """One component of a heterogeneous job (sbatch's ``hetjob``): its task group."""

    name: str  # its task group: het0, het1, …
    tasks: int
    resources: dict[str, str] = Field(default_factory=dict)  # each task's
    # its own node constraints (-C, -w, -x, a GPU type) in a line; left out when it has none
    constraints: str = Field(default="", exclude_if=lambda value: not value)


class StepSummaryView(_View):
    """One step of a job's latest run summarised from its tasks (``GET /v1/jobs?steps=true``:
    a line a step, as sacct prints them; :mod:`fusesched.model.job_steps`)."""

    step: str  # "batch", "extern", or its number ("0", "1", …)
    name: str = ""  # "batch", "extern", else srun -J's (or its command's); "": unknown
    tasks: int  # its tasks stored (an MPI step's mpirun and daemons included)
    ntasks: int  # its tasks in all (srun -n, an MPI step's ranks)
    nodes: list[str] = Field(default_factory=list)
    start_time: float | None = None  # the earliest start
    end_time: float | None = None  # the latest end; None while one of its tasks runs
    running: int = 0  # its tasks not ended
    exit_code: int | None = None  # the worst (a signal negative); None: none ended
    signals: list[int] = Field(default_factory=list)  # the signals that ended some tasks
    lost: bool = False  # a task ended with no exit status (its node or agent lost it)
    cpu_seconds: float | None = None  # their CPU time; None: not sampled
    max_rss_bytes: int | None = None  # the highest peak of one task; None: not sampled
    oom: bool = False  # the kernel's OOM killer killed in one of its tasks


class DependencyView(_View):
    """One dependency of a job as submitted (sbatch ``--dependency``): ``kind`` (``afterok``,
    ``afterany``, …) on job ``job_id`` (an array's id: on the whole array); a ``singleton``
    names no job."""

    kind: str
    job_id: str = ""


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
    priority: int = 0  # the job's own priority (sbatch --priority, update --priority)
    qos: str | None = None  # its QoS tier as applied (a tenancy file's default_qos when unnamed)
    time_limit_s: float | None = None  # its time limit, as changed by updates; None: none
    mail_type: str | None = None  # what it is told of ("END,FAIL", sbatch --mail-type); None: none
    mail_user: str | None = None  # who is told (sbatch --mail-user; default its user)
    comment: str = ""  # free text for people (sbatch --comment)
    deadline: float | None = None  # removed if it cannot end by then (sbatch --deadline)
    begin_time: float | None = None  # not eligible before (sbatch --begin, scontrol update)
    licenses: dict[str, int] = Field(default_factory=dict)  # cluster licenses (sbatch -L)
    # what it waits for, as submitted (met or not: the jobs named say; sbatch --dependency)
    dependencies: list[DependencyView] = Field(default_factory=list)
    # where its first task runs: -D made absolute against the folder it was submitted from,
    # else that folder (controller/output_files.py start_dirs); None: neither is known (it
    # runs in its task's own folder)
    workdir: str | None = None
    # a batch job's output and error files (sbatch -o/-e) as its agent will write them:
    # expanded (%j, %A_%a, %x, …; %N, its first node's name, left as written until it has
    # nodes) and made absolute against its working directory; the error file is the output
    # file when standard error goes with it. None: no file is written (no batch script, a
    # container's, or a relative path without a working directory: its task's log keeps it)
    output_file: str | None = None
    error_file: str | None = None
    # its program and arguments, space-separated (Slurm's Command); in a listing
    # (GET /v1/jobs) cut past 1,024 characters, ending in "..." (controller/job_view.py
    # LISTED_COMMAND). None: a batch script (fusesched keeps its text, not its file),
    # salloc's allocation, or an image's own
    command: str | None = None
    nodes: list[str] = Field(default_factory=list)
    # what it asks for in all (squeue %C, %b, %D; controller/job_sizes.py); None: unknown
    cpus: float | None = None
    gpus: int | None = None
    min_nodes: int | None = None
    # its accelerators in all by resource name (nvidia.com/gpu, nvidia.com/mig-1g.10gb,
    # fusesched.io/gpu-milli shares, …; squeue %b); None: unknown
    accelerators: dict[str, int] | None = None
    # each task's CPUs, when all its task groups ask the same (a job step's task holds as
    # many: sacct's step AllocCPUS); None: they differ, or unknown
    cpus_per_task: float | None = None
    submit_time: float | None = None
    start_time: float | None = None
    end_time: float | None = None
    array_parent: str | None = None
    # its number in submission order: GET /v1/jobs?before=SEQ lists the jobs before it
    seq: int | None = None
    # started by one task (its batch script, or mpirun) that launches the rest: sacct's ID.batch
    batch: bool = False
    # salloc's job: that one task holds the allocation (submit/salloc_holder.py): sacct's
    # ID.extern, not ID.batch
    allocation: bool = False
    # how many times it was requeued or restarted in place (GET /v1/jobs/{id}, and
    # GET /v1/jobs?detail=true); None: not asked for
    restarts: int | None = None
    pool: str | None = None  # the pool that runs or ran it (local agents' or a cluster's)
    energy_kwh: float | None = None  # what its run drew, once ended (measured + estimated)
    energy_measured_kwh: float | None = None  # the part measured (GPU power readings)
    tasks: list[TaskView] = Field(default_factory=list)
    # its latest run's steps, summarised (GET /v1/jobs?steps=true); None: not asked for
    steps: list[StepSummaryView] | None = None
    # a heterogeneous job's components, in order (sbatch's hetjob); None: not one
    components: list[ComponentView] | None = None
    # not ended, with readiness probes: whether every probed task is ready (None: unknown, or
    # no readiness probe; controller/probes.py)
    ready: bool | None = None
    # a run of it still holds its booking where its tasks are being killed: Slurm's
    # COMPLETING (squeue's CG; controller/completing_views.py); its state stays its end's
    completing: bool = False
    # GET /v1/jobs?combine_arrays=true: an array's members that wait (never started) for
    # one reason, shown as one row (squeue without -r): the newest one's view with the id
    # ``1009_[2-999%2]``, their indices (``2-999%2``, with the throttle; past 64 characters
    # cut after a whole run, ``1,3,5,...``, as squeue) and how many they are; None on every
    # other view
    array_tasks: str | None = None
    array_count: int | None = None
