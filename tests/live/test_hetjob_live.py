"""A heterogeneous job (``#SBATCH hetjob``, and ``:`` on sbatch's command line) on a real
cluster: the script runs once, on component 0, with Slurm's ``_HET_GROUP_<n>`` variables, and
``srun --het-group=1`` runs its step on component 1's tasks (the GPU node, node-c)."""

from __future__ import annotations

from pathlib import Path

from tests.live.test_cli import PYTHON, fusesched

from fusesched.cli.local import LocalCluster
from fusesched.sdk import Client

SCRIPT = """#!/bin/bash
#SBATCH -J het -t 2 -n 1 -c 1 --mem=64M
#SBATCH hetjob
#SBATCH -n 2 -c 2 --gpus-per-task=1 --mem-per-cpu=64M
echo "size=$SLURM_HET_SIZE n=$SLURM_NTASKS n0=$SLURM_NTASKS_HET_GROUP_0 \\
n1=$SLURM_NTASKS_HET_GROUP_1 nodes1=$SLURM_JOB_NODELIST_HET_GROUP_1 \\
per1=$SLURM_TASKS_PER_NODE_HET_GROUP_1"
srun --het-group=1 -l sh -c 'echo het1 $SLURMD_NODENAME of=$SLURM_NTASKS \
cpt=$SLURM_CPUS_PER_TASK tpn=$SLURM_TASKS_PER_NODE cpn=$SLURM_JOB_CPUS_PER_NODE \
con=$SLURM_CPUS_ON_NODE mem=$SLURM_MEM_PER_NODE gpn=$SLURM_GPUS_ON_NODE'
srun sh -c 'echo het0 $SLURM_PROCID of=$SLURM_NTASKS cpt=$SLURM_CPUS_PER_TASK'
srun --het-group=2 true
echo "bad group: $?"
"""


def test_srun_het_group_runs_on_the_components_tasks(
    cluster: LocalCluster, tmp_path: Path, native_front: Path
) -> None:
    client = Client(cluster.url)
    submitted = client.submit_files([{"name": "het.sh", "text": SCRIPT}])
    (job_id,) = submitted["ids"]
    done = client.wait(job_id, timeout=120)
    output = client.logs(job_id)
    assert done["state"] == "Completed", output
    lines = output.splitlines()
    assert "size=2 n=1 n0=1 n1=2 nodes1=node-c per1=2" in lines, output
    assert sorted(line for line in lines if "het1" in line) == [
        # component 1's CPUs, memory and GPUs on node-c, not the script's (1 CPU, 64M, none)
        "0: het1 node-c of=2 cpt=2 tpn=2 cpn=4 con=4 mem=256 gpn=2",
        "1: het1 node-c of=2 cpt=2 tpn=2 cpn=4 con=4 mem=256 gpn=2",
    ], output
    assert [line for line in lines if line.startswith("het0")] == ["het0 0 of=1 cpt=1"], output
    assert "srun: error: --het-group: job " + job_id + " has no component 2" in output, output
    assert "bad group: 2" in lines, output
    assert [c["name"] for c in done["components"]] == ["het0", "het1"]
    steps = [t for t in done["tasks"] if ".remote." in t["task_id"]]
    assert sorted(t["node"] for t in steps)[-2:] == ["node-c", "node-c"], done["tasks"]

    # the same job from the command line's ':' (and tried first with --test-only)
    body = tmp_path / "body.sh"
    body.write_text("#!/bin/bash\n" + SCRIPT.split("\n", 4)[4])
    args = ["-J", "het", "-t", "2", "-n1", "-c1", "--mem=64M", ":", "-n", "2"]
    args += ["-c2", "--gpus-per-task=1", "--mem-per-cpu=64M", str(body)]
    tried = fusesched(cluster, "sbatch", "--test-only", *args, command=PYTHON)
    assert tried.returncode == 0, tried.stderr
    assert "sbatch: Job 0 to start at " in tried.stderr and "node-c" in tried.stderr
    for front in (PYTHON, [str(native_front)]):  # (the quick paths: Python's and C's)
        sent = fusesched(cluster, "sbatch", *args, command=front)
        assert sent.returncode == 0, sent.stderr
        again = client.wait(sent.stdout.split()[-1], timeout=120)
        assert again["state"] == "Completed", client.logs(again["id"])
        assert "0: het1 node-c of=2" in client.logs(again["id"])
    shown = fusesched(cluster, "show", again["id"], command=PYTHON)
    assert "component 1 (het1): 2 tasks × cpu 2" in shown.stdout, shown.stdout
