"""srun's input environment variables against a live controller and a real agent with two
fake GPUs: a step takes the job's told options (``--gpus-per-task``) as its defaults, as
Slurm's srun does, and the script's own (``SLURM_LABELIO``, ``SRUN_CPUS_PER_TASK``,
``SLURM_OVERLAP``; an empty ``SLURM_GPUS_PER_TASK`` is not taken); the command line beats
them, a bad value is an error that names its variable, and the job's ``--mem-per-cpu`` stays
the job's (a step naming no memory holds none here) (agent/step_defaults.py)."""

from __future__ import annotations

from pathlib import Path

from fusesched.sdk import Client

SCRIPT = r"""#!/bin/bash
#SBATCH -n 2 --nodelist=node-c --gpus-per-task=1 --mem-per-cpu=128M
#SBATCH -t 2
S=@S
srun sh -c 'echo "task $SLURM_PROCID gpus=$CUDA_VISIBLE_DEVICES mem=$FUSESCHED_MEMORY_LIMIT_BYTES"'
srun -n1 --gres=gpu:2 --mem=200M sh -c 'echo "given gpus=$CUDA_VISIBLE_DEVICES \
mem=$FUSESCHED_MEMORY_LIMIT_BYTES"'
SLURM_GPUS_PER_TASK= srun -n1 sh -c 'echo "cleared gpus=$CUDA_VISIBLE_DEVICES"'
SLURM_LABELIO=1 srun -n1 echo labelled
SRUN_CPUS_PER_TASK=2 srun -n1 sh -c 'echo "cpus=$SLURM_CPUS_PER_TASK"'
srun sh -c "touch $S/s.\$SLURM_PROCID; while [ ! -e $S/go ]; do sleep 0.05; done" &
until [ -e $S/s.0 ] && [ -e $S/s.1 ]; do sleep 0.05; done
srun -I -n1 --gres=none true 2>/dev/null
echo "busy: $?"
SLURM_OVERLAP=1 srun -I -n1 --gres=none echo overlapped
touch $S/go
wait
SLURM_NTASKS_PER_NODE=two srun -n1 true
echo "bad: $?"
"""


def test_a_step_takes_its_defaults_from_the_environment(client: Client, scratch: Path) -> None:
    script = SCRIPT.replace("@S", str(scratch))
    (job,) = client.submit_files([{"name": "defaults.sh", "text": script}])["ids"]
    done = client.wait(job, timeout=150)
    output = client.logs(job)
    assert done["state"] == "Completed", output
    lines = output.splitlines()
    # the job's --gpus-per-task: each task its own GPU (its --mem-per-cpu: no limit)
    tasks = sorted(line for line in lines if line.startswith("task "))
    assert tasks in (
        ["task 0 gpus=0 mem=", "task 1 gpus=1 mem="],
        ["task 0 gpus=1 mem=", "task 1 gpus=0 mem="],
    ), output
    # the command line's GPUs and memory beat them
    assert f"given gpus=0,1 mem={200 * 2**20}" in lines, output
    # the script's empty SLURM_GPUS_PER_TASK is not taken (as Slurm's): no GPU option, all
    assert "cleared gpus=0,1" in lines, output
    assert "0: labelled" in lines, output  # SLURM_LABELIO
    assert "cpus=2" in lines, output  # SRUN_CPUS_PER_TASK, as -c
    assert "busy: 1" in lines, output  # (the job's slots are held: -I gives up)
    assert "overlapped" in lines, output  # SLURM_OVERLAP, as --overlap: it starts beside
    assert "bad: 2" in lines, output
    assert (
        "srun: error: SLURM_NTASKS_PER_NODE (in the environment): --ntasks-per-node takes a "
        "positive whole number, not 'two'"
    ) in lines, output
    assert "Traceback" not in output
