"""Shells inside allocations, as a person types them, against a live controller with
authentication and two real agents: ``fusesched salloc`` then ``srun --pty bash`` lands on the
allocated node; ``fusesched run --jobid ID --overlap --pty bash`` attaches a shell to a
running batch job (its owner's only: another user gets 403); ``~.`` leaves a terminal."""

from __future__ import annotations

import subprocess
import sys
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest
from tests.live.conftest import local_cluster, scratch  # noqa: F401 (a fixture)
from tests.live.test_run_pty_live import PROMPT, Typist, prompted

from fusesched.cli.local import LocalCluster
from fusesched.sdk import Client

PYTHON = [sys.executable, "-m", "fusesched"]
SIZE = ["--mem-per-cpu=64M", "-t", "2"]


@dataclass
class Secure:
    cluster: LocalCluster
    tokens: dict[str, str]

    def client(self, who: str) -> Client:
        return Client(self.cluster.url, token=self.tokens[who])

    def env(self, who: str) -> dict[str, str]:
        return {"FUSESCHED_TOKEN": self.tokens[who], "HOME": "/nonexistent"}


@pytest.fixture(scope="module")
def secure(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Secure]:
    data = tmp_path_factory.mktemp("step-pty") / "data"
    with local_cluster(data, lambda a: a[:2], auth=True) as cluster:
        admin = Client(cluster.url, token=cluster.admin_token)
        tokens = {who: admin.create_token(who, tenant="lab")["token"] for who in ("ann", "ben")}
        yield Secure(cluster, tokens)


def test_srun_pty_in_an_allocation_runs_a_shell_on_its_node(secure: Secure) -> None:
    command = [*PYTHON, "salloc", "-Q", "-N", "1", "-w", "node-b", *SIZE]
    typist = Typist(
        secure.cluster,
        command=[*command, "srun", "--pty", "bash", "--norc", "-i"],
        env=secure.env("ann"),
    )
    try:
        prompted(typist)
        typist.type("echo on=$SLURMD_NODENAME job=$SLURM_JOB_ID; tty; exit 4\r")
        code, shown = typist.finish(60)
    finally:
        typist.kill()
    assert code == 4, shown
    (job,) = secure.client("ann").jobs(limit=1)
    assert f"on=node-b job={job['id']}\r\n".encode() in shown, shown
    assert b"\r\n/dev/pts/" in shown


def sleeping_job(secure: Secure, folder: Path) -> str:
    """A batch job of ann's that sleeps on node-b, submitted from ``folder``, once it runs."""
    done = subprocess.run(
        [*PYTHON, "sbatch", "--parsable", "-w", "node-b", *SIZE, "--wrap", "sleep 120"],
        capture_output=True,
        text=True,
        env={"FUSESCHED_CONTROLLER": secure.cluster.url, "PATH": "/usr/bin:/bin"}
        | secure.env("ann"),
        cwd=folder,
        timeout=60,
    )
    assert done.returncode == 0, done.stderr
    job_id = done.stdout.strip().split(";")[0]
    deadline = time.monotonic() + 60
    while secure.client("ann").show(job_id)["state"] != "Running":
        assert time.monotonic() < deadline, f"job {job_id} did not start"
        time.sleep(0.2)
    return job_id


def test_a_shell_attaches_to_a_running_job_its_owners_only(
    secure: Secure,
    scratch: Path,  # noqa: F811 (the fixture)
) -> None:
    job_id = sleeping_job(secure, scratch)
    try:
        args = ["--jobid", job_id, "--overlap", "--pty", "bash", "--norc", "-i"]
        typist = Typist(secure.cluster, *args, env=secure.env("ann"), cwd=scratch)
        try:
            prompted(typist)
            typist.type("echo id=$FUSESCHED_JOB_ID on=$SLURMD_NODENAME; pwd\r")
            shown = typist.read_until(PROMPT)
            typist.type("exit 5\r")
            code, _ = typist.finish(60)
        finally:
            typist.kill()
        assert code == 5, shown
        assert f"id={job_id} on=node-b\r\n{scratch}\r\n".encode() in shown, shown
        wide = secure.env("ben") | {"COLUMNS": "400"}  # (the error on one line)
        stranger = Typist(secure.cluster, *args, env=wide, cwd=scratch)
        code, shown = stranger.finish(60)
        assert code == 1, shown
        said = f"run: error: cannot start the step: only job {job_id}'s own credential or its "
        assert f"{said}owner may run its steps\r\n".encode() in shown, shown  # (the 403's)
        assert secure.client("ann").show(job_id)["state"] == "Running"  # (left alone)
    finally:
        secure.client("ann").cancel(job_id)


def test_tilde_dot_leaves_a_terminal_restored(secure: Secure) -> None:
    typist = prompted(
        Typist(secure.cluster, "--pty", "bash", "--norc", "-i", env=secure.env("ann"))
    )
    try:
        (job,) = secure.client("ann").jobs(limit=1)
        assert not typist.cooked()
        typist.type("\r~.")
        typist.process.wait(30)
        assert typist.cooked()
        code, shown = typist.finish()
    finally:
        typist.kill()
    assert code == 255, shown
    final = secure.client("ann").wait(job["id"], timeout=30)
    assert final["state"] == "Cancelled", final


def test_srun_pty_inside_a_terminal_job_uses_the_jobs_credential(secure: Secure) -> None:
    """``srun --pty`` typed in a ``run --pty`` shell: a step of that job, asked for and
    relayed with the job's own credential (the node has no person's token)."""
    typist = prompted(
        Typist(secure.cluster, "--pty", "bash", "--norc", "-i", env=secure.env("ann"))
    )
    try:
        typist.type("srun --pty bash --norc -i\r")
        typist.read_until(b"$ ", 60)
        typist.type("echo inner=$SLURM_STEP_ID token=${FUSESCHED_TOKEN:-none}; exit 6\r")
        inner = typist.read_until(PROMPT)
        typist.type("echo outer=$?; exit\r")
        code, shown = typist.finish(60)
    finally:
        typist.kill()
    assert b"inner=0 token=none\r\n" in inner, inner
    assert b"outer=6\r\n" in shown and code == 0, shown
