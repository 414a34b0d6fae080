"""A task group of a job request: ``replicas`` identical tasks, each with its resources and the
program it runs (argv or a script, environment, working folder, image, ports, launcher, probes).

:class:`TaskGroupRequest` validates what one group may hold on its own; what concerns the groups
together (unique names, ``min_member``) is :class:`~fusesched.submit.request.JobRequest`'s.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from enum import StrEnum
from typing import Annotated, Final

from pydantic import Field, field_validator, model_validator

from fusesched.model.job import TaskGroup
from fusesched.model.resources import QuantityError, Resources, parse_quantity
from fusesched.model.text import is_env_name
from fusesched.submit.label_terms import GroupPlacementRequest
from fusesched.submit.probes import LivenessProbe, Probe
from fusesched.submit.resource_names import resource_name
from fusesched.submit.strict_model import StrictModel

_TARBALL_SUFFIXES: Final = (".tar", ".tar.gz", ".tgz", ".tar.xz", ".tar.zst")
# an OCI image reference: [registry[:port]/]path[:tag][@digest], lower-case path components
_IMAGE_REF_RE: Final = re.compile(
    r"^(?:[a-zA-Z0-9.-]+(?::[0-9]+)?/)?[a-z0-9]+(?:[._-][a-z0-9]+)*(?:/[a-z0-9]+(?:[._-][a-z0-9]+)*)*"
    r"(?::[\w][\w.-]{0,127})?(?:@sha256:[0-9a-f]{64})?$"
)


class Launcher(StrEnum):
    """How the platform starts the tasks of a group (which rendezvous it prepares)."""

    NONE = "none"  # each task runs argv/script as is
    TORCHRUN = "torchrun"  # MASTER_ADDR/PORT, WORLD_SIZE, RANK for torch.distributed
    DEEPSPEED = "deepspeed"  # a hostfile and the same rendezvous variables
    MPI = "mpi"  # a hostfile / host list for mpirun or srun


class RetryExits(StrEnum):
    """Which failing exits of a group's tasks the job's ``restart.retry_application_failures``
    retries."""

    ALL = "all"  # any non-zero exit
    # only a task killed by a signal: exit 128-255 (a container's 128+N; 137 SIGKILL, 143
    # SIGTERM) or a process ended by one; 1-127 are permanent errors that fail the job
    # (Kubeflow's restartPolicy ExitCode)
    SIGNALS = "signals"
    # none: any failing exit fails the job (Kubeflow's restartPolicy Never beside a replica
    # type that restarts)
    NEVER = "never"

    def retries(self, code: int) -> bool:
        """Whether a failing exit with ``code`` (-N: killed by signal N) is retried."""
        if self is RetryExits.SIGNALS:
            return code < 0 or code >= 128
        return self is RetryExits.ALL


class TaskGroupRequest(StrictModel):
    """``replicas`` identical tasks, each needing ``resources`` and running argv or script."""

    name: Annotated[
        str, Field(min_length=1, max_length=63, pattern=r"^[A-Za-z0-9][-A-Za-z0-9_.]*$")
    ] = "main"
    replicas: Annotated[int, Field(ge=1)] = 1
    resources: dict[str, str]
    argv: list[str] = Field(default_factory=list)
    script: str | None = None
    env: dict[str, str] = Field(default_factory=dict)
    workdir: str | None = None
    image: str | None = None
    ports: list[Annotated[int, Field(ge=1, le=65535)]] = Field(default_factory=list)
    launcher: Launcher | None = None
    # probes the agents run on each task (submit/probes.py); None: none (left out of the JSON)
    liveness: LivenessProbe | None = Field(default=None, exclude_if=lambda value: value is None)
    readiness: Probe | None = Field(default=None, exclude_if=lambda value: value is None)
    # the job is complete once every task of this group has exited 0: its other tasks are
    # stopped (Volcano's TaskCompleted → CompleteJob; controller/completion.py). Dumped only
    # when true, as an older controller refuses it
    completes_job: bool = Field(default=False, exclude_if=lambda value: not value)
    # which of its tasks' failing exits restart the job (with restart.retry_application_failures;
    # controller/endings.py). Dumped only when not "all", as an older controller refuses it
    retry_exits: RetryExits = Field(
        default=RetryExits.ALL, exclude_if=lambda value: value is RetryExits.ALL
    )
    # label filters of its own, which its nodes meet besides the job's placement (a hetjob
    # component's -C/-w/-x, a Kubeflow replica's nodeSelector; submit/label_terms.py).
    # Dumped only when given, as an older controller refuses it
    placement: GroupPlacementRequest | None = Field(
        default=None, exclude_if=lambda value: value is None
    )

    @field_validator("resources", mode="before")
    @classmethod
    def _parse_resources(cls, value: object) -> object:
        """Canonical names and quantities (``{"gpu": 1}`` → ``{"nvidia.com/gpu": "1"}``)."""
        if not isinstance(value, Mapping):
            return value  # pydantic reports the type error
        merged: dict[str, int] = {}
        for raw_name, amount in value.items():
            name = resource_name(str(raw_name))
            if name in merged:
                raise ValueError(f"resource {name!r} is given twice")
            if not isinstance(amount, str | int | float):
                raise ValueError(f"{name}: a quantity must be a number or a string like '64Gi'")
            try:
                merged[name] = parse_quantity(name, amount)
            except QuantityError as exc:
                raise ValueError(str(exc)) from None
        resources = Resources(merged)
        if not resources:
            raise ValueError("a task must request some resource (for example cpu: 1)")
        return resources.to_spec()

    @field_validator("argv")
    @classmethod
    def _argv(cls, argv: list[str]) -> list[str]:
        if argv and not argv[0]:
            raise ValueError("the program (argv[0]) must not be empty")
        return argv

    @field_validator("env")
    @classmethod
    def _env(cls, env: dict[str, str]) -> dict[str, str]:
        for name in env:
            if not is_env_name(name):
                raise ValueError(f"invalid environment variable name {name!r}")
        return env

    @field_validator("image")
    @classmethod
    def _image(cls, image: str | None) -> str | None:
        if image is not None and not image.startswith("/") and not _IMAGE_REF_RE.match(image):
            raise ValueError(
                f"image {image!r}: give the absolute path of a root filesystem directory or "
                f"tarball ({', '.join(_TARBALL_SUFFIXES)}) on the nodes, or a registry "
                "reference such as docker.io/library/python:3.11 (run only by Kubernetes pools)"
            )
        return image

    @property
    def registry_image(self) -> bool:
        """True when ``image`` names a registry image (pulled by a Kubernetes pool only)."""
        return self.image is not None and not self.image.startswith("/")

    @field_validator("ports")
    @classmethod
    def _ports(cls, ports: list[int]) -> list[int]:
        if len(set(ports)) != len(ports):
            raise ValueError("ports must be unique")
        return ports

    @model_validator(mode="after")
    def _one_program(self) -> TaskGroupRequest:
        if self.argv and self.script is not None:
            raise ValueError(f"group {self.name!r}: give argv or script, not both")
        if not self.argv and not (self.script and self.script.strip()):
            raise ValueError(f"group {self.name!r}: give argv (a command) or script to run")
        return self

    @property
    def resource_amounts(self) -> Resources:
        return Resources.parse(self.resources)

    def to_task_group(self) -> TaskGroup:
        placement = None if self.placement is None else self.placement.to_model()
        return TaskGroup(self.name, self.replicas, self.resource_amounts, placement)
