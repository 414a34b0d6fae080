"""Why a job waits, on a live cluster (real agents): squeue's ``%R`` shows ``(Resources)`` for
the first job in line and ``(Priority)`` for one behind it — per partition: a GPU job behind
them is the first of its own —; the reason goes once it starts."""

from __future__ import annotations

import time
from typing import Any

from tests.live.test_cli import fusesched

from fusesched.cli.local import LocalCluster
from fusesched.sdk import Client

CPU_POOL = {"node_selector": {"fusesched.io/pool": "cpu"}}  # node-a and node-b, 2 CPUs each
GPU_POOL = {"node_selector": {"fusesched.io/pool": "gpu"}}  # node-c, 2 GPUs


def _job(
    name: str, replicas: int, walltime_s: int, gpus: int = 0, **placement: Any
) -> dict[str, Any]:
    pool = GPU_POOL if gpus else CPU_POOL
    resources = {"cpu": "1", "nvidia.com/gpu": str(gpus)} if gpus else {"cpu": "2"}
    return {
        "name": name,
        "walltime_s": walltime_s,
        "placement": {**pool, **placement},
        "groups": [{"replicas": replicas, "resources": resources, "argv": ["sleep", "600"]}],
    }


def _wait_for(client: Client, job_id: str, key: str, value: str) -> dict[str, Any]:
    deadline = time.monotonic() + 20
    while (shown := client.show(job_id))[key] != value:
        assert time.monotonic() < deadline, shown
        time.sleep(0.1)
    return shown


def test_the_first_job_waits_for_resources_the_next_for_priority(cluster: LocalCluster) -> None:
    client = Client(cluster.url)
    busy = client.submit(_job("busy", 1, 600))  # one node of the pool taken, one free
    _wait_for(client, busy, "state", "Running")
    wide = client.submit(_job("wide", 2, 600, max_tasks_per_node=1))  # both nodes
    behind = client.submit(_job("behind", 1, 3600))  # would delay it: no backfill
    _wait_for(client, wide, "reason", "Resources")
    _wait_for(client, behind, "reason", "Priority")
    gpus = client.submit(_job("gpus", 1, 600, gpus=2))  # node-c's GPUs taken
    _wait_for(client, gpus, "state", "Running")
    gpu = client.submit(_job("gpu", 1, 600, gpus=1))  # behind the CPU jobs, but no GPU job
    _wait_for(client, gpu, "reason", "Resources")
    listed = fusesched(cluster, "jobs", "-h", "-t", "PD", "-o", "%i %R")
    assert listed.returncode == 0, listed.stderr
    lines = set(listed.stdout.splitlines())
    assert lines == {f"{wide} (Resources)", f"{behind} (Priority)", f"{gpu} (Resources)"}, (
        listed.stdout
    )
    for job_id in (gpus, gpu):
        client.cancel(job_id)
    client.cancel(busy)
    shown = _wait_for(client, wide, "state", "Running")
    assert shown["reason"] == ""  # started: nothing to wait for
    _wait_for(client, behind, "reason", "Resources")  # first in line now
    for job_id in (wide, behind):
        client.cancel(job_id)
