"""A batch script's GPUs against a live controller and a real agent with four fake GPUs: a
``#SBATCH -n 4 --gpus-per-task=1`` script (``torchrun --nproc_per_node=4`` run directly in
it) sees all four in ``CUDA_VISIBLE_DEVICES``, as Slurm's batch step, while the ``srun``
steps in it still see their own, and the controller's mark stays out of every task's
environment."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from fusesched.cli.local import LocalCluster
from fusesched.sdk import Client

from .conftest import local_cluster
from .test_step_gpus_live import four_gpus

SCRIPT = """#!/bin/bash
#SBATCH -n 4 --gpus-per-task=1 --nodelist=node-c
#SBATCH --mem-per-cpu=256M
#SBATCH -t 2
echo "script gpus=$CUDA_VISIBLE_DEVICES indices=$FUSESCHED_GPU_INDICES \\
job=$SLURM_JOB_GPUS mark=${FUSESCHED_STEP_BATCH_GPUS-unset}"
srun -n1 --gpus-per-task=1 sh -c 'echo one gpus=$CUDA_VISIBLE_DEVICES \\
mark=${FUSESCHED_STEP_BATCH_GPUS-unset}'
srun -n2 --gpus-per-task=1 sh -c 'echo pair $SLURM_PROCID gpus=$CUDA_VISIBLE_DEVICES'
"""


@pytest.fixture
def gpu_cluster(tmp_path: Path) -> Iterator[LocalCluster]:
    with local_cluster(tmp_path / "data", four_gpus) as cluster:
        yield cluster


def test_the_script_sees_all_its_jobs_gpus(gpu_cluster: LocalCluster) -> None:
    client = Client(gpu_cluster.url)
    (job,) = client.submit_files([{"name": "batch.sh", "text": SCRIPT}])["ids"]
    done = client.wait(job, timeout=120)
    output = client.logs(job)
    assert done["state"] == "Completed", output
    lines = output.splitlines()
    assert "script gpus=0,1,2,3 indices=0,1,2,3 job=0,1,2,3 mark=unset" in lines, output
    assert "one gpus=0 mark=unset" in lines, output  # (a step: its own, lowest free first)
    pairs = sorted(line for line in lines if line.startswith("pair "))
    assert pairs == ["pair 0 gpus=0", "pair 1 gpus=1"], output
