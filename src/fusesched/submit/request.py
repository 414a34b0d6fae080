"""``JobRequest``: the JSON the REST API accepts and the store keeps, validated with pydantic.

Every submission format (fusesched YAML, ``#SBATCH`` scripts, Kubernetes Pod/Job YAML, the
Python SDK) ends as a ``JobRequest``. It carries what the scheduler needs (groups × resources,
placement, walltime, dependencies, array) and what the node agents need (argv or script, env,
workdir, image, ports, launcher). :meth:`JobRequest.to_job_spec` turns it into the core's
frozen :class:`~fusesched.model.job.JobSpec`. A task group's model and its checks are
:mod:`fusesched.submit.task_group`'s, the job's placement
:mod:`fusesched.submit.placement_request`'s and what it does when a run fails
:mod:`fusesched.submit.failure_policy`'s.

Unknown fields are errors. Problems raise :class:`SubmitError` naming the field (and the file
and line where the caller knows them, see :func:`parse_request`).
"""

from __future__ import annotations

import json
import re
import unicodedata
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Annotated, Final, Literal

from pydantic import Field, ValidationError, field_validator, model_validator

from fusesched.model.job import (
    DATASET_NAME,
    ArraySpec,
    Dataset,
    Dependency,
    DependencyKind,
    JobSpec,
    JobType,
    QoS,
)
from fusesched.model.licenses import normalize, parse_licenses
from fusesched.model.resources import MEMORY, QuantityError, parse_quantity
from fusesched.model.submit_env import checked_env
from fusesched.model.submit_host import SUBMIT_HOST_PATTERN
from fusesched.model.time_field import UnixTime
from fusesched.submit.errors import SubmitError
from fusesched.submit.failure_policy import HangRequest, RestartRequest
from fusesched.submit.job_notify import NotifyRequest
from fusesched.submit.job_signal import JobSignal
from fusesched.submit.label_terms import LabelRequirementRequest
from fusesched.submit.placement_request import (
    PlacementRequest,
    PreferredTermRequest,
    TopologyRequest,
)
from fusesched.submit.probes import PROBE_MODELS
from fusesched.submit.problems import Loc, submit_error_from
from fusesched.submit.slurm_options import SlurmJobOptions
from fusesched.submit.strict_model import StrictModel
from fusesched.submit.task_group import TaskGroupRequest
from fusesched.submit.terminal import Terminal

_LABEL_KEY_RE: Final = re.compile(r"^(?:[a-z0-9.-]{1,253}/)?[A-Za-z0-9]([-\w.]{0,61}[A-Za-z0-9])?$")
_LABEL_VALUE_RE: Final = re.compile(r"^(?:[A-Za-z0-9]([-\w.]{0,61}[A-Za-z0-9])?)?$")
_POOL_NAME_RE: Final = re.compile(r"^[a-z0-9]([-a-z0-9]{0,61}[a-z0-9])?$")
#: Most indices one job array may have (every index is a job the controller keeps).
MAX_ARRAY_INDICES: Final = 1_000_000
#: A job's priority fits a 32-bit integer, as the store's column (and Slurm's, Kubernetes').
PRIORITY_MIN: Final = -(2**31)
PRIORITY_MAX: Final = 2**31 - 1
#: How output files may be opened at a job's start (sbatch --open-mode).
OPEN_MODES: Final = ("truncate", "append")
#: The longest job comment (sbatch --comment), in characters.
MAX_COMMENT: Final = 1024


def comment_control(comment: str) -> str | None:
    """Why ``comment`` is refused for a control character (an escape sequence would reach the
    terminal of whoever runs ``fusesched show``; U+2028/U+2029 break the line), or None."""
    for ch in comment:
        if unicodedata.category(ch) in ("Cc", "Zl", "Zp") and ch not in "\n\r":
            return f"the comment holds a control character (U+{ord(ch):04X}): give printable text"
    return None


class DependencyRequest(StrictModel):
    """``kind`` on job ``job_id``; a ``singleton`` names no job (it waits for the earlier jobs
    of the same name and user that have not ended)."""

    kind: DependencyKind
    job_id: str = ""

    @model_validator(mode="after")
    def _names_a_job(self) -> DependencyRequest:
        if self.kind is DependencyKind.SINGLETON and self.job_id:
            raise ValueError(
                "singleton names no job_id: it waits for the earlier jobs of the same name and user"
            )
        if self.kind is not DependencyKind.SINGLETON and not self.job_id:
            raise ValueError(f"{self.kind} needs job_id, the id of the job it waits for")
        return self


class ArrayRequest(StrictModel):
    """Indices ``start, start+step, …, ≤ stop``; at most ``max_parallel`` run at once."""

    start: Annotated[int, Field(ge=0)]
    stop: Annotated[int, Field(ge=0)]
    step: Annotated[int, Field(ge=1)] = 1
    max_parallel: Annotated[int, Field(ge=1)] | None = None

    @model_validator(mode="after")
    def _ordered(self) -> ArrayRequest:
        if self.stop < self.start:
            raise ValueError(f"array stop ({self.stop}) is below start ({self.start})")
        if (self.stop - self.start) // self.step + 1 > MAX_ARRAY_INDICES:
            raise ValueError(f"an array may have at most {MAX_ARRAY_INDICES:,} indices")
        return self


class DatasetRequest(StrictModel):
    """A dataset the job reads: ``name`` (→ ``$FUSESCHED_DATA_<NAME>``), ``source`` (an
    absolute path or ``file://`` URI on shared storage) and ``size`` (bytes, or ``"50Gi"``)."""

    name: Annotated[str, Field(pattern=DATASET_NAME.pattern)]
    source: Annotated[str, Field(min_length=1, max_length=4096)]
    size: str | int = 0

    @field_validator("source")
    @classmethod
    def _source(cls, source: str) -> str:
        path = source.removeprefix("file://")
        if "://" in path:
            scheme = source.split("://", 1)[0]
            raise ValueError(f"no stager for {scheme}:// sources; give a shared path or file://")
        if not path.startswith("/"):
            raise ValueError(f"dataset source {source!r} must be an absolute path")
        return source

    @field_validator("size")
    @classmethod
    def _size(cls, size: str | int) -> str | int:
        try:
            parse_quantity(MEMORY, size)
        except QuantityError as exc:
            raise ValueError(f"dataset size: {exc}") from exc
        return size

    def to_model(self) -> Dataset:
        return Dataset(self.name, self.source, parse_quantity(MEMORY, self.size))


class JobRequest(StrictModel):
    """A job as submitted. ``type`` and group ``launcher`` None mean: identify them."""

    name: Annotated[str, Field(max_length=200)] = ""
    type: JobType | None = None
    user: str = ""
    tenant: Annotated[str, Field(min_length=1)] = "default"
    queue: Annotated[str, Field(min_length=1)] = "default"
    priority: Annotated[int, Field(ge=PRIORITY_MIN, le=PRIORITY_MAX)] = 0
    qos: QoS | None = None  # None: the tenancy file's default_qos (silver without one)
    walltime_s: Annotated[float, Field(gt=0)] | None = None
    min_member: Annotated[int, Field(ge=1)] | None = None
    dependencies: list[DependencyRequest] = Field(default_factory=list)
    hold: bool = False  # submitted held: it waits until released (sbatch --hold)
    # not eligible to start before this Unix time (sbatch --begin, YAML ``begin``)
    begin_time: UnixTime | None = None
    # removed while it waits once it can no longer end by this Unix time (sbatch --deadline)
    deadline: UnixTime | None = None
    # False: a preemption cancels it, a node failure fails it (sbatch --no-requeue)
    requeue: bool = True
    # run in this advance reservation (sbatch --reservation; docs/RESERVATIONS.md)
    reservation: Annotated[str, Field(pattern=r"^[A-Za-z0-9][A-Za-z0-9_.-]{0,63}$")] | None = None
    array: ArrayRequest | None = None
    placement: PlacementRequest = Field(default_factory=PlacementRequest)
    output: str | None = None  # path pattern for stdout (%j job id, %A array job, %a index)
    error: str | None = None  # path pattern for stderr; None: with stdout
    # how the output files are opened at each start: emptied first, or added to
    # (sbatch --open-mode; docs/SUBMIT.md, "Output files")
    open_mode: Literal["truncate", "append"] = "truncate"
    # the folder it was submitted from (sbatch sends its own; Slurm's SLURM_SUBMIT_DIR): a
    # batch script with no ``workdir`` starts there where its node has it, a relative
    # ``workdir`` and relative output files are relative to it (docs/SUBMIT.md, "Output files")
    submit_dir: Annotated[str, Field(min_length=1, max_length=4096)] | None = None
    # the submitting shell's environment, which its tasks inherit under their own variables
    # (sbatch's default --export=ALL; what is carried: model/submit_env.py); not for
    # container tasks or remote pools. Left out when None: a controller older than the
    # field refuses it
    submit_env: dict[str, str] | None = Field(default=None, exclude_if=lambda value: value is None)
    # the host it was submitted from (the clients send their own: model/submit_host.py), and
    # the Slurm options given whose values its tasks are told (submit/slurm_options.py): a
    # Slurm job's SLURM_SUBMIT_HOST, SLURM_NTASKS_PER_NODE, …; left out when None, as submit_env
    submit_host: Annotated[str, Field(pattern=SUBMIT_HOST_PATTERN)] | None = Field(
        default=None, exclude_if=lambda value: value is None
    )
    slurm_options: SlurmJobOptions | None = Field(default=None, exclude_if=lambda v: v is None)
    # its batch script's arguments, $1 $2 … (sbatch job.sh ARGS…); left out when None, as
    # submit_env: a controller older than it refuses it (and the client says so)
    script_args: list[str] | None = Field(
        default=None, max_length=10_000, exclude_if=lambda value: value is None
    )
    # where the job keeps its checkpoints (FUSESCHED_CHECKPOINT_DIR; the same folder on every
    # restart) and about how often it writes one (lets preemption estimate lost work)
    labels: dict[str, str] = Field(default_factory=dict)  # routing rules may match them
    pool: str | None = None  # run in this pool only (see docs/FEDERATION.md); None: routed
    checkpoint_dir: Annotated[str, Field(min_length=1, max_length=4096)] | None = None
    checkpoint_interval_s: Annotated[float, Field(gt=0)] | None = None
    restart: RestartRequest = Field(default_factory=RestartRequest)
    hang: HangRequest = Field(default_factory=HangRequest)
    datasets: list[DatasetRequest] = Field(default_factory=list)
    # a signal sent ahead of the time limit (sbatch --signal); None: no warning
    signal: JobSignal | None = None
    # who to tell of its begin, end, failure, … (sbatch --mail-type/--mail-user); None: nobody
    notify: NotifyRequest | None = None
    # free text for people: one line, at most MAX_COMMENT characters (sbatch --comment)
    comment: str = ""
    # cluster licenses it holds while it runs ({matlab: 2}, or "matlab:2,ansys"; sbatch -L;
    # docs/LICENSES.md)
    licenses: dict[str, int] = Field(default_factory=dict)
    # its tasks get Slurm's variables (SLURM_JOB_ID, SLURM_PROCID, …): jobs from sbatch and
    # fusesched run; others may ask for it (controller/launchenv.py slurm_env)
    slurm_env: bool = False
    # a command waits on it and says every few seconds that it is alive (POST
    # /v1/jobs/{id}/alive): salloc's and run's jobs. Silent longer than the controller's
    # --inactive-limit, the job is ended (Slurm's InactiveLimit; controller/inactive.py).
    # Dumped only when true, as ``hetjob``: a controller older than the field refuses it
    # (unknown fields are 422), so a plain job's request must not name it
    attended: bool = Field(default=False, exclude_if=lambda value: not value)
    # a Slurm heterogeneous job (sbatch's ``:``, ``#SBATCH hetjob``): one group per component,
    # the first group's program run once, on its first task; the others' tasks are slots for
    # ``srun --het-group`` (docs/SUBMIT.md, "Heterogeneous jobs")
    hetjob: bool = Field(default=False, exclude_if=lambda value: not value)
    # its one task runs on a pseudo-terminal that ``fusesched run --pty`` relays through the
    # controller (submit/terminal.py); left out when None, as ``attended``
    pty: Terminal | None = Field(default=None, exclude_if=lambda value: value is None)
    groups: Annotated[list[TaskGroupRequest], Field(min_length=1)]

    @field_validator("licenses", mode="before")
    @classmethod
    def _licenses(cls, value: object) -> object:
        if isinstance(value, str):
            return dict(parse_licenses(value, default=1))
        if isinstance(value, Mapping):
            return dict(normalize(value))
        raise ValueError(
            "licenses: give a mapping of license name to count ({matlab: 2}) or "
            "NAME[:COUNT][,NAME[:COUNT]…]"
        )

    @field_validator("name")
    @classmethod
    def _one_line(cls, name: str) -> str:
        if any(ch in name for ch in "\n\r\t"):
            raise ValueError("the job name must be one line")
        return name

    @field_validator("comment")
    @classmethod
    def _comment(cls, comment: str) -> str:
        if any(ch in comment for ch in "\n\r"):
            raise ValueError("the comment must be one line")
        if (control := comment_control(comment)) is not None:
            raise ValueError(control)
        if len(comment) > MAX_COMMENT:
            raise ValueError(
                f"the comment is {len(comment)} characters long: at most {MAX_COMMENT}"
            )
        return comment

    @field_validator("labels")
    @classmethod
    def _labels(cls, labels: dict[str, str]) -> dict[str, str]:
        for key, value in labels.items():
            if not _LABEL_KEY_RE.fullmatch(key):
                raise ValueError(f"invalid label key {key!r} (as Kubernetes: [prefix/]name)")
            if not _LABEL_VALUE_RE.fullmatch(value):
                raise ValueError(f"label {key}: invalid value {value!r} (63 characters at most)")
        return labels

    @field_validator("submit_env")
    @classmethod
    def _submit_env(cls, environ: dict[str, str] | None) -> dict[str, str] | None:
        return checked_env(environ)

    @field_validator("submit_dir")
    @classmethod
    def _absolute(cls, folder: str | None) -> str | None:
        if folder is not None and not folder.startswith("/"):
            raise ValueError(f"submit_dir must be an absolute path, not {folder!r}")
        return folder

    @field_validator("pool")
    @classmethod
    def _pool(cls, pool: str | None) -> str | None:
        if pool is not None and not _POOL_NAME_RE.fullmatch(pool):
            raise ValueError(f"invalid pool name {pool!r} (lower-case letters, digits and -)")
        return pool

    @model_validator(mode="after")
    def _consistent(self) -> JobRequest:
        names = [g.name for g in self.groups]
        duplicates = sorted({n for n in names if names.count(n) > 1})
        if duplicates:
            raise ValueError(f"task group names must be unique; repeated: {', '.join(duplicates)}")
        if self.min_member is not None and self.min_member > self.task_count:
            raise ValueError(
                f"min_member ({self.min_member}) exceeds the number of tasks ({self.task_count})"
            )
        problem = self.placement.to_model().node_count_problem(self.task_count, self.min_member)
        if problem is not None:
            raise ValueError(problem)
        data = [d.name.upper() for d in self.datasets]
        repeated = sorted({n for n in data if data.count(n) > 1})
        if repeated:
            raise ValueError(f"dataset names must be unique (ignoring case): {', '.join(repeated)}")
        if self.script_args is not None and self.groups[0].script is None:
            raise ValueError("script_args: only a batch script (groups[0].script) takes arguments")
        for k, word in enumerate(self.script_args or ()):
            if not _utf8(word):  # (a NUL: refused with every text field's check)
                raise ValueError(f"script_args[{k}]: an argument must be UTF-8 text")
        if self.hetjob and (problem := _hetjob_problem(self)) is not None:
            raise ValueError(problem)
        if self.attended and self.array is not None:  # (InactiveLimit: one holder, one job)
            raise ValueError(
                "a job array cannot be held by a waiting command (attended: true): each job "
                "is kept by pings for its own id; salloc and run submit no arrays"
            )
        if self.pty is not None and (self.task_count != 1 or self.array is not None):
            raise ValueError(
                "pty: a job on a pseudo-terminal has exactly one task and is not an array "
                f"(this one has {self.task_count} tasks{', an array' if self.array else ''})"
            )
        if self.pty is not None:
            _runs_once(self)
        if self.restart.always and any(g.completes_job for g in self.groups):
            raise ValueError(
                "completes_job ends the job once a task group has exited 0, restart.always "
                "restarts it after every exit 0: give one or the other"
            )
        narrowed = [g.name for g in self.groups if g.retry_exits != "all"]
        if narrowed and not self.restart.retry_application_failures:
            raise ValueError(
                f"group {narrowed[0]!r}: retry_exits says which failing exits restart the job, "
                "and restart.retry_application_failures (false) restarts none: set it true"
            )
        if self.deadline is not None and self.walltime_s is None:
            raise ValueError(
                "a deadline needs a time limit (walltime_s): without one the job could not be "
                "known to end by it"
            )
        if self.deadline is not None and self.begin_time is not None:
            end = self.begin_time + (self.walltime_s or 0.0)
            if end > self.deadline:
                raise ValueError(
                    "the begin time and the deadline are incompatible: starting at its begin "
                    "time, the job would not end by its deadline"
                )
        return self

    @property
    def task_count(self) -> int:
        return sum(g.replicas for g in self.groups)

    def identified(self) -> JobRequest:
        """A copy with ``type`` and every group's ``launcher`` filled in (explicit ones kept)."""
        from fusesched.submit.identify import identify_type, infer_launcher

        groups = [
            g if g.launcher is not None else g.model_copy(update={"launcher": infer_launcher(g)})
            for g in self.groups
        ]
        return self.model_copy(update={"type": identify_type(self), "groups": groups})

    def to_job_spec(self, job_id: str, submit_time: float) -> JobSpec:
        """The core's view of this request (type identified when not given).

        Nothing is expanded: an array stays one ``JobSpec`` (see ``JobSpec.expand_array``).
        The run fields (argv, script,
        env, …) are not part of ``JobSpec``; they stay in the request.
        """
        from fusesched.submit.identify import identify_type

        try:
            return JobSpec(
                id=job_id,
                task_groups=tuple(g.to_task_group() for g in self.groups),
                type=identify_type(self),
                name=self.name,
                tenant=self.tenant,
                queue=self.queue,
                user=self.user,
                priority=self.priority,
                qos=QoS.SILVER if self.qos is None else self.qos,
                walltime_s=self.walltime_s,
                min_member=self.min_member,
                placement=self.placement.to_model(),
                dependencies=tuple(Dependency(d.kind, d.job_id) for d in self.dependencies),
                array=None
                if self.array is None
                else ArraySpec(
                    self.array.start, self.array.stop, self.array.step, self.array.max_parallel
                ),
                submit_time=submit_time,
                checkpoint_interval_s=self.checkpoint_interval_s,
                datasets=tuple(d.to_model() for d in self.datasets),
                begin_time=self.begin_time,
                reservation=self.reservation,
                licenses=tuple(sorted(self.licenses.items())),
                requeue=self.requeue,
                deadline=self.deadline,
            )
        except (ValueError, QuantityError) as exc:
            raise SubmitError(str(exc)) from exc

    def to_json(self) -> str:
        """The REST/store form: every field, defaults included (``attended`` and ``hetjob``
        only when true; ``submit_env``, ``submit_host``, ``slurm_options`` only when set)."""
        return self.model_dump_json()

    @classmethod
    def from_json(cls, text: str | bytes, source: str | None = None) -> JobRequest:
        """Parse the REST/store JSON form; errors as :class:`SubmitError`."""
        try:
            data = json.loads(text)
        except json.JSONDecodeError as exc:
            raise SubmitError(f"malformed JSON: {exc.msg}", source=source, line=exc.lineno) from exc
        if not isinstance(data, Mapping):
            raise SubmitError("a job request must be a JSON object", source=source)
        return parse_request(data, source=source)


def _runs_once(request: JobRequest) -> None:
    """A job on a pseudo-terminal runs once, as Slurm's ``srun --pty`` job (never requeued):
    its terminal is relayed to the one ``run --pty`` attached to that run, which a new run
    would leave waiting while a shell nobody can reach runs on. Sets ``requeue`` false and
    ``restart.max_restarts`` 0, whatever the request said (so the stored request says what
    the job does: a preemption cancels it, a node failure fails it, requeue is refused)."""
    object.__setattr__(request, "requeue", False)  # (frozen: set once here, as ``always``)
    update = {"max_restarts": 0}
    object.__setattr__(request, "restart", request.restart.model_copy(update=update))


def _hetjob_problem(request: JobRequest) -> str | None:
    """Why ``request`` cannot be a heterogeneous job (None: it can)."""
    if len(request.groups) < 2:
        return "a heterogeneous job (hetjob) needs two task groups or more, one per component"
    if not request.slurm_env:
        return "a heterogeneous job needs slurm_env: true (srun --het-group runs its steps)"
    if request.array is not None:
        return "job arrays of heterogeneous jobs are not supported (as with Slurm)"
    if request.min_member is not None:
        return "a heterogeneous job starts whole: min_member cannot be given with hetjob"
    return None


_ALL_FIELDS: Final = sorted(
    {
        name
        for model in (
            JobRequest,
            TaskGroupRequest,
            PlacementRequest,
            LabelRequirementRequest,
            PreferredTermRequest,
            TopologyRequest,
            ArrayRequest,
            DependencyRequest,
            JobSignal,
            NotifyRequest,
            *PROBE_MODELS,
        )
        for name in model.model_fields
    }
)


def parse_request(
    data: Mapping[str, object],
    *,
    source: str | None = None,
    locate: Callable[[Loc], int | None] | None = None,
    rename: Callable[[Loc], Loc] | None = None,
) -> JobRequest:
    """Validate a mapping as a :class:`JobRequest`; problems raise :class:`SubmitError`.

    ``rename`` maps a field path such as ``("groups", 0, "argv")`` to the path the user wrote
    (``("command",)``); ``locate`` maps that to a line in ``source``.
    """
    try:
        return JobRequest.model_validate(dict(data))
    except ValidationError as exc:
        raise submit_error_from(
            exc, _ALL_FIELDS, source=source, locate=locate, rename=rename
        ) from None


@dataclass(frozen=True, slots=True)
class ParsedJob:
    """A job read from a submission file, with what was ignored in it (never silently)."""

    request: JobRequest
    warnings: tuple[str, ...] = ()


def _utf8(text: str) -> bool:
    """Whether ``text`` is UTF-8 text (no lone surrogate, which JSON's ``\\udc80`` escape
    or a command line's undecodable bytes give: no launch holding it could be sent)."""
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        return False
    return True
