"""Job steps against a live controller and two real agents: steps get their own share of the
job's slots (one that does not fit waits for the running ones, ``--overlap`` shares), and
``srun`` of an MPI program runs one MPI job through mpirun, not N singletons."""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import pytest

from fusesched.sdk import Client

from .test_jobs import MPI_PROGRAM

# (256M: the batch task's memory holds the script's own sruns, two at a time)
STEPS = """#!/bin/bash
#SBATCH -n 2 --nodelist=node-a
#SBATCH --mem-per-cpu=256M
#SBATCH -t 2
S={scratch}
# two steps of the job's 2 tasks at once: the second waits for the first to end (the first
# holds its slots until the second has said so, at most 60 s: however slow this machine)
srun -n 2 sh -c 'echo first $SLURM_STEP_ID start $(date +%s.%N); touch {scratch}/a.$SLURM_PROCID
                 for i in $(seq 1200); do
                     grep -qs "temporarily disabled" {scratch}/second.err && break; sleep 0.05
                 done
                 echo first end $(date +%s.%N)' &
until [ -e $S/a.0 ] && [ -e $S/a.1 ]; do sleep 0.05; done
srun -n 2 sh -c 'echo second $SLURM_STEP_ID start $(date +%s.%N)' 2> >(tee $S/second.err >&2) &
wait
# --overlap: beside a step that holds every slot
# (the third holds its slots until the script says so, at most 60 s: however slow this machine)
srun -n 2 sh -c 'echo third $SLURM_STEP_ID start $(date +%s.%N); touch {scratch}/b.$SLURM_PROCID
                 for i in $(seq 1200); do [ -e {scratch}/go ] && break; sleep 0.05; done
                 echo third end $(date +%s.%N)' &
until [ -e $S/b.0 ] && [ -e $S/b.1 ]; do sleep 0.05; done
srun --overlap -n 1 sh -c 'echo fourth $SLURM_STEP_ID start $(date +%s.%N)'
srun -I -n 1 true
echo "immediate: $?"
touch $S/go
wait
srun -n 3 true
echo "too big: $?"
"""


def completed(client: Client, name: str, script: str) -> list[str]:
    """Run the batch ``script``; its output's lines, once it has completed."""
    (job_id,) = client.submit_files([{"name": name, "text": script}])["ids"]
    done = client.wait(job_id, timeout=150)
    output = client.logs(job_id)
    assert done["state"] == "Completed", output
    return [f"job {job_id}", *output.splitlines()]


def _times(lines: list[str], word: str, what: str) -> list[float]:
    return [float(line.split()[-1]) for line in lines if line.startswith(word) and what in line]


def test_steps_share_the_jobs_slots(client: Client, scratch: Path) -> None:
    lines = completed(client, "steps.sh", STEPS.format(scratch=scratch))
    job_id = lines[0].split()[1]
    output = "\n".join(lines)
    first_end = max(_times(lines, "first", " end "))
    second = _times(lines, "second", " start ")
    assert len(second) == 2 and min(second) >= first_end, output  # one after the other
    assert {line.split()[1] for line in lines if line.startswith("second")} == {"1"}
    said = [line for line in lines if line.startswith("srun: ")]
    assert said[0] == (
        f"srun: Job {job_id} step creation temporarily disabled, retrying (Requested nodes are "
        "busy: node-a has 2 of 2 in use (by step(s) 0))"
    ), output
    assert said.count(said[0]) == 1  # said once, then quiet
    assert f"srun: Step created for StepId={job_id}.1" in said, output
    # the overlapping step ran while the third held every slot; -I gave up at once
    third_end = min(_times(lines, "third", " end "))
    (fourth,) = _times(lines, "fourth", " start ")
    assert fourth < third_end, output
    assert [line.split()[1] for line in lines if line.startswith("fourth")] == ["3"]
    assert "immediate: 1" in lines, output
    assert any(
        line.startswith(f"srun: error: Unable to create step for job {job_id}: Requested nodes")
        for line in lines
    ), output
    assert "too big: 2" in lines, output  # (srun's own check: more tasks than the job has)


MPI_JOB = """#!/bin/bash
#SBATCH -N 2 --ntasks-per-node=2
#SBATCH --nodelist=node-a,node-b
#SBATCH --mem-per-cpu=64M
#SBATCH -t 2
export OMPI_MCA_btl=tcp,self OMPI_MCA_btl_tcp_if_include=lo
srun -n 4 {binary}
echo "plain: $?"
srun --mpi=pmix -l -n 2 {binary}
echo "labelled: $?"
srun --mpi=none -n 1 {binary}
echo "none: $?"
"""


@pytest.mark.skipif(shutil.which("mpicc") is None, reason="OpenMPI (mpicc) is not installed")
def test_srun_runs_an_mpi_program_as_one_world(client: Client, scratch: Path) -> None:
    source = scratch / "allreduce.c"
    source.write_text(MPI_PROGRAM)
    binary = scratch / "allreduce"
    subprocess.run(["mpicc", "-o", str(binary), str(source)], check=True)
    lines = completed(client, "mpi.sh", MPI_JOB.format(binary=binary))
    output = "\n".join(lines)
    # linked to libmpi: one world of 4 over both nodes, said once
    world = sorted(line for line in lines if line.startswith("rank ") and " of 4 " in line)
    assert [line.split()[1] for line in world] == ["0", "1", "2", "3"], output
    assert {line.split(" on ")[1].split()[0] for line in world} == {"node-a", "node-b"}
    assert all(line.endswith("sum 10") for line in world), output
    note = f"srun: {binary} is linked to libmpi: its tasks start as one MPI job"
    assert sum(line.startswith(note) for line in lines) == 1, output  # (not with --mpi)
    assert "plain: 0" in lines and "labelled: 0" in lines, output
    # -l: mpirun's rank tags as srun's labels
    labelled = sorted(line for line in lines if line[:3] in ("0: ", "1: "))
    assert [line.split(" of ")[0] for line in labelled] == ["0: rank 0", "1: rank 1"], output
    assert all(" of 2 " in line for line in labelled), output
    # --mpi=none: its tasks as they are, without PMI, where OpenMPI sees srun's variables
    # and gives up (as under Slurm without PMI)
    assert "none: 0" not in lines and "direct launched" in output, output
