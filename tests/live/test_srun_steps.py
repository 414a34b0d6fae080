"""``srun`` in a batch script: job steps over the allocation, through fusesched (agent/step.py),
the script and the steps' tasks told what Slurm tells them."""

from __future__ import annotations

import socket
from collections.abc import Iterator
from pathlib import Path

import pytest

from fusesched.cli.local import LocalCluster
from fusesched.sdk import Client

from .conftest import local_cluster

SCRIPT = """#!/bin/bash
#SBATCH -N 2 --ntasks-per-node=2
#SBATCH --nodelist=node-a,node-b
#SBATCH --mem-per-cpu=64M
#SBATCH -t 2
echo "srun is $(command -v srun)"
first=$(scontrol show hostnames "$SLURM_JOB_NODELIST" | head -n 1)
echo "first host $first of $(scontrol show hostnames | wc -l)"
p=no; [ "$SLURM_TASK_PID" = "$$" ] && p=ok
u=no; [ "$SLURM_JOB_UID:$SLURM_JOB_GID" = "$(id -u):$(id -g)" ] && u=ok
echo "told host=$SLURM_SUBMIT_HOST per-node=$SLURM_NTASKS_PER_NODE \
mem=${SLURM_MEM_PER_NODE:-none}/$SLURM_MEM_PER_CPU pid=$p ids=$u user=$SLURM_JOB_USER"
srun -l bash -c 'p=no; [ "$SLURM_TASK_PID" = "$$" ] && p=ok
  u=no; [ "$SLURM_JOB_UID:$SLURM_JOB_GID" = "$(id -u):$(id -g)" ] && u=ok
  echo $SLURM_PROCID $SLURMD_NODENAME step=$SLURM_STEP_ID of=$SLURM_NTASKS pid=$p ids=$u \
    host=$SLURM_SUBMIT_HOST mem=${SLURM_MEM_PER_NODE:-none}/$SLURM_MEM_PER_CPU'
echo "first step: $?"
srun -n 1 sh -c 'echo second step=$SLURM_STEP_ID rank=$RANK world=$WORLD_SIZE; exit 3'
rc=$?
echo "second step: $rc"
exit $rc
"""


def test_srun_runs_steps_over_the_allocation(client: Client) -> None:
    """The first step runs bash, which reads the BASH_ENV the script was given (its own
    agent's file on node-a, another agent's on node-b): it once read itself until bash
    crashed (exit 139)."""
    submitted = client.submit_files([{"name": "steps.sh", "text": SCRIPT}])
    (job_id,) = submitted["ids"]
    done = client.wait(job_id, timeout=120)
    output = client.logs(job_id)
    assert done["state"] == "Failed", output
    assert done["exit_code"] == 3, output
    lines = output.splitlines()
    where = next(line for line in lines if line.startswith("srun is "))
    assert where.endswith("/bin/srun") and not where.endswith(" /usr/bin/srun"), output
    assert "first host node-a of 2" in lines, output  # (scontrol show hostnames, the agent's)
    # what Slurm tells a job of how it was submitted and who runs it (the host: the SDK's,
    # this one; --mem-per-cpu: SLURM_MEM_PER_CPU in MiB, and no SLURM_MEM_PER_NODE)
    host = socket.gethostname()
    told = f"told host={host} per-node=2 mem=none/64 pid=ok ids=ok user={done['user']}"
    assert told in lines, output
    labelled = sorted(line for line in lines if line[:1].isdigit() and ": " in line)
    told = f"pid=ok ids=ok host={host} mem=none/64"  # (each step task its own pid)
    assert labelled == [
        f"0: 0 node-a step=0 of=4 {told}",
        f"1: 1 node-a step=0 of=4 {told}",
        f"2: 2 node-b step=0 of=4 {told}",
        f"3: 3 node-b step=0 of=4 {told}",
    ], output
    assert "first step: 0" in lines, output
    assert "second step=1 rank=0 world=1" in lines, output
    assert "second step: 3" in lines, output
    # each task ran as a task of the job on its node
    remote = sorted(t["node"] for t in done["tasks"] if ".remote." in t["task_id"])
    assert remote == ["node-a", "node-a", "node-a", "node-b", "node-b"], done["tasks"]


STOPPED = """#!/bin/bash
#SBATCH -N 2 --ntasks-per-node=1
#SBATCH --nodelist=node-a,node-b
#SBATCH --mem-per-cpu=64M
#SBATCH -t 2
export GREETING="hi from the script"
srun sh -c 'echo "$SLURM_PROCID says $GREETING"'
timeout -s TERM 2 srun sleep 60
echo "stopped step: $?"
sleep 3
"""


@pytest.fixture
def secure(tmp_path: Path) -> Iterator[LocalCluster]:
    with local_cluster(tmp_path / "data", lambda configs: configs[:2], auth=True) as cluster:
        yield cluster


def test_steps_with_the_jobs_credential_and_a_stopped_step(secure: LocalCluster) -> None:
    """With authentication the step follows its tasks with the job's own credential; a step
    stopped by a signal (here the script's ``timeout``) stops its tasks on every node."""
    client = Client(secure.url, token=secure.admin_token)
    (job_id,) = client.submit_files([{"name": "stopped.sh", "text": STOPPED}])["ids"]
    done = client.wait(job_id, timeout=120)
    output = client.logs(job_id)
    assert done["state"] == "Completed", output
    lines = output.splitlines()
    assert sorted(line for line in lines if "says" in line) == [
        "0 says hi from the script",  # the script's own variables reach the tasks
        "1 says hi from the script",
    ], output
    assert "stopped step: 124" in lines, output
    sleepers = [t for t in done["tasks"] if ".remote." in t["task_id"]][2:]
    assert sorted(t["node"] for t in sleepers) == ["node-a", "node-b"], done["tasks"]
    # stopped by their step (SIGTERM), while the script went on for 3 more seconds
    main = next(t for t in done["tasks"] if ".remote." not in t["task_id"])
    assert all(t["exit_code"] == -15 for t in sleepers), done["tasks"]
    assert all(t["end_time"] < main["end_time"] - 2 for t in sleepers), done["tasks"]
