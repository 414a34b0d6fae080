"""Hang detection and restart decisions (pure: no I/O, no clock, no randomness).

**Hang detection.** :func:`detect_hang` reads a task's :class:`SampleWindow` over the last
``policy.window_s`` seconds and looks at independent signals:

=============  ==========================================================================
``io``         I/O bytes (storage and syscalls) grew by at most ``io_delta_bytes``
``log``        the output log grew by at most ``log_growth_bytes``
``checkpoint`` the newest checkpoint is unchanged in the window and older than
               ``checkpoint_age_s`` (only when the task has a checkpoint folder)
``gpu_util``   GPU utilisation variance at most ``gpu_util_variance`` (flat at 0 % *or* at
               100 %: a collective stuck in NCCL spins at full utilisation)
``gpu_memory`` GPU memory-used variance at most ``gpu_memory_variance`` (bytes²)
``cpu``        CPU time grew by at most ``cpu_seconds_delta`` (CPU-only tasks)
=============  ==========================================================================

**False-positive guard.** A task is hung only when *every* applicable signal is quiet and at
least ``min_signals`` of them apply:

* a task that does I/O, writes to its log or advances a checkpoint in the window is never hung
  (any one of these vetoes);
* a task with GPU readings must also have flat GPU utilisation *and* flat GPU memory;
* a task without GPU readings (CPU-only) must also have its CPU time not advancing — a
  compute-bound CPU job that prints nothing for an hour is busy, not hung. (Consequence: an MPI
  job hung in a busy-polling progress loop burns CPU and is *not* detected; its walltime ends
  it.)
* too little history (the samples do not cover ``window_s``, or the task has run less than
  ``startup_s``) is never a hang: start-up (loading data, compiling kernels) is quiet;
* job types whose quietness is normal (inference servers and services waiting for requests)
  have detection off by default (``enabled=False``).

**Restarts.** :func:`next_action` maps a :class:`Failure` and the attempts so far to an
:class:`Action` under a :class:`RestartPolicy`: notify only, restart in place, or requeue
excluding the failed node, within a retry budget and with exponential backoff.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass
from enum import StrEnum
from types import MappingProxyType

import numpy as np
import numpy.typing as npt

from fusesched.agent.sample_window import SampleWindow
from fusesched.model.job import JobType

MIB = 2**20


@dataclass(frozen=True, slots=True)
class HangPolicy:
    """Thresholds for one job type. A signal is *quiet* when its value is ≤ its threshold."""

    enabled: bool = True
    window_s: float = 1800.0
    startup_s: float = 600.0  # no verdict before the task has been sampled this long
    io_delta_bytes: float = 64 * 1024
    log_growth_bytes: float = 0.0
    checkpoint_age_s: float = 7200.0
    gpu_util_variance: float = 1.0  # (percentage points)²
    gpu_memory_variance: float = float(MIB) ** 2  # bytes²: ~1 MiB standard deviation
    cpu_seconds_delta: float = 1.0  # CPU-only tasks: CPU seconds in the whole window
    min_signals: int = 3
    coverage: float = 0.9  # the samples must span this share of the window

    def __post_init__(self) -> None:
        if self.window_s <= 0 or self.startup_s < 0:
            raise ValueError("window_s must be positive and startup_s not negative")
        if self.min_signals < 1:
            raise ValueError("min_signals must be at least 1")
        if not 0 < self.coverage <= 1:
            raise ValueError("coverage must be in (0, 1]")


#: Defaults per job type. Inference and services are often idle on purpose: off.
DEFAULT_HANG_POLICIES: Mapping[JobType, HangPolicy] = MappingProxyType(
    {
        JobType.AI_TRAIN: HangPolicy(window_s=1800.0, checkpoint_age_s=7200.0),
        JobType.HPC: HangPolicy(window_s=3600.0, checkpoint_age_s=4 * 3600.0),
        JobType.BATCH: HangPolicy(window_s=3600.0, checkpoint_age_s=4 * 3600.0),
        JobType.AI_INFER: HangPolicy(enabled=False),
        JobType.SERVICE: HangPolicy(enabled=False),
    }
)


@dataclass(frozen=True, slots=True)
class Signal:
    name: str
    quiet: bool
    value: float
    threshold: float

    def describe(self) -> str:
        state = "quiet" if self.quiet else "active"
        return f"{self.name} {state} ({self.value:.6g} vs ≤ {self.threshold:.6g})"


@dataclass(frozen=True, slots=True)
class Verdict:
    hung: bool
    signals: tuple[Signal, ...] = ()
    reason: str = ""


def _finite(values: npt.NDArray[np.float64]) -> npt.NDArray[np.float64]:
    return values[np.isfinite(values)]


def _growth(values: npt.NDArray[np.float64]) -> float:
    """Last minus first finite value (0 with fewer than two)."""
    finite = _finite(values)
    return float(finite[-1] - finite[0]) if finite.size >= 2 else 0.0


def _quiet(name: str, value: float, threshold: float) -> Signal:
    return Signal(name, value <= threshold, value, threshold)


def detect_hang(window: SampleWindow, policy: HangPolicy) -> Verdict:
    """Whether the task whose samples ``window`` holds looks hung under ``policy``."""
    if not policy.enabled:
        return Verdict(False, (), "hang detection is off for this job type")
    newest, oldest = window.newest_time, window.oldest_time
    if newest is None or oldest is None or len(window) < 2:
        return Verdict(False, (), "not enough samples")
    if newest - oldest < policy.startup_s:
        return Verdict(False, (), f"sampled for {newest - oldest:.0f} s < start-up grace")
    # from the newest sample at or before the window's start, so that the samples span the
    # whole window (those inside it alone fall one sampling interval short)
    start = newest - policy.window_s
    times_all = window.column("time")
    before = times_all[times_all <= start]
    cols = window.last(since=float(before[-1]) if before.size else start)
    times = cols["time"]
    if times[-1] - times[0] < policy.coverage * policy.window_s:
        return Verdict(False, (), "the samples do not cover the window yet")
    if cols["processes"][-1] == 0:
        return Verdict(False, (), "the task has no process left (it is ending, not hung)")

    signals = [
        _quiet("io", _growth(cols["io_bytes"]), policy.io_delta_bytes),
        _quiet("log", _growth(cols["log_bytes"]), policy.log_growth_bytes),
    ]
    ckpt = cols["checkpoint_mtime"]
    if np.isfinite(ckpt).any():  # the task has checkpoints: they must be old and unchanged
        age = newest - float(np.nanmax(ckpt))
        advanced = _growth(ckpt) > 0 or _growth(cols["checkpoint_bytes"]) != 0
        quiet = not advanced and age >= policy.checkpoint_age_s
        signals.append(Signal("checkpoint", quiet, age, policy.checkpoint_age_s))
    util = _finite(cols["gpu_util_pct"])
    if util.size >= 2:  # a GPU task: flat utilisation and flat memory
        signals.append(_quiet("gpu_util", float(np.var(util)), policy.gpu_util_variance))
        mem = _finite(cols["gpu_memory_bytes"])
        if mem.size >= 2:
            signals.append(_quiet("gpu_memory", float(np.var(mem)), policy.gpu_memory_variance))
    else:  # a CPU-only task: its CPU time must not advance either
        signals.append(_quiet("cpu", _growth(cols["cpu_seconds"]), policy.cpu_seconds_delta))
    if int(np.nanmax(cols["gpus_lost"])) > 0:
        return Verdict(False, tuple(signals), "a GPU of the task is lost: a hardware failure")

    active = [s for s in signals if not s.quiet]
    if active:
        return Verdict(False, tuple(signals), "active: " + ", ".join(s.describe() for s in active))
    if len(signals) < policy.min_signals:
        return Verdict(
            False,
            tuple(signals),
            f"only {len(signals)} signals apply, {policy.min_signals} must agree",
        )
    span = _duration(policy.window_s)
    reason = f"hung: no progress for {span}: " + ", ".join(s.describe() for s in signals)
    return Verdict(True, tuple(signals), reason)


def _duration(seconds: float) -> str:
    """``30 min``, ``2 h``, ``4 s``: whole minutes or hours when they are, else seconds."""
    if seconds >= 3600 and seconds % 3600 == 0:
        return f"{seconds / 3600:g} h"
    if seconds >= 60 and seconds % 60 == 0:
        return f"{seconds / 60:g} min"
    return f"{seconds:g} s"


# --- restarts ----------------------------------------------------------------------------


class FailureKind(StrEnum):
    HANG = "hang"
    NODE = "node"  # the node went down / stopped heartbeating
    GPU = "gpu"  # lost GPU, node-fatal XID, uncorrectable ECC
    TASK_LOST = "task-lost"  # the agent no longer lists the task
    LIVENESS = "liveness"  # its liveness probe failed: the agent stopped it (a service's fault)
    EXIT = "exit"  # the application exited non-zero
    OOM = "oom"
    WALLTIME = "walltime"
    CANCELLED = "cancelled"


#: Failures that are the infrastructure's, not the job's: a restart is likely to succeed.
INFRASTRUCTURE = frozenset(
    {FailureKind.HANG, FailureKind.NODE, FailureKind.GPU, FailureKind.TASK_LOST}
)


class RestartMode(StrEnum):
    NOTIFY = "notify"  # tell the owner; do not restart
    RESTART_IN_PLACE = "restart-in-place"  # same nodes (keeps data locality / reservations)
    REQUEUE_EXCLUDING_NODE = "requeue-excluding-node"  # back to the queue, not on that node


class ActionKind(StrEnum):
    NOTIFY = "notify"  # leave the job as it is (a hang keeps running) and tell the owner
    FAIL = "fail"  # end the job as failed (and tell the owner)
    RESTART_IN_PLACE = "restart-in-place"
    REQUEUE = "requeue"


@dataclass(frozen=True, slots=True)
class Failure:
    kind: FailureKind
    node: str | None = None  # where it happened, when known
    reason: str = ""


@dataclass(frozen=True, slots=True)
class RestartPolicy:
    mode: RestartMode = RestartMode.REQUEUE_EXCLUDING_NODE
    max_restarts: int = 3
    backoff_s: float = 30.0
    backoff_factor: float = 2.0
    max_backoff_s: float = 1800.0
    retry_application_failures: bool = False  # also restart after non-zero exits

    def __post_init__(self) -> None:
        if self.max_restarts < 0 or self.backoff_s < 0 or self.max_backoff_s < 0:
            raise ValueError("restart budget and backoffs must not be negative")
        if self.backoff_factor < 1:
            raise ValueError("backoff_factor must be at least 1")

    def backoff(self, attempts: int) -> float:
        """The delay before restart number ``attempts + 1``."""
        if self.backoff_s == 0:
            return 0.0
        exponent = min(attempts, 1000)
        try:
            delay = self.backoff_s * self.backoff_factor**exponent
        except OverflowError:
            delay = math.inf
        return min(delay, self.max_backoff_s)


@dataclass(frozen=True, slots=True)
class Action:
    kind: ActionKind
    delay_s: float = 0.0
    exclude_nodes: tuple[str, ...] = ()
    reason: str = ""
    attempt: int = 0  # the restart number this action starts (0 when none)


def next_action(failure: Failure, attempts: int, policy: RestartPolicy) -> Action:
    """What to do about ``failure`` after ``attempts`` restarts already made.

    * cancels and walltime ends are final (the user's own limits): FAIL;
    * application failures (non-zero exit, OOM) are FAIL unless the policy retries them (OOM
      never: the same request would fail the same way);
    * mode NOTIFY: a hang is left running and reported, anything else FAILs;
    * the retry budget exhausted: FAIL;
    * RESTART_IN_PLACE after a node or GPU failure becomes REQUEUE excluding that node (the
      hardware is broken: restarting there would fail again);
    * otherwise restart / requeue after ``policy.backoff(attempts)`` seconds.
    """
    if attempts < 0:
        raise ValueError("attempts must not be negative")
    what = failure.reason or failure.kind.value
    if failure.kind in (FailureKind.CANCELLED, FailureKind.WALLTIME):
        return Action(ActionKind.FAIL, reason=f"{what}: not restarted")
    if failure.kind is FailureKind.OOM or (
        failure.kind is FailureKind.EXIT and not policy.retry_application_failures
    ):
        return Action(ActionKind.FAIL, reason=f"{what}: an application failure, not restarted")
    if policy.mode is RestartMode.NOTIFY:
        kind = ActionKind.NOTIFY if failure.kind is FailureKind.HANG else ActionKind.FAIL
        return Action(kind, reason=f"{what}: restart policy is notify")
    if attempts >= policy.max_restarts:
        return Action(
            ActionKind.FAIL,
            reason=f"{what}: retry budget of {policy.max_restarts} restarts exhausted",
        )
    delay = policy.backoff(attempts)
    hardware = failure.kind in (FailureKind.NODE, FailureKind.GPU)
    if policy.mode is RestartMode.RESTART_IN_PLACE and not (hardware and failure.node):
        return Action(
            ActionKind.RESTART_IN_PLACE, delay, (), f"{what}: restart in place", attempts + 1
        )
    exclude = (failure.node,) if failure.node and failure.kind in INFRASTRUCTURE else ()
    return Action(ActionKind.REQUEUE, delay, exclude, f"{what}: requeued", attempts + 1)
