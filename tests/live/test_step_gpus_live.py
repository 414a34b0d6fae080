"""Job steps' own GPUs against a live controller and a real agent with four fake GPUs: the
AI-centre loop of four one-GPU ``srun``s in a 4-GPU job gives each its own GPU, a fifth
waits for one to free, a step asking for none sees them all, and ``fusesched sacct`` shows
each step's name."""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from pathlib import Path

import pytest

from fusesched.agent.config import AgentConfig
from fusesched.api.wire import DeviceInfo
from fusesched.cli.local import LocalCluster
from fusesched.sdk import Client

from .conftest import local_cluster
from .test_cli import fusesched

SCRIPT = """#!/bin/bash
#SBATCH --gres=gpu:4 -n 4 --nodelist=node-c
#SBATCH --mem-per-cpu=512M
#SBATCH -t 2
S={scratch}
for i in 0 1 2 3; do
  srun -n1 --gres=gpu:1 --exact sh -c "echo seed $i gpus=\\$CUDA_VISIBLE_DEVICES \\
    step=\\$SLURM_STEP_GPUS on=\\$SLURM_GPUS_ON_NODE; touch $S/s.$i
    while [ ! -e $S/go ]; do sleep 0.05; done" &
done
until [ -e $S/s.0 ] && [ -e $S/s.1 ] && [ -e $S/s.2 ] && [ -e $S/s.3 ]; do sleep 0.05; done
srun -n1 --gres=gpu:1 -J fifth sh -c 'echo fifth gpus=$CUDA_VISIBLE_DEVICES' 2>$S/fifth &
until grep -qs retrying $S/fifth; do sleep 0.05; done  # (it waits, however slow its start)
touch $S/go
wait
cat $S/fifth >&2
srun -n1 --gpus=5 true
echo "too many: $?"
srun -n2 --gpus-per-task=2 sh -c 'echo pair $SLURM_PROCID gpus=$CUDA_VISIBLE_DEVICES'
srun -n1 sh -c 'echo plain gpus=$CUDA_VISIBLE_DEVICES'
"""


def four_gpus(configs: list[AgentConfig]) -> Sequence[AgentConfig]:
    devices = [DeviceInfo(index=i, uuid=f"GPU-fake-{i}", model="H200") for i in range(4)]
    return [c.model_copy(update={"fake_devices": devices}) for c in configs if c.name == "node-c"]


@pytest.fixture
def gpu_cluster(tmp_path: Path) -> Iterator[LocalCluster]:
    with local_cluster(tmp_path / "data", four_gpus) as cluster:
        yield cluster


def test_each_step_gets_its_own_gpu(gpu_cluster: LocalCluster, scratch: Path) -> None:
    client = Client(gpu_cluster.url)
    script = SCRIPT.format(scratch=scratch)
    (job,) = client.submit_files([{"name": "seeds.sh", "text": script}])["ids"]
    done = client.wait(job, timeout=150)
    output = client.logs(job)
    assert done["state"] == "Completed", output
    lines = output.splitlines()
    seeds = sorted(line.split()[2:] for line in lines if line.startswith("seed "))
    gpus = sorted(words[0] for words in seeds)
    assert gpus == ["gpus=0", "gpus=1", "gpus=2", "gpus=3"], output  # each its own
    assert all(w[1] == f"step={w[0][5:]}" and w[2] == "on=1" for w in seeds), output
    said = [line for line in lines if line.startswith("srun: ")]
    assert any(
        line.startswith(f"srun: Job {job} step creation temporarily disabled, retrying")
        for line in said
    ), output  # the fifth waited
    assert f"srun: Step created for StepId={job}.4" in said, output
    (fifth,) = [line for line in lines if line.startswith("fifth ")]
    assert fifth in {f"fifth gpus={i}" for i in range(4)}, output
    assert "too many: 1" in lines, output  # the job has 4: never fits
    assert any("asks for 5 GPU(s) on node-c; the job has 4 there" in line for line in said)
    pairs = sorted(line for line in lines if line.startswith("pair "))
    assert pairs == ["pair 0 gpus=0,1", "pair 1 gpus=2,3"], output
    assert "plain gpus=0,1,2,3" in lines, output

    shown = fusesched(gpu_cluster, "sacct", "-P", "-n", "-j", job, "-o", "JobID,JobName")
    assert shown.returncode == 0, shown.stderr
    rows = dict(line.split("|") for line in shown.stdout.splitlines())
    assert rows[f"{job}.batch"] == "batch"
    # (the step refused got no id)
    assert [rows[f"{job}.{n}"] for n in range(7)] == [*["sh"] * 4, "fifth", "sh", "sh"], rows
