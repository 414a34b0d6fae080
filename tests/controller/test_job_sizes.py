"""What a stored request asks for in all (controller/job_sizes.py: squeue's %C, %b, %D): over
several groups, with MIG slices and GPU shares beside whole GPUs, and odd requests unknown."""

from __future__ import annotations

import time
from typing import Any

from fusesched.controller.job_sizes import UNKNOWN, JobSize, job_size
from fusesched.submit.request import JobRequest


def stored(**request: Any) -> dict[str, Any]:
    """``request`` as the store keeps it (checked and dumped as the controller does)."""
    return JobRequest.model_validate(request).model_dump(mode="json", exclude_none=True)


def test_groups_add_up_with_every_accelerator() -> None:
    request = stored(
        groups=[
            {"name": "a", "replicas": 3, "resources": {"cpu": "500m", "gpu": "2"}, "argv": ["a"]},
            {
                "name": "b",
                "replicas": 2,
                "resources": {"cpus": "2", "nvidia.com/mig-1g.10gb": "1", "gpu-milli": "250"},
                "argv": ["b"],
            },
        ],
        placement={"max_tasks_per_node": 2},
    )
    assert job_size(request) == JobSize(
        cpus=5.5,
        gpus=6,
        min_nodes=3,
        accelerators={
            "fusesched.io/gpu-milli": 500,
            "nvidia.com/gpu": 6,
            "nvidia.com/mig-1g.10gb": 2,
        },
    )


def test_a_job_of_mig_slices_only_has_no_whole_gpus_but_its_slices() -> None:
    request = stored(groups=[{"resources": {"nvidia.com/mig-3g.40gb": "1"}, "argv": ["x"]}])
    size = job_size(request)
    assert (size.gpus, size.accelerators, size.min_nodes) == (0, {"nvidia.com/mig-3g.40gb": 1}, 1)


def test_an_exact_node_count_is_its_node_count() -> None:
    """``sbatch -N 3 -n 4``: three nodes (the cap of 2 a node alone said 2)."""
    group = {"replicas": 4, "resources": {"cpu": "1"}, "argv": ["x"]}
    request = stored(groups=[group], placement={"max_tasks_per_node": 2, "nodes": 3})
    assert job_size(request).min_nodes == 3


def test_odd_requests_are_unknown() -> None:
    for odd in (
        {},
        {"groups": "x"},
        {"groups": [{"replicas": "2", "resources": {}}]},
        {"groups": [{"resources": {"cpu": "lots"}}]},
        {"groups": [{"resources": {"fusesched.io/gpu-milli": "-1"}}]},
    ):
        assert job_size(odd) == UNKNOWN, odd


def test_a_thousand_jobs_are_sized_in_well_under_a_second() -> None:
    group = {"replicas": 4, "resources": {"cpu": "8", "memory": "32Gi", "gpu": "1"}, "argv": ["a"]}
    request = stored(groups=[{**group, "name": f"g{i}"} for i in range(3)])
    start = time.perf_counter()
    for _ in range(1000):
        job_size(request)
    assert time.perf_counter() - start < 0.5
