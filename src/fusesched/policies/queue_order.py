"""Queue-order policies: which waiting job the scheduling cycle considers first.

Each policy maps a job's facts to a key tuple; lower sorts first and the job's arrival sequence
breaks every tie, so ordering is total and deterministic. The HPC heuristics (FCFS, SJF, F1,
WFP3, UNICEP and their textbook variants) come from :mod:`fusesched.policies.hpc_keys`, which
the RLScheduler protocol replay uses too.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from typing import NamedTuple

import numpy as np
import numpy.typing as npt

from fusesched.policies.hpc_keys import HPC_KEYS, HpcKey
from fusesched.policies.learned import model as learned

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
    shipped = learned.shipped_key()  # the model file is read on first use, not here
    orders["learned"] = QueueOrder("learned", shipped.description, True, shipped)
    return orders


class _Orders(Mapping[str, QueueOrder]):
    """The registered orders, plus ``learned:PATH`` for a saved learned policy (a data file of
    weights, validated when first looked up; see docs/LEARNED_POLICY.md). Iteration lists the
    registered names only."""

    def __init__(self, orders: dict[str, QueueOrder]) -> None:
        self._orders = orders

    def __getitem__(self, name: str) -> QueueOrder:
        order = self._orders.get(name)
        if order is not None:
            return order
        if isinstance(name, str) and name.startswith(learned.PREFIX):
            key = learned.key_for_name(name)  # LearnedPolicyError for a bad file
            return QueueOrder(name, key.description, True, key)
        raise KeyError(name)

    def __contains__(self, name: object) -> bool:
        if name in self._orders:
            return True
        if isinstance(name, str) and name.startswith(learned.PREFIX):
            self[name]  # a bad file raises LearnedPolicyError with its reason
            return True
        return False

    def __iter__(self) -> Iterator[str]:
        return iter(self._orders)

    def __len__(self) -> int:
        return len(self._orders)


QUEUE_ORDERS: Mapping[str, QueueOrder] = _Orders(_build())
