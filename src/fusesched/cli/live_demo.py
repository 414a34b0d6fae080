"""``fusesched up --demo``: a small mixed workload on the embedded cluster, shown live.

An AI training job (two-rank PyTorch DDP over gloo, one rank per node), an MPI job started
across two nodes by ``mpirun`` without ssh, a batch array and a web service share the local
agents; the table refreshes until the finite jobs end, then the service is cancelled.
"""

from __future__ import annotations

import importlib.util
import sys
import time
from typing import Any

from rich.console import Console, Group
from rich.live import Live
from rich.text import Text

from fusesched.cli.live import jobs_table
from fusesched.cli.local import LocalCluster
from fusesched.examples import EXAMPLES
from fusesched.sdk import FINISHED, Client

MPI_SCRIPT = """#!/bin/bash
#SBATCH --job-name=mpi-hello
#SBATCH --nodes=2
#SBATCH --ntasks-per-node=1
#SBATCH --time=5:00
mpirun -np 2 --map-by node sh -c \\
  'echo "MPI rank $OMPI_COMM_WORLD_RANK of $OMPI_COMM_WORLD_SIZE on node $FUSESCHED_NODE"'
"""


def demo_jobs(nodes: int) -> list[dict[str, Any]]:
    """The workload, sized to the number of local agents."""
    spread = min(2, nodes)
    jobs: list[dict[str, Any]] = []
    if importlib.util.find_spec("torch") is not None:
        jobs.append(
            {
                "name": "ddp-train",
                "type": "ai-train",
                "walltime_s": 300,
                "placement": {"max_tasks_per_node": 1} if spread > 1 else {},
                "groups": [
                    {
                        "name": "worker",
                        "replicas": 2,
                        "resources": {"cpu": "500m", "memory": "1Gi"},
                        "argv": [sys.executable, str(EXAMPLES / "ddp_train.py"), "30"],
                        "launcher": "torchrun",
                    }
                ],
            }
        )
    jobs.append(
        {
            "name": "mpi-hello",
            "walltime_s": 300,
            "placement": {"max_tasks_per_node": 1} if spread > 1 else {},
            "groups": [
                {
                    "name": "main",
                    "replicas": 2,
                    "resources": {"cpu": "500m", "memory": "256Mi"},
                    "script": MPI_SCRIPT,
                    "launcher": "mpi",
                }
            ],
        }
    )
    jobs.append(
        {
            "name": "batch-array",
            "walltime_s": 60,
            "array": {"start": 1, "stop": 4},
            "groups": [
                {
                    "resources": {"cpu": "250m", "memory": "64Mi"},
                    "argv": ["sh", "-c", "sleep 1; echo array member $FUSESCHED_ARRAY_INDEX"],
                }
            ],
        }
    )
    jobs.append(
        {
            "name": "web-service",
            "type": "service",
            "groups": [
                {
                    "resources": {"cpu": "250m", "memory": "128Mi"},
                    "argv": [sys.executable, "-m", "http.server", "0", "--bind", "127.0.0.1"],
                    "ports": [8000],
                }
            ],
        }
    )
    return jobs


def run_demo(cluster: LocalCluster, console: Console, timeout_s: float = 300.0) -> None:
    client = Client(cluster.url)
    ids = client.submit_many(demo_jobs(len(cluster.agents)))
    service = ids[-1]
    deadline = time.monotonic() + timeout_s

    def snapshot() -> list[dict[str, Any]]:
        return list(reversed(client.jobs(limit=50)))

    def view(jobs: list[dict[str, Any]], note: str) -> Group:
        return Group(jobs_table(jobs, title="fusesched — live jobs"), Text(note, style="dim"))

    with Live(view(snapshot(), "starting…"), console=console, refresh_per_second=4) as live:
        while time.monotonic() < deadline:
            jobs = snapshot()
            finite = [j for j in jobs if j["id"] != service]
            live.update(view(jobs, "waiting for the finite jobs; the service keeps running"))
            if finite and all(j["state"] in FINISHED for j in finite):
                break
            time.sleep(0.25)
        client.cancel(service)
        client.wait(service, timeout=30)
        live.update(view(snapshot(), "done: the service was cancelled"))
    console.print()
    for job in snapshot():
        if job["id"] == service:
            continue
        output = client.logs(job["id"]).strip()
        if output:
            console.print(f"[bold]{job['id']} {job['name']}[/] ({job['state']}):")
            console.print(output, highlight=False, markup=False)
