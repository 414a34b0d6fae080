"""``fusesched salloc`` as a user types it (a real subprocess, with a user's token) against a
live controller with authentication and two real agents: ``srun`` in the command runs job
steps on the allocated nodes, the allocation is released when the command exits or revoked
under it, and only the job's owner may run steps of it from outside the job."""

from __future__ import annotations

import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import httpx
import pytest

from fusesched.cli.local import LocalCluster
from fusesched.sdk import Client

from .conftest import local_cluster

PYTHON = [sys.executable, "-m", "fusesched"]
#: Every allocation here: small enough for both test nodes.
SIZE = ["--mem-per-cpu=64M", "-t", "2"]


@dataclass
class Secure:
    cluster: LocalCluster
    tokens: dict[str, str]  # who -> token

    def client(self, who: str) -> Client:
        return Client(self.cluster.url, token=self.tokens[who])

    def env(self, who: str) -> dict[str, str]:
        return {
            "FUSESCHED_CONTROLLER": self.cluster.url,
            "FUSESCHED_TOKEN": self.tokens[who],
            "PATH": "/usr/bin:/bin",
            "HOME": "/nonexistent",  # (no token file: the token above is the one used)
        }


@pytest.fixture(scope="module")
def secure(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Secure]:
    data = tmp_path_factory.mktemp("salloc") / "data"
    with local_cluster(data, lambda a: a[:2], auth=True) as cluster:
        admin = Client(cluster.url, token=cluster.admin_token)
        tokens = {"admin": cluster.admin_token or ""}
        for who, role in (("ann", "user"), ("ben", "user"), ("tia", "tenant-admin")):
            tokens[who] = admin.create_token(who, tenant="lab", role=role)["token"]
        yield Secure(cluster, tokens)


def salloc(secure: Secure, *args: str, timeout: float = 60) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [*PYTHON, "salloc", *args],
        capture_output=True,
        text=True,
        timeout=timeout,
        stdin=subprocess.DEVNULL,
        env=secure.env("ann"),
    )


def job_id_of(stderr: str) -> str:
    line = next(line for line in stderr.splitlines() if "Pending job allocation" in line)
    return line.rsplit(" ", 1)[1]


def test_srun_runs_steps_on_the_allocated_nodes(secure: Secure) -> None:
    done = salloc(
        secure,
        "-N",
        "2",
        *SIZE,
        "sh",
        "-c",
        "srun -l sh -c 'echo $SLURMD_NODENAME'; srun -n 1 hostname; echo nodes=$SLURM_NNODES",
    )
    assert done.returncode == 0, done.stderr
    lines = done.stdout.splitlines()
    assert sorted(line for line in lines if line[:3] in ("0: ", "1: ")) == [
        "0: node-a",
        "1: node-b",
    ], done.stdout
    assert lines[-1] == "nodes=2", done.stdout
    job_id = job_id_of(done.stderr)
    for said in (
        f"salloc: Granted job allocation {job_id}",
        "salloc: Nodes node-a,node-b are ready for job",
        f"salloc: Relinquishing job allocation {job_id}",
    ):
        assert said in done.stderr, done.stderr
    ann = secure.client("ann")
    job = ann.wait(job_id, timeout=20)  # released: it does not run on
    assert (job["state"], job["exit_code"]) == ("Completed", 0), job  # (as the command)
    steps = sorted(t["node"] for t in job["tasks"] if ".remote." in t["task_id"])
    assert steps == ["node-a", "node-a", "node-b"], job["tasks"]


def test_the_commands_exit_status_is_salloc_s(secure: Secure) -> None:
    done = salloc(secure, "-N", "1", *SIZE, "-Q", "sh", "-c", "exit 3")
    assert done.returncode == 3, done.stderr
    assert "salloc:" not in done.stderr  # -Q
    (job,) = secure.client("ann").jobs(limit=1)  # (the newest: this one)
    assert job["name"] == "sh", job
    ended = secure.client("ann").wait(job["id"], timeout=20)
    assert (ended["state"], ended["exit_code"]) == ("Failed", 1), ended


def test_sacct_shows_the_allocation_s_extern_step_not_a_batch_step(secure: Secure) -> None:
    done = salloc(secure, "-N", "1", *SIZE, "-Q", "sh", "-c", "srun -J hi true; exit 2")
    assert done.returncode == 2, done.stderr
    (job,) = secure.client("ann").jobs(limit=1)
    secure.client("ann").wait(job["id"], timeout=20)
    fields = "JobID,JobName,State,ExitCode,NodeList"
    shown = subprocess.run(
        [*PYTHON, "sacct", "-j", job["id"], "-o", fields, "-P", "-n"],
        capture_output=True,
        text=True,
        timeout=30,
        env=secure.env("ann"),
    )
    assert shown.returncode == 0, shown.stderr
    assert shown.stdout.splitlines() == [
        f"{job['id']}|sh|FAILED|1:0|node-a",  # (as the command: failed)
        f"{job['id']}.extern|extern|COMPLETED|0:0|node-a",
        f"{job['id']}.0|hi|COMPLETED|0:0|node-a",
    ], shown.stdout


def test_a_job_cancelled_elsewhere_revokes_the_allocation(secure: Secure) -> None:
    process = subprocess.Popen(
        [*PYTHON, "salloc", "-N", "1", *SIZE, "sh", "-c", "echo started; exec sleep 120"],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        stdin=subprocess.DEVNULL,
        text=True,
        env=secure.env("ann"),
    )
    try:
        assert process.stdout is not None and process.stderr is not None
        assert process.stdout.readline() == "started\n"  # the command runs
        job_id = job_id_of(_pending_line(process))
        secure.client("ann").cancel(job_id)
        cancelled_at = time.monotonic()
        code = process.wait(timeout=20)
        assert time.monotonic() - cancelled_at < 8  # promptly: a look a second, then SIGHUP
        stderr = process.stderr.read()
        assert f"salloc: Job allocation {job_id} has been revoked." in stderr, stderr
        assert code == 128 + signal.SIGHUP, stderr
        assert "Relinquishing" not in stderr
    finally:
        if process.poll() is None:
            process.kill()
            process.wait()


def _pending_line(process: subprocess.Popen[str]) -> str:
    assert process.stderr is not None
    line = ""
    while "Pending job allocation" not in line:
        line = process.stderr.readline()
        assert line, "salloc said nothing"
    return line


def test_ctrl_c_while_pending_cancels_the_request(secure: Secure) -> None:
    process = subprocess.Popen(
        [*PYTHON, "salloc", "-H", "-N", "1", *SIZE, "true"],  # held: it waits
        stderr=subprocess.PIPE,
        stdin=subprocess.DEVNULL,
        text=True,
        env=secure.env("ann"),
    )
    try:
        job_id = job_id_of(_pending_line(process))
        assert process.stderr is not None
        assert "queued and waiting for resources (held" in process.stderr.readline()
        process.send_signal(signal.SIGINT)
        assert process.wait(timeout=20) == 1
        assert f"Job allocation {job_id} has been revoked." in process.stderr.read()
        assert secure.client("ann").show(job_id)["state"] == "Cancelled"
    finally:
        if process.poll() is None:
            process.kill()
            process.wait()


def test_only_the_owner_runs_steps_of_a_job_from_outside_it(secure: Secure) -> None:
    """The remote route and stopping a remote task: the job's owner (salloc's srun) may; a
    user of the same tenant and that tenant's admin, who both see the job, may not."""
    ann = secure.client("ann")
    job_id = ann.submit_files(
        [{"name": "hold.sh", "text": "#!/bin/sh\n#SBATCH -t 2\nsleep 120\n"}]
    )["ids"][0]
    deadline = time.monotonic() + 30
    while not (job := ann.show(job_id))["nodes"] or job["state"] != "Running":
        assert time.monotonic() < deadline, job
        time.sleep(0.1)
    launch = {"node": job["nodes"][0], "argv": ["sleep", "60"]}
    try:
        for who in ("ben", "tia"):
            with httpx.Client(base_url=secure.cluster.url, headers=_auth(secure, who)) as http:
                refused = http.post(f"/v1/jobs/{job_id}/remote", json=launch)
                assert refused.status_code == 403, (who, refused.text)
                assert "its owner" in refused.json()["detail"]
                body = {"slots": {launch["node"]: 1}, "tasks": [launch]}
                assert http.post(f"/v1/jobs/{job_id}/steps", json=body).status_code == 403
                assert http.delete(f"/v1/tasks/{job_id}.remote.1").status_code == 403
        with httpx.Client(base_url=secure.cluster.url, headers=_auth(secure, "ann")) as http:
            started = http.post(f"/v1/jobs/{job_id}/remote", json=launch)
            assert started.status_code == 201, started.text
            task_id = started.json()["task_id"]
            assert http.delete(f"/v1/tasks/{task_id}").status_code == 202
    finally:
        ann.cancel(job_id)


def _auth(secure: Secure, who: str) -> dict[str, str]:
    return {"authorization": f"Bearer {secure.tokens[who]}"}


def test_no_shell_leaves_the_allocation_running(secure: Secure) -> None:
    done = salloc(secure, "--no-shell", "-N", "1", *SIZE)
    assert done.returncode == 0, done.stderr
    assert "are ready for job" in done.stderr and "Relinquishing" not in done.stderr
    ann = secure.client("ann")
    job_id = job_id_of(done.stderr)
    assert ann.show(job_id)["state"] == "Running"  # until its time limit or a cancel
    ann.cancel(job_id)
    assert ann.wait(job_id, timeout=20)["state"] == "Cancelled"


def test_steps_under_salloc_share_the_allocations_slots(secure: Secure, scratch: Path) -> None:
    """Steps run from the submit host are given out by the controller as in a batch script:
    a second step of the allocation's one task waits for the first to end. The first holds
    its slot until the second has said it waits (at most 20 s): a fixed sleep let a second
    srun slow to start on a loaded machine come after the first had ended."""
    stamp = "$(date +%s.%N)"
    said = f"{scratch}/second.err"
    first = (
        f"srun sh -c 'touch {scratch}/go; i=0; until grep -q retrying {said} 2>/dev/null "
        f"|| [ $i -ge 200 ]; do sleep 0.1; i=$((i+1)); done; echo first {stamp}'"
    )
    second = f"srun sh -c 'echo second {stamp}' 2>{said}; cat {said} >&2"
    done = salloc(
        secure,
        "-n",
        "1",
        *SIZE,
        "sh",
        "-c",
        f"{first} & until [ -e {scratch}/go ]; do sleep 0.05; done; {second}; wait",
    )
    assert done.returncode == 0, done.stderr
    said = dict(line.split() for line in done.stdout.splitlines())
    assert float(said["second"]) > float(said["first"]), done.stdout  # one after the other
    job_id = job_id_of(done.stderr)
    assert f"srun: Job {job_id} step creation temporarily disabled, retrying" in done.stderr
    assert f"srun: Step created for StepId={job_id}.1" in done.stderr, done.stderr
