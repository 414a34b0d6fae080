"""``fusesched sacct``'s job steps against a live controller and two real agents: a batch
job's ``ID.batch`` and one row per ``srun`` (a failing one, and an MPI one whose mpirun's
daemon on the other node counts in its step), ``-X`` without them, ``-j ID.N``, ``--json``
and ``Restarts``; and a window of more jobs than one page of ``GET /v1/jobs`` holds."""

from __future__ import annotations

import getpass
import json
import shutil
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from fusesched.cli.local import LocalCluster
from fusesched.sdk import Client
from fusesched.store import JobRow, JobState, Store

from .conftest import local_cluster
from .test_cli import fusesched

ME = getpass.getuser()

SCRIPT = """#!/bin/bash
#SBATCH -N 2 --ntasks-per-node=1
#SBATCH --nodelist=node-a,node-b
#SBATCH --mem-per-cpu=64M
#SBATCH -t 2
srun -n 2 true
srun -n 1 sh -c 'exit 3'
echo "failed step: $?"
"""
#: An MPI step: mpirun on node-a, its daemon on node-b (started through the controller).
MPI_STEP = 'srun --mpi=pmix -n 2 true\necho "mpi step: $?"\n'


class Ran:
    def __init__(self, cluster: LocalCluster) -> None:
        self.cluster = cluster
        client = Client(cluster.url)
        mpi = shutil.which("mpirun") is not None
        self.mpi = mpi
        text = SCRIPT + (MPI_STEP if mpi else "")
        (self.job,) = client.submit_files([{"name": "steps.sh", "text": text}])["ids"]
        done = client.wait(self.job, timeout=120)
        self.output = client.logs(self.job)
        assert done["state"] == "Completed", self.output


@pytest.fixture(scope="module")
def ran(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Ran]:
    with local_cluster(tmp_path_factory.mktemp("steps") / "data", lambda a: a[:2]) as cluster:
        yield Ran(cluster)


def rows(ran: Ran, *args: str) -> dict[str, list[str]]:
    result = fusesched(ran.cluster, "sacct", "-P", "-n", *args)
    assert result.returncode == 0, result.stderr
    return {line.split("|")[0]: line.split("|")[1:] for line in result.stdout.splitlines()}


def test_a_batch_job_shows_its_script_and_each_srun(ran: Ran) -> None:
    job = ran.job
    found = rows(ran, "-j", job, "-o", "JobID,JobName,State,ExitCode,NNodes,NTasks,NodeList")
    expected = {
        job: ["steps.sh", "COMPLETED", "0:0", "2", "2", "node-a,node-b"],
        f"{job}.batch": ["batch", "COMPLETED", "0:0", "1", "1", "node-a"],
        f"{job}.0": ["true", "COMPLETED", "0:0", "2", "2", "node-a,node-b"],
        f"{job}.1": ["sh", "FAILED", "3:0", "1", "1", "node-a"],
    }
    if ran.mpi:  # mpirun on node-a, its daemons (here on both nodes, which are one machine
        # to mpirun) tasks of the step too: its NTasks is its ranks, not those processes
        expected[f"{job}.2"] = ["true", "COMPLETED", "0:0", "2", "2", "node-a,node-b"]
    assert found == expected, ran.output
    assert list(found) == list(expected)  # the job, then its steps in order
    assert "failed step: 3" in ran.output.splitlines()
    assert list(rows(ran, "-j", job, "-X", "-o", "JobID,State")) == [job]
    assert list(rows(ran, "-j", job, "--allocations", "-o", "JobID")) == [job]


def test_steps_by_id_json_and_the_fields_of_the_job_alone(ran: Ran) -> None:
    job = ran.job
    assert rows(ran, "-j", f"{job}.1,{job}.batch", "-o", "JobID,State") == {
        f"{job}.batch": ["COMPLETED"],
        f"{job}.1": ["FAILED"],
    }
    shown = fusesched(ran.cluster, "sacct", "--json", "-j", job, "-o", "JobID,User,Restarts")
    assert shown.returncode == 0, shown.stderr
    records = json.loads(shown.stdout)
    assert records[:3] == [
        {"JobID": job, "User": ME, "Restarts": "0"},
        {"JobID": f"{job}.batch", "User": "", "Restarts": ""},
        {"JobID": f"{job}.0", "User": "", "Restarts": ""},
    ]
    times = rows(ran, "-j", job, "-o", "JobID,Start,End,ElapsedRaw,TotalCPU")
    start, end = times[f"{job}.0"][:2]
    assert times[job][0] <= start <= end <= times[job][1]
    bad = fusesched(ran.cluster, "sacct", "-j", f"{job}.x")
    assert bad.returncode == 2 and f"bad job step 'x' in '{job}.x'" in bad.stderr
    assert "Traceback" not in bad.stderr


def test_a_window_of_more_jobs_than_a_page(tmp_path: Path) -> None:
    """1,205 jobs stored directly (more than the 1,000 one answer holds): all of them are
    shown, oldest first; ``--limit`` keeps the newest."""
    data = tmp_path / "data"
    data.mkdir()
    now = time.time()
    with Store(f"sqlite:///{data / 'fusesched.db'}") as store:
        store.add_jobs(
            JobRow(
                id=str(seq),
                seq=seq,
                user=ME,
                state=JobState.COMPLETED,
                phase="completed",
                submit_time=now - 600,
                start_time=now - 500,
                end_time=now - 400 + seq / 100,
                request={},
                name=f"j{seq}",
            )
            for seq in range(1, 1206)
        )
    with local_cluster(data, lambda a: a[:1]) as cluster:
        result = fusesched(cluster, "sacct", "-P", "-n", "-o", "JobID", "-S", "now-1hours")
        assert result.returncode == 0, result.stderr
        assert result.stdout.split() == [str(seq) for seq in range(1, 1206)]
        assert result.stderr == ""
        newest = fusesched(cluster, "sacct", "-X", "-P", "-n", "-o", "JobID", "--limit", "1100")
        assert newest.stdout.split() == [str(seq) for seq in range(106, 1206)]
