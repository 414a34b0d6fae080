"""Small snapshots for the twin's tests: a few nodes and a seeded job history."""

from __future__ import annotations

import numpy as np

from fusesched.twin.snapshot import SnapJob, SnapNode, Snapshot

T0 = 1_700_000_000.0


def nodes() -> list[SnapNode]:
    cpu = {"fusesched.io/pool": "cpu", "topology.fusesched.io/rack": "r1"}
    gpu = {
        "fusesched.io/pool": "gpu",
        "fusesched.io/gpu-model": "H200",
        "topology.fusesched.io/rack": "r2",
    }
    return [
        SnapNode(name="cpu-1", capacity={"cpu": "8", "memory": "32Gi"}, labels=cpu),
        SnapNode(name="cpu-2", capacity={"cpu": "8", "memory": "32Gi"}, labels=cpu),
        SnapNode(
            name="gpu-1",
            capacity={"cpu": "16", "memory": "64Gi", "nvidia.com/gpu": "4"},
            labels=gpu,
        ),
        SnapNode(
            name="gpu-2",
            capacity={"cpu": "16", "memory": "64Gi", "nvidia.com/gpu": "4"},
            labels=gpu,
        ),
    ]


TENANCY = {
    "organisations": [
        {
            "name": "acme",
            "tenants": [
                {"name": "research", "queues": [{"name": "train"}]},
                {"name": "ops", "queues": [{"name": "batch"}]},
            ],
        }
    ]
}


def snapshot(n: int = 60, seed: int = 1, tenancy: bool = False) -> Snapshot:
    """``n`` finished jobs (CPU and GPU, two tenants) submitted over a few minutes."""
    rng = np.random.default_rng(seed)
    jobs = []
    t = T0
    for i in range(n):
        t += float(rng.exponential(6.0))
        gpu = i % 3 == 0
        resources = {"cpu": str(int(rng.integers(1, 5))), "memory": "1Gi"}
        if gpu:
            resources["nvidia.com/gpu"] = str(int(rng.choice([1, 2, 4])))
        runtime = float(rng.integers(5, 60))
        tenant, queue = ("research", "train") if gpu else ("ops", "batch")
        request = {
            "name": f"j{i}",
            "tenant": tenant,
            "queue": queue,
            "user": f"u{i % 4}",
            "walltime_s": runtime * 2,
            "groups": [{"resources": resources, "argv": ["sleep", "1"]}],
        }
        jobs.append(
            SnapJob(
                id=str(i + 1),
                seq=i + 1,
                submit=t,
                start=t,  # only the run time matters to the twin
                end=t + runtime,
                state="Completed",
                exit_code=0,
                queue=queue,
                tenant=tenant,
                user=f"u{i % 4}",
                request=request,
            )
        )
    return Snapshot(
        created_at=T0 + 3600,
        source="test",
        nodes=nodes(),
        jobs=jobs,
        tenancy=TENANCY if tenancy else None,
    )
