"""``fusesched run`` (srun outside an allocation), ``sbatch --parsable`` and ``sbatch/submit
--wait`` as a user types them (real subprocesses), against a live cluster of real agents."""

from __future__ import annotations

import json
import signal
import subprocess
import time
from pathlib import Path

import pytest
from tests.live.test_cli import PYTHON, fusesched

from fusesched.cli.local import LocalCluster
from fusesched.sdk import Client


@pytest.fixture(params=["python", "native"])
def command(request: pytest.FixtureRequest) -> list[str]:
    """The Python ``fusesched`` command and the native front (which hands these options and
    scripts that give them over to Python)."""
    if request.param == "python":
        return PYTHON
    return [str(request.getfixturevalue("native_front"))]


def run_in(
    cwd: Path, cluster: LocalCluster | None, cmd: list[str], *args: str
) -> subprocess.CompletedProcess[str]:
    url = cluster.url if cluster is not None else "http://127.0.0.1:9"
    return subprocess.run(
        [*cmd, *args],
        capture_output=True,
        text=True,
        timeout=60,
        cwd=cwd,
        env={"FUSESCHED_CONTROLLER": url, "PATH": "/usr/bin:/bin", "COLUMNS": "200"},
    )


def test_parsable_prints_only_the_ids(
    cluster: LocalCluster, tmp_path: Path, command: list[str]
) -> None:
    client = Client(cluster.url)
    wrapped = run_in(tmp_path, cluster, command, "sbatch", "--parsable", "--wrap=echo hi")
    assert wrapped.returncode == 0, wrapped.stderr
    job_id = wrapped.stdout.strip()
    assert wrapped.stdout == f"{job_id}\n" and job_id.isdigit()
    assert client.wait(job_id, timeout=30)["state"] == "Completed"

    (tmp_path / "job.sh").write_text("#!/bin/sh\n#SBATCH --parsable\n#SBATCH -t 1\necho s\n")
    (tmp_path / "job.yaml").write_text(
        "name: y\nresources: {cpu: 1, memory: 32Mi}\ncommand: [sh, -c, 'echo y']\n"
    )
    script = run_in(tmp_path, cluster, command, "sbatch", "job.sh")  # from the script
    assert script.returncode == 0, script.stderr
    assert script.stdout.strip().isdigit() and script.stdout.count("\n") == 1
    many = run_in(tmp_path, cluster, command, "submit", "--parsable", "job.yaml", "job.sh")
    assert many.returncode == 0, many.stderr
    ids = many.stdout.split("\n")
    assert ids[-1] == "" and len(ids) == 3 and all(i.isdigit() for i in ids[:2])
    both = run_in(tmp_path, cluster, command, "sbatch", "--parsable", "--json", "job.sh")
    assert both.returncode == 2 and "not both" in both.stderr


def test_sbatch_wait_exits_with_the_jobs_code(
    cluster: LocalCluster, tmp_path: Path, command: list[str]
) -> None:
    failed = run_in(tmp_path, cluster, command, "sbatch", "--wait", "--wrap=exit 3")
    assert failed.returncode == 3, failed.stderr
    assert failed.stdout.startswith("Submitted batch job ")
    assert "failed with exit code 3" in failed.stderr and "exit status 3" in failed.stderr
    ok = run_in(tmp_path, cluster, command, "sbatch", "-W", "--parsable", "--wrap=true")
    assert ok.returncode == 0, ok.stderr
    job_id = ok.stdout.strip()
    assert ok.stdout == f"{job_id}\n"  # progress goes to stderr only
    assert f"job {job_id} completed" in ok.stderr
    (tmp_path / "job.sh").write_text("#!/bin/sh\n#SBATCH --wait\nexit 4\n")
    scripted = run_in(tmp_path, cluster, command, "sbatch", "job.sh")
    assert scripted.returncode == 4, scripted.stderr


def test_array_and_submit_wait(cluster: LocalCluster, tmp_path: Path) -> None:
    array = run_in(
        tmp_path,
        cluster,
        PYTHON,
        "sbatch",
        "--wait",
        "-a",
        "0-2",
        "--wrap=exit $SLURM_ARRAY_TASK_ID",
    )
    assert array.returncode == 2, array.stderr
    job_id = array.stdout.split()[-1]
    # the array is followed as a whole (one listing of its unfinished members per round);
    # the members that did not complete are named
    assert f"array {job_id}: all 3 members have ended" in array.stderr
    for index in (1, 2):
        assert f"job {job_id}_{index} failed with exit code {index}" in array.stderr
    assert f"job {job_id}_0 " not in array.stderr
    assert "2 of 3 jobs did not complete" in array.stderr
    client = Client(cluster.url)
    assert {client.show(f"{job_id}_{i}")["state"] for i in range(3)} == {"Completed", "Failed"}
    members = client.jobs(array=job_id, limit=10)  # GET /v1/jobs?array=ID: its members only
    assert sorted(m["id"] for m in members) == [f"{job_id}_{i}" for i in range(3)]
    listed = run_in(tmp_path, cluster, PYTHON, "jobs", "--array", job_id, "--json")
    assert sorted(m["id"] for m in json.loads(listed.stdout)) == sorted(m["id"] for m in members)
    assert [m["id"] for m in client.jobs(array=job_id, states=["Failed"])] == [
        f"{job_id}_2",
        f"{job_id}_1",
    ]

    (tmp_path / "ok.yaml").write_text(
        "name: ok\nresources: {cpu: 1, memory: 32Mi}\ncommand: [sh, -c, 'exit 0']\n"
    )
    (tmp_path / "cut.sh").write_text("#!/bin/sh\n#SBATCH -t 0:01\nsleep 30\n")
    waited = run_in(tmp_path, cluster, PYTHON, "submit", "--wait", "ok.yaml", "cut.sh")
    assert waited.returncode == 1, waited.stderr  # timed out: 1, and said
    assert "reached its time limit" in waited.stderr
    # after the script, -W is the script's argument (as Slurm's): not waited on
    after = run_in(tmp_path, cluster, PYTHON, "sbatch", "--parsable", "cut.sh", "-W")
    assert after.returncode == 0 and after.stdout.strip().isdigit(), after.stderr
    test_only = run_in(tmp_path, cluster, PYTHON, "sbatch", "--test-only", "-W", "cut.sh")
    assert test_only.returncode == 2 and "submits nothing" in test_only.stderr


def test_run_prints_the_output_and_exits_with_the_code(
    cluster: LocalCluster, tmp_path: Path, scratch: Path
) -> None:
    """``run``'s tasks start where it runs (``scratch``: a folder their user can enter)."""
    hello = run_in(scratch, cluster, PYTHON, "run", "echo", "hello")
    assert hello.returncode == 0, hello.stderr
    assert hello.stdout == "hello\n"
    assert "started on node-" in hello.stderr
    client = Client(cluster.url)
    assert client.jobs()[0]["name"] == "echo"  # named after the command
    # by Slurm's name: nothing on stderr for a job that did not wait (scripts capture it:
    # `srun hostname 2>&1`), and its errors said as srun's
    quiet = run_in(scratch, cluster, PYTHON, "srun", "echo", "hi")
    assert (quiet.returncode, quiet.stdout, quiet.stderr) == (0, "hi\n", "")
    failing = run_in(scratch, cluster, PYTHON, "srun", "sh", "-c", "exit 3")
    assert failing.returncode == 3 and failing.stderr.startswith("srun: job "), failing.stderr

    labelled = run_in(
        scratch, cluster, PYTHON, "run", "-n", "2", "-l", "sh", "-c", "echo rank $RANK"
    )
    assert labelled.returncode == 0, labelled.stderr
    assert sorted(labelled.stdout.splitlines()) == ["0: rank 0", "1: rank 1"]
    # Slurm's variables, as srun's tasks have them (scripts written for Slurm read them)
    ranks = "echo $SLURM_PROCID of $SLURM_NTASKS in $SLURM_JOB_ID, $SLURM_CPUS_PER_TASK cpu"
    slurm = run_in(scratch, cluster, PYTHON, "run", "-n", "2", "-l", "sh", "-c", ranks)
    job_id = client.jobs()[0]["id"]
    assert sorted(slurm.stdout.splitlines()) == [
        f"0: 0 of 2 in {job_id}, 1 cpu",
        f"1: 1 of 2 in {job_id}, 1 cpu",
    ], slurm.stderr
    script = "echo $SLURM_JOB_ID $SLURM_NTASKS $SLURM_NNODES $SLURM_PROCID $SLURM_CPUS_PER_TASK"
    batch = run_in(tmp_path, cluster, PYTHON, "sbatch", "-W", "-n2", "-c1", "--wrap", script)
    batch_id = batch.stdout.split()[-1]
    # the batch step's line (last: as root, a line first says it runs in its task folder, as
    # tmp_path is root's own, which its user cannot enter)
    assert client.logs(batch_id).splitlines()[-1].split() == [batch_id, "2", "1", "0", "1"]
    both = run_in(scratch, cluster, PYTHON, "run", "-n2", "-Q", "sh", "-c", "echo rank $RANK")
    assert sorted(both.stdout.splitlines()) == ["rank 0", "rank 1"]  # every task's output
    assert both.stderr == ""  # -Q: none of run's messages

    seven = run_in(scratch, cluster, PYTHON, "run", "sh", "-c", "echo out; exit 7")
    assert seven.returncode == 7 and seven.stdout == "out\n"
    assert "failed with exit code 7" in seven.stderr

    late = run_in(scratch, cluster, PYTHON, "run", "-t", "0:02", "sh", "-c", "echo a; sleep 60")
    assert late.returncode == 1, late.stderr
    assert late.stdout == "a\n"
    assert "reached its time limit (00:00:02)" in late.stderr


def test_run_prints_a_large_last_burst_whole(cluster: LocalCluster, scratch: Path) -> None:
    """An agent sends a task's output a chunk at a time, so much of what a job writes just
    before it ends reaches the controller after its end: run still prints all of it."""
    burst = run_in(
        scratch,
        cluster,
        PYTHON,
        "run",
        "-Q",
        "sh",
        "-c",
        "head -c 3000000 /dev/zero | tr '\\0' a; echo; printf end",
    )
    assert burst.returncode == 0, burst.stderr
    assert len(burst.stdout) == 3_000_004 and burst.stdout.endswith("a\nend")


def test_ctrl_c_cancels_the_job(cluster: LocalCluster, tmp_path: Path) -> None:
    proc = subprocess.Popen(
        [*PYTHON, "run", "-J", "sleeper", "sleep", "100"],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        cwd=tmp_path,
        env={"FUSESCHED_CONTROLLER": cluster.url, "PATH": "/usr/bin:/bin"},
    )
    client = Client(cluster.url)
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        found = client.jobs()
        if found and found[0]["state"] == "Running":
            break
        time.sleep(0.2)
    job_id = client.jobs()[0]["id"]
    time.sleep(0.5)  # (run has seen it start)
    proc.send_signal(signal.SIGINT)
    _, stderr = proc.communicate(timeout=30)
    assert proc.returncode == 130, stderr
    assert f"run: cancelling job {job_id}" in stderr
    assert "Traceback" not in stderr
    assert client.wait(job_id, timeout=30)["state"] == "Cancelled"


def test_bad_input(cluster: LocalCluster, tmp_path: Path) -> None:
    nothing = run_in(tmp_path, cluster, PYTHON, "run", "-n", "2")
    assert nothing.returncode == 2 and "no command given" in nothing.stderr
    unknown = run_in(tmp_path, cluster, PYTHON, "run", "--frobnicate", "x", "true")
    assert unknown.returncode == 2 and "unknown option --frobnicate" in unknown.stderr
    bad = run_in(tmp_path, cluster, PYTHON, "run", "-t", "soon", "true")
    assert bad.returncode == 2 and "cannot read time" in bad.stderr
    assert Client(cluster.url).jobs() == []
    helped = run_in(tmp_path, cluster, PYTHON, "run", "--help")
    assert helped.returncode == 0 and "srun" in helped.stdout
    away = fusesched(None, "run", "true")
    assert away.returncode == 1 and "cannot reach the controller" in away.stderr
    away_wait = fusesched(None, "sbatch", "--wait", "--wrap=true")
    assert away_wait.returncode == 1 and "cannot reach the controller" in away_wait.stderr
