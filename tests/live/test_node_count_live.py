"""``sbatch -N 2 -n 4`` on a partly busy cluster runs on exactly two nodes: with node-a's
CPUs half taken, the cap of two tasks a node alone spread the four tasks over three nodes
(node-a 1, node-b 2, node-c 1); the job must see ``SLURM_NNODES=2`` and two hosts."""

from __future__ import annotations

import time

from fusesched.cli.local import LocalCluster
from fusesched.sdk import Client

FILL = """#!/bin/bash
#SBATCH -J fill -t 2 -n 1 -c 1 --mem=64M -w node-a
sleep 120
"""
SCRIPT = """#!/bin/bash
#SBATCH -J two -t 2 -N 2 -n 4 -c 1 --mem=64M
echo "nnodes=$SLURM_NNODES nodelist=$SLURM_JOB_NODELIST"
"""


def test_two_nodes_exactly_on_a_busy_cluster(cluster: LocalCluster) -> None:
    client = Client(cluster.url)
    (fill,) = client.submit_files([{"name": "fill.sh", "text": FILL}])["ids"]
    deadline = time.monotonic() + 30
    while client.show(fill)["state"] != "Running":
        assert time.monotonic() < deadline, client.show(fill)
        time.sleep(0.2)
    try:
        (job_id,) = client.submit_files([{"name": "two.sh", "text": SCRIPT}])["ids"]
        done = client.wait(job_id, timeout=60)
        output = client.logs(job_id)
        assert done["state"] == "Completed", output
        assert sorted(done["nodes"]) == ["node-b", "node-c"], done
        (line,) = [line for line in output.splitlines() if line.startswith("nnodes=")]
        assert line in ("nnodes=2 nodelist=node-b,node-c", "nnodes=2 nodelist=node-c,node-b"), line
    finally:
        client.cancel(fill)
