"""Queue-order policies: which waiting job the scheduling cycle considers first.

Each policy maps a job's facts to a key tuple; lower sorts first and the job's arrival sequence
breaks every tie, so ordering is total and deterministic. The HPC heuristics (FCFS, SJF, F1,
WFP3, UNICEP and their textbook variants) come from :mod:`fusesched.policies.hpc_keys`, which
the RLScheduler protocol replay uses too.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import NamedTuple

import numpy as np
import numpy.typing as npt

from fusesched.policies.hpc_keys import HPC_KEYS, HpcKey

FloatArray = npt.NDArray[np.float64]


class JobFacts(NamedTuple):
    """What queue ordering may look at: submit time, runtime estimate, size, importance.

    (A named tuple: immutable, and built cheaply once per submitted job.)"""

    submit: float
    estimate: float
    procs: float
    priority: int
    qos_rank: int


@dataclass(frozen=True, slots=True)
class FactArrays:
    submit: FloatArray
    estimate: FloatArray
    procs: FloatArray
    priority: FloatArray
    qos_rank: FloatArray


@dataclass(frozen=True)
class QueueOrder:
    """A named ordering. ``dynamic`` keys depend on the current time and are recomputed."""

    name: str
    description: str
    dynamic: bool
    hpc: HpcKey | None = None
    multifactor: bool = False  # keys come from the tenancy's multifactor priority

    def key(self, facts: JobFacts, now: float) -> tuple[float, ...]:
        if self.hpc is not None:
            return self.hpc.scalar(facts.submit, facts.estimate, int(facts.procs), now)
        return (-float(facts.qos_rank), -float(facts.priority), facts.submit)

    def keys(self, facts: FactArrays, now: float) -> tuple[FloatArray, ...]:
        """Vector form of :meth:`key`: one array per key element (primary first)."""
        if self.hpc is not None:
            return self.hpc.vector(facts.submit, facts.estimate, facts.procs.astype(np.int64), now)
        return (-facts.qos_rank, -facts.priority, facts.submit)


def _build() -> dict[str, QueueOrder]:
    orders = {
        name: QueueOrder(name, key.description, key.dynamic, key) for name, key in HPC_KEYS.items()
    }
    orders["priority"] = QueueOrder(
        "priority",
        "QoS tier first (gold, silver, bronze), then job priority, then submit time",
        dynamic=False,
    )
    orders["multifactor"] = QueueOrder(
        "multifactor",
        "highest multifactor priority first: age, fair share, size, QoS and job priority "
        "(Slurm's priority/multifactor; needs a tenancy configuration for fair share)",
        dynamic=True,
        multifactor=True,
    )
    return orders


QUEUE_ORDERS: Mapping[str, QueueOrder] = _build()
