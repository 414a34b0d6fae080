"""Which nodes cache which datasets, and how much of a job's data each node holds.

Agents report the datasets their local cache holds complete (``NodeDatasets``); placement adds
a locality bonus per node — the share of the job's dataset bytes cached there, times
``CoreConfig.data_locality_weight`` — to the placement policy's score, so locality is weighed
against packing rather than overriding it. With ``CoreConfig.data_locality_wait_s`` > 0 a job
whose data some node caches first tries only such nodes, for at most that long after it was
queued (delay scheduling); after that, or when no node caches any of its data, every feasible
node is fair game. A job is never held back longer than the wait.
"""

from __future__ import annotations

import numpy as np
import numpy.typing as npt

from fusesched.core.cluster import ClusterArrays
from fusesched.core.placement import PREFERENCE_SCALE
from fusesched.model.job import Dataset, JobSpec

FloatArray = npt.NDArray[np.float64]
BoolArray = npt.NDArray[np.bool_]


class DataIndex:
    """Per dataset name, the node rows whose cache holds it."""

    def __init__(self) -> None:
        self._holders: dict[str, set[int]] = {}
        self._node_sets: dict[int, frozenset[str]] = {}

    def __bool__(self) -> bool:
        return bool(self._holders)

    def report(self, row: int, datasets: frozenset[str]) -> bool:
        """Node ``row`` now holds exactly ``datasets``; returns whether anything changed."""
        old = self._node_sets.get(row, frozenset())
        if old == datasets:
            return False
        for name in old - datasets:
            holders = self._holders[name]
            holders.discard(row)
            if not holders:
                del self._holders[name]
        for name in datasets - old:
            self._holders.setdefault(name, set()).add(row)
        self._node_sets[row] = datasets
        return True

    def holders(self, name: str) -> frozenset[int]:
        return frozenset(self._holders.get(name, ()))

    def locality(self, datasets: tuple[Dataset, ...], size: int) -> FloatArray | None:
        """Per node row (of ``size``), the share of the datasets' bytes its cache holds (0-1);
        None when no node holds any of them. Datasets of unknown size count one byte each."""
        if not datasets or not self._holders:
            return None
        weights = [max(d.size_bytes, 1) for d in datasets]
        total = float(sum(weights))
        out: FloatArray | None = None
        for dataset, weight in zip(datasets, weights, strict=True):
            rows = self._holders.get(dataset.name)
            if not rows:
                continue
            if out is None:
                out = np.zeros(size, dtype=np.float64)
            out[list(rows)] += weight / total
        return out

    def mask(self, datasets: tuple[Dataset, ...], size: int) -> BoolArray | None:
        """Node rows holding at least one of the datasets; None when none does."""
        share = self.locality(datasets, size)
        return None if share is None else share > 0


def node_bonus(
    cluster: ClusterArrays, data: DataIndex, spec: JobSpec, weight: float
) -> tuple[FloatArray | None, BoolArray | None]:
    """A bonus per node (higher is taken first) and the nodes caching some of the job's data
    (None: none does). The bonus: preferred label terms, far above any placement score, plus
    the share of the job's dataset bytes cached on the node times ``weight`` (so locality is
    weighed against the placement score)."""
    terms = cluster.preference(spec.placement)
    bonus: FloatArray | None = None
    if terms is not None:
        bonus = terms.astype(np.float64) * PREFERENCE_SCALE
    if not spec.datasets or not data:
        return bonus, None
    share = data.locality(spec.datasets, cluster.size)
    if share is None:
        return bonus, None
    holders: BoolArray = share > 0
    share *= weight
    return (share if bonus is None else bonus + share), holders
