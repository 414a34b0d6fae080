"""What the controller asks of an external cluster it uses as a pool (Slurm, Kubernetes).

fusesched schedules every job itself — one queue, one quota, one fair share — and places it on
nodes; the nodes of an external cluster appear to the scheduling core as ordinary nodes
labelled with their pool (:data:`~fusesched.model.node.LABEL_POOL`). When the core starts a
job on such nodes, the controller hands it to the pool's :class:`Backend`, which turns it into
the cluster's own objects (an ``sbatch`` job, a Volcano Job) and reports back how it runs.

A back end is a blocking driver with no threads of its own; ``controller/remote.py`` runs it in
a worker thread, so a slow or dead cluster never stalls the scheduling loop. Its methods raise
:class:`BackendUnavailable` when the cluster cannot be reached (the job is not its fault: it
goes back to the queue) and :class:`BackendRejected` when the cluster refuses the job (the job
fails with the cluster's reason).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from enum import StrEnum
from typing import Protocol

from fusesched.model.resources import Resources
from fusesched.submit.request import JobRequest


class BackendError(Exception):
    """A back end could not do what was asked; the message says why, for the user."""


class BackendUnavailable(BackendError):
    """The cluster cannot be reached (daemon down, API server unreachable, timeout)."""


class BackendRejected(BackendError):
    """The cluster refused this job (an invalid option, a limit, an unknown partition)."""


@dataclass(frozen=True, slots=True)
class RemoteNode:
    """One node (or node group) of an external cluster as the scheduling core should see it.

    ``name`` is the cluster's own node name; the controller prefixes it with the pool's name
    so it cannot collide with a local agent's node. ``capacity`` is what fusesched may use
    there; ``labels`` are copied to the core's node (partition, architecture, features).
    ``up`` is False for nodes the cluster reports down or drained.
    """

    name: str
    capacity: Resources
    labels: Mapping[str, str] = field(default_factory=dict)
    up: bool = True


@dataclass(frozen=True, slots=True)
class RemotePlacement:
    """Where the core put one task group: node name (the cluster's own) → tasks there."""

    group: str
    tasks_per_node: Mapping[str, int]
    resources: Resources  # per task, as the core booked it


@dataclass(frozen=True, slots=True)
class RemoteJob:
    """A job the core started on a pool's nodes, as the back end needs it.

    ``request`` is the user's request (argv or script, env, workdir, image, walltime,
    launcher); ``placements`` are the core's decision per group, on the cluster's own node
    names. ``log_dir`` is a folder the controller can read where the back end should have the
    job's stdout and stderr written (Slurm: ``--output``/``--error``), or ``None`` when the back
    end collects logs itself (Kubernetes).
    """

    job_id: str
    request: JobRequest
    placements: tuple[RemotePlacement, ...]
    env: Mapping[str, str] = field(default_factory=dict)  # FUSESCHED_* variables for the job
    log_dir: str | None = None
    run: str = ""  # this run's id (``<job>`` or ``<job>-r<attempt>``): its files are its own

    @property
    def run_id(self) -> str:
        return self.run or self.job_id

    @property
    def nodes(self) -> tuple[str, ...]:
        seen: dict[str, None] = {}
        for placement in self.placements:
            for node in placement.tasks_per_node:
                seen.setdefault(node)
        return tuple(seen)

    @property
    def gang(self) -> bool:
        """True when several tasks must start together."""
        return sum(sum(p.tasks_per_node.values()) for p in self.placements) > 1


class RemoteState(StrEnum):
    """The one state model every back end's job states map onto."""

    PENDING = "pending"  # accepted, waiting inside the cluster (its own queue, image pull)
    RUNNING = "running"
    SUCCEEDED = "succeeded"
    FAILED = "failed"  # non-zero exit, node failure, out of memory, time limit
    CANCELLED = "cancelled"
    LOST = "lost"  # the cluster no longer knows the job and left no final record

    @property
    def terminal(self) -> bool:
        return self not in (RemoteState.PENDING, RemoteState.RUNNING)


@dataclass(frozen=True, slots=True)
class RemoteStatus:
    """What the cluster says about one job it runs for us."""

    external_id: str
    state: RemoteState
    exit_code: int | None = None
    reason: str = ""  # the cluster's own words (Slurm's Reason, a pod's message)
    start_time: float | None = None  # epoch seconds, when the cluster says
    end_time: float | None = None
    nodes: tuple[str, ...] = ()  # where it ran, in the cluster's own names
    timed_out: bool = False
    node_failed: bool = False  # the cluster ended it because a node of it failed (NODE_FAIL)
    # the cluster's OOM killer ended it (Slurm's OUT_OF_MEMORY, a container OOMKilled)
    out_of_memory: bool = False


class Backend(Protocol):
    """A driver for one external cluster. Blocking calls; raise BackendError subclasses."""

    kind: str  # "slurm", "kubernetes"

    def nodes(self) -> Sequence[RemoteNode]:
        """The cluster's nodes and what fusesched may use on each."""
        ...

    def submit(self, job: RemoteJob) -> str:
        """Hand the job to the cluster; returns the cluster's id for it."""
        ...

    def cancel(self, external_id: str) -> None:
        """Stop the job (idempotent: cancelling a finished job is not an error)."""
        ...

    def poll(self, external_ids: Sequence[str]) -> Sequence[RemoteStatus]:
        """The state of each job named (one per id the cluster or its records still know;
        an id left out has vanished without a record, which the caller treats as LOST)."""
        ...

    def release(self, external_id: str) -> None:
        """The job has ended and its final state and output are stored: free what the
        cluster still keeps for it (Kubernetes objects); nothing for Slurm."""
        ...

    def logs(self, external_id: str, job: RemoteJob) -> Mapping[str, bytes]:
        """The job's output so far, by stream name ("stdout", "stderr" or "<task>.stdout"):
        whole contents; the caller keeps what it has already stored."""
        ...
