"""The simulator's dataset model: caches, transfer times, and data-aware placement measured."""

from __future__ import annotations

import pytest
from tests.builders import job, nodes

from fusesched.model.job import Dataset, JobSpec
from fusesched.policies.registry import CoreConfig
from fusesched.sim.data import DataModel, DataSim, assign_datasets, zipf_datasets
from fusesched.sim.engine import SimJob, Simulation

GB = 10**9


def data_job(job_id: str, at: float, dataset: Dataset, runtime: float = 100.0) -> SimJob:
    spec = job(job_id).tasks(1, cpu=4).walltime(runtime).at(at).build()
    return SimJob(JobSpec(**{**_fields(spec), "datasets": (dataset,)}), runtime)


def _fields(spec: JobSpec) -> dict[str, object]:
    return {name: getattr(spec, name) for name in spec.__dataclass_fields__}


A = Dataset("a", "/shared/a", 30 * GB)
B = Dataset("b", "/shared/b", 30 * GB)
MODEL = DataModel(shared_bps=1 * GB, local_bps=3 * GB, cache_bytes=50 * GB, passes=3)


def simulate(jobs: list[SimJob], model: DataModel, weight: float) -> tuple[Simulation, DataSim]:
    data = DataSim(model)
    sim = Simulation(nodes(2, cpu=4), jobs, CoreConfig(data_locality_weight=weight), data=data)
    sim.run()
    return sim, data


def test_transfer_times_by_mode() -> None:
    """No cache: 3 passes at 1 GB/s. Cache miss: 1 pass shared + 2 local. Hit: 3 local."""
    jobs = [data_job("1", 0, A), data_job("2", 500, A)]
    _, none = simulate(jobs, DataModel(mode="none", shared_bps=GB, local_bps=3 * GB), 1.0)
    assert none.report.io_seconds == pytest.approx(2 * 90.0)
    assert none.report.shared_bytes == 2 * 3 * A.size_bytes
    _, cached = simulate(jobs, MODEL, 1.0)
    miss, hit = 30.0 + 20.0, 30.0
    assert cached.report.io_seconds == pytest.approx(miss + hit)
    assert cached.report.shared_bytes == A.size_bytes
    assert (cached.report.hits, cached.report.misses) == (1, 1)


def test_data_aware_placement_finds_the_cached_copy() -> None:
    """Job 1 takes n0 and caches A there; job 2 finds n0 busy, takes n1 and caches B; job 3
    reads B when both are idle: first fit alone says n0, the data says n1."""
    jobs = [
        data_job("1", 0, A),  # n0, caches A
        data_job("2", 10, B),  # n1 (n0 busy), caches B
        data_job("3", 1000, B),  # both idle: first fit says n0, the data says n1
    ]
    _, blind = simulate(jobs, MODEL, 0.0)
    _, aware = simulate(jobs, MODEL, 1.0)
    assert blind.report.hits == 0 and aware.report.hits == 1
    assert aware.report.shared_bytes < blind.report.shared_bytes


def test_lru_eviction_keeps_caches_within_capacity() -> None:
    c = Dataset("c", "/shared/c", 30 * GB)
    jobs = [data_job(str(i), i * 1000, d) for i, d in enumerate([A, B, c, A])]
    _, data = simulate(jobs, MODEL, 0.0)
    assert data.within_capacity()
    assert data.report.evictions >= 2  # 50 GB holds one 30 GB dataset at a time


def test_a_dataset_bigger_than_the_cache_is_streamed() -> None:
    huge = Dataset("huge", "/shared/huge", 80 * GB)
    _, data = simulate([data_job("1", 0, huge), data_job("2", 1000, huge)], MODEL, 1.0)
    assert data.report.shared_bytes == 2 * 3 * huge.size_bytes
    assert data.report.hits == 0


def test_the_dataset_draw_is_seeded_and_skewed() -> None:
    datasets = zipf_datasets(50, seed=3)
    assert datasets == zipf_datasets(50, seed=3)
    assert all(2**30 <= d.size_bytes <= 500 * 2**30 for d in datasets)
    specs = [job(str(i)).build() for i in range(2000)]
    first = assign_datasets(specs, datasets, seed=4)
    assert first == assign_datasets(specs, datasets, seed=4)
    counts: dict[str, int] = {}
    for spec in first:
        counts[spec.datasets[0].name] = counts.get(spec.datasets[0].name, 0) + 1
    assert counts["d0000"] > counts.get("d0049", 0) * 5  # the most popular dominates


def test_bad_models_are_refused() -> None:
    with pytest.raises(ValueError, match="unknown data mode"):
        DataModel(mode="telepathy")
    with pytest.raises(ValueError, match="bandwidths"):
        DataModel(shared_bps=0)
