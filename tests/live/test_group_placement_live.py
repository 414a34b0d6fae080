"""A heterogeneous job whose components ask for different nodes (``-C`` per component, a GPU
type on one): component 0 on a node of the cpu pool, component 1 on node-c, the GPU node."""

from __future__ import annotations

from tests.live.test_cli import PYTHON, fusesched

from fusesched.cli.local import LocalCluster
from fusesched.sdk import Client

SCRIPT = """#!/bin/bash
#SBATCH -J split -t 2 -n 1 -c 1 --mem=64M -C fusesched.io/pool=cpu
#SBATCH hetjob
#SBATCH -n 1 -c 1 --mem=64M -C fusesched.io/pool=gpu --gpus-per-task=h200:1
echo "nodes0=$SLURM_JOB_NODELIST_HET_GROUP_0 nodes1=$SLURM_JOB_NODELIST_HET_GROUP_1"
"""


def test_each_component_runs_on_its_own_nodes(cluster: LocalCluster) -> None:
    client = Client(cluster.url)
    (job_id,) = client.submit_files([{"name": "split.sh", "text": SCRIPT}])["ids"]
    done = client.wait(job_id, timeout=60)
    output = client.logs(job_id)
    assert done["state"] == "Completed", output
    (line,) = [line for line in output.splitlines() if line.startswith("nodes0=")]
    assert line in ("nodes0=node-a nodes1=node-c", "nodes0=node-b nodes1=node-c"), output
    shown = fusesched(cluster, "show", job_id, command=PYTHON)
    assert "component 0 (het0): 1 task × cpu 1, memory 64Mi; nodes: fusesched.io/pool=cpu" in (
        shown.stdout
    ), shown.stdout
    assert "nodes: fusesched.io/pool=gpu, fusesched.io/gpu-model In [H200]" in shown.stdout
