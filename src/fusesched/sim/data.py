"""Datasets in the simulator: node-local caches, transfer times, bytes from shared storage.

The model (documented with the figures in docs/DATA.md):

* every job reads one dataset ``passes`` times (epochs); each node of the job reads all of it;
* a node whose cache holds the dataset reads it from local disk (``local_bps``);
* ``mode="none"`` — no caches (compute separated from storage, the status quo): every pass
  streams from shared storage (``shared_bps`` per node);
* ``mode="cache"`` — node caches with LRU eviction (``cache_bytes`` per node): a node without
  a copy reads the first pass from shared storage and keeps it (read-through), later passes
  are local; a dataset larger than the cache is always streamed;
* the job's run time = its trace run time (compute) + the slowest node's reading time.

The core is told what each cache holds (``NodeDatasets``) as it changes, so data-aware
placement (``CoreConfig.data_locality_weight``/``data_locality_wait_s``) can prefer the nodes
that hold a job's data; with ``data_locality_weight=0`` placement ignores it (caches still fill
by chance). Bandwidths are per node and constant: contention at the shared storage is not
modelled, which understates what locality saves on a busy system.
"""

from __future__ import annotations

from collections import OrderedDict
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

import numpy as np

from fusesched.model.events import NodeDatasets, StartJob
from fusesched.model.job import Dataset, JobSpec

if TYPE_CHECKING:
    from fusesched.core.scheduler import SchedulerCore

MODES = ("none", "cache")


@dataclass(frozen=True)
class DataModel:
    mode: str = "cache"
    shared_bps: float = 1.25e9  # bytes/s a node reads from shared storage (10 Gb/s)
    local_bps: float = 3.0e9  # bytes/s from its local NVMe cache
    cache_bytes: int = 2 * 2**40  # per node
    passes: int = 3  # times a job reads its dataset

    def __post_init__(self) -> None:
        if self.mode not in MODES:
            raise ValueError(f"unknown data mode {self.mode!r}; choose from {MODES}")
        if self.shared_bps <= 0 or self.local_bps <= 0:
            raise ValueError("bandwidths must be positive")
        if self.cache_bytes < 0 or self.passes < 1:
            raise ValueError("cache size must be >= 0 and passes >= 1")


@dataclass
class DataReport:
    shared_bytes: int = 0  # read from shared storage
    local_bytes: int = 0  # read from node caches
    hits: int = 0  # node-reads served by a cached copy
    misses: int = 0
    evictions: int = 0
    io_seconds: float = 0.0  # reading time added to jobs (the slowest node of each)


@dataclass
class _Cache:
    capacity: int
    held: OrderedDict[str, int] = field(default_factory=OrderedDict)  # name -> bytes, LRU first
    used: int = 0


class DataSim:
    """Per-node LRU caches and the reading time of each job as it starts."""

    def __init__(self, model: DataModel) -> None:
        self.model = model
        self.report = DataReport()
        self._caches: dict[str, _Cache] = {}

    def _cache(self, node: str) -> _Cache:
        cache = self._caches.get(node)
        if cache is None:
            cache = self._caches[node] = _Cache(self.model.cache_bytes)
        return cache

    def started(self, core: SchedulerCore, decision: StartJob, now: float, runtime: float) -> float:
        """The job starts on ``decision``'s nodes: its run time with the reading added, and
        the caches (and the core's view of them) updated."""
        datasets = core.jobs[decision.job_id].spec.datasets
        if not datasets:
            return runtime
        nodes = sorted({name for group in decision.groups for name in group.nodes})
        slowest = 0.0
        for name in nodes:
            seconds = sum(self._read(core, name, d, now) for d in datasets)
            slowest = max(slowest, seconds)
        self.report.io_seconds += slowest
        return runtime + slowest

    def _read(self, core: SchedulerCore, node: str, dataset: Dataset, now: float) -> float:
        m = self.model
        size, report = dataset.size_bytes, self.report
        if m.mode == "none" or size > m.cache_bytes:
            report.shared_bytes += m.passes * size
            report.misses += 1
            return m.passes * size / m.shared_bps
        cache = self._cache(node)
        if dataset.name in cache.held:
            cache.held.move_to_end(dataset.name)
            report.local_bytes += m.passes * size
            report.hits += 1
            return m.passes * size / m.local_bps
        report.misses += 1
        report.shared_bytes += size
        report.local_bytes += (m.passes - 1) * size
        while cache.used + size > cache.capacity and cache.held:
            _, freed = cache.held.popitem(last=False)
            cache.used -= freed
            report.evictions += 1
        cache.held[dataset.name] = size
        cache.used += size
        core.handle(NodeDatasets(node, frozenset(cache.held)), now)
        return size / m.shared_bps + (m.passes - 1) * size / m.local_bps

    def within_capacity(self) -> bool:
        return all(c.used <= c.capacity for c in self._caches.values())


def zipf_datasets(
    count: int, seed: int, *, min_bytes: int = 2**30, max_bytes: int = 500 * 2**30
) -> list[Dataset]:
    """``count`` datasets with log-uniform sizes between ``min_bytes`` and ``max_bytes``."""
    rng = np.random.default_rng(seed)
    sizes = np.exp(rng.uniform(np.log(min_bytes), np.log(max_bytes), count)).astype(np.int64)
    return [Dataset(f"d{i:04d}", f"/shared/datasets/d{i:04d}", int(s)) for i, s in enumerate(sizes)]


def assign_datasets(
    specs: list[JobSpec], datasets: list[Dataset], seed: int, exponent: float = 1.1
) -> list[JobSpec]:
    """Each job reads one dataset drawn by Zipf popularity (rank k with weight k^-exponent),
    the same draw for the same seed."""
    from dataclasses import replace

    rng = np.random.default_rng(seed)
    weights = np.arange(1, len(datasets) + 1, dtype=np.float64) ** -exponent
    picks = rng.choice(len(datasets), size=len(specs), p=weights / weights.sum())
    return [replace(s, datasets=(datasets[int(k)],)) for s, k in zip(specs, picks, strict=True)]
