"""What a deep-learning (DL) scheduling policy sees and how it answers.

The DL protocol (:mod:`fusesched.sim.dl`) keeps one row per job in NumPy arrays. A policy is
given a :class:`DlView` of the *observable* columns only — submit time, GPUs, state, attained
service, executed time, wait since the job last became runnable — and never the job's duration:
the view has no such column. Only ``sjf-oracle`` is handed the durations, by its constructor,
as an explicit upper-bound reference.

A policy answers with an order of the active (waiting or running) jobs, best first. A
preemptive policy's order decides which jobs *should* run; the protocol preempts the others at
their next checkpoint boundary. A non-preemptive policy only orders the waiting jobs. A policy
may also carry ``consolidate = True``: the runner then moves its jobs that run on a spread
placement to a consolidated one at a checkpoint when one is free (placement, not order, so it
is an attribute the runner reads, not part of the protocol below).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Protocol

import numpy as np
import numpy.typing as npt

FloatArray = npt.NDArray[np.float64]
IntArray = npt.NDArray[np.int64]
BoolArray = npt.NDArray[np.bool_]

# job states
NOT_ARRIVED, WAITING, RUNNING, DONE = 0, 1, 2, 3


@dataclass(frozen=True, slots=True)
class DlView:
    """Read-only observable job columns (length = number of jobs in the workload).

    ``attained`` is 2D attained service, GPU-seconds of useful progress (GPUs × progress
    seconds), current at the time of the call for running jobs. ``executed`` is the wall time
    the job has held GPUs so far (progress plus restart time). ``wait_since`` is when the job
    last became runnable (arrival or preemption). ``runs`` counts starts (a re-consolidating
    move counts as one). ``group`` numbers the virtual cluster (Philly VC, ITP cluster) a job
    was submitted to, in order of appearance.
    """

    submit: FloatArray
    gpus: IntArray
    state: npt.NDArray[np.int8]
    attained: FloatArray
    executed: FloatArray
    wait_since: FloatArray
    runs: IntArray
    group: IntArray
    total_gpus: int


class DlPolicy(Protocol):
    """A DL scheduling policy: an order of the active jobs, and what it learns from finishes."""

    name: str
    preemptive: bool  # may running jobs be preempted (at checkpoint boundaries)?
    strict: bool  # non-preemptive only: stop at the first waiting job that cannot start

    def order(self, now: float, view: DlView, active: IntArray) -> IntArray:
        """``active`` (job indices, ascending) reordered, best first."""
        ...

    def finished(self, now: float, view: DlView, job: int) -> None:
        """Job ``job`` completed at ``now`` (its full attained service is now known)."""
        ...


def by_keys(active: IntArray, *keys: npt.NDArray[np.generic]) -> IntArray:
    """``active`` sorted by ``keys`` (aligned with ``active``; the first key most significant),
    ties by job index."""
    if len(active) == 0:
        return active
    order = np.lexsort((active, *reversed(keys)))
    return active[order]
