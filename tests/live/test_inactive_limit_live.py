"""Slurm's InactiveLimit as a user meets it (real ``fusesched salloc`` and ``fusesched run``
processes against a live controller started with ``--inactive-limit 2`` and a real agent): a
salloc or run killed outright (SIGKILL) no longer holds its job, which ends TIMEOUT with the
reason ``InactiveLimit`` within the limit and a check or two; a salloc that lives on, running a
command longer than the limit, keeps its allocation; a batch job is never ended by it."""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from tests.live.test_salloc_live import PYTHON, SIZE, job_id_of

from fusesched.cli.keepalive import Attended, Keepalive
from fusesched.cli.local import LocalCluster
from fusesched.controller.inactive import ping_every
from fusesched.sdk import Client

from .conftest import local_cluster

LIMIT_S = 2
#: A job that waits (held) until it is cancelled.
HELD = {"hold": True, "groups": [{"resources": {"cpu": 1}, "argv": ["true"]}]}
#: How long after the kill the job must have ended: the limit, a check (every limit/4), the
#: loop's wake-up (at most 1 s), a heartbeat's long poll (0.5 s) and the exit's report.
ENDS_WITHIN_S = LIMIT_S + 4


@pytest.fixture(scope="module")
def limited(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LocalCluster]:
    data = tmp_path_factory.mktemp("inactive") / "data"
    with local_cluster(data, lambda a: a[:1], inactive_limit_s=LIMIT_S) as cluster:
        yield cluster


def env(cluster: LocalCluster) -> dict[str, str]:
    return {"FUSESCHED_CONTROLLER": cluster.url, "PATH": "/usr/bin:/bin", "HOME": "/nonexistent"}


def started(cluster: LocalCluster, command: str, *args: str) -> subprocess.Popen[str]:
    return subprocess.Popen(
        [*PYTHON, command, *args],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        stdin=subprocess.DEVNULL,
        text=True,
        env=env(cluster),
    )


def ended_by_the_limit(client: Client, job_id: str, killed_at: float) -> dict[str, object]:
    job = client.wait(job_id, timeout=30)
    took = time.monotonic() - killed_at
    assert (job["state"], job["phase"]) == ("Failed", "timeout"), job
    reason = str(job["reason"])
    assert reason.startswith("InactiveLimit: the salloc/run holding the allocation "), reason
    assert "stopped answering for" in reason and f"is {LIMIT_S} s" in reason, reason
    assert LIMIT_S - ping_every(LIMIT_S) <= took < ENDS_WITHIN_S, took  # (from its last ping)
    return job


def test_a_killed_salloc_no_longer_holds_its_allocation(limited: LocalCluster) -> None:
    process = started(limited, "salloc", "-N", "1", *SIZE, "sh", "-c", "echo $$; exec sleep 120")
    command_pid = 0
    try:
        assert process.stdout is not None and process.stderr is not None
        command_pid = int(process.stdout.readline())  # the command runs: the job is granted
        job_id = job_id_of(process.stderr.readline())
        process.kill()
        killed_at = time.monotonic()
        process.wait()
        ended_by_the_limit(Client(limited.url), job_id, killed_at)
        shown = subprocess.run(
            [*PYTHON, "sacct", "-j", job_id, "-o", "State,Reason%120", "-P", "-n"],
            capture_output=True,
            text=True,
            timeout=30,
            env=env(limited),
        )
        assert shown.returncode == 0, shown.stderr
        assert shown.stdout.startswith("TIMEOUT|InactiveLimit: "), shown.stdout
    finally:
        if process.poll() is None:
            process.kill()
            process.wait()
        if command_pid:  # (salloc's command, in a process group of its own, outlives it)
            with contextlib.suppress(ProcessLookupError):
                os.kill(command_pid, signal.SIGKILL)


def test_a_killed_run_no_longer_holds_its_job(limited: LocalCluster, tmp_path: Path) -> None:
    process = started(limited, "run", "-n", "1", *SIZE, "sh", "-c", "echo up; exec sleep 120")
    try:
        assert process.stdout is not None and process.stderr is not None
        assert process.stdout.readline() == "up\n"  # its task runs
        said = ""
        while "started on" not in said:
            said = process.stderr.readline()
            assert said, "run said nothing"
        job_id = said.split()[2]
        process.kill()
        killed_at = time.monotonic()
        process.wait()
        ended_by_the_limit(Client(limited.url), job_id, killed_at)
    finally:
        if process.poll() is None:
            process.kill()
            process.wait()


def test_a_live_salloc_and_a_batch_job_outlive_the_limit(limited: LocalCluster) -> None:
    client = Client(limited.url)
    batch = client.submit_files(
        [{"name": "b.sh", "text": "#!/bin/sh\n#SBATCH -t 1 --mem-per-cpu=64M\nsleep 4\n"}]
    )["ids"][0]
    done = subprocess.run(
        [*PYTHON, "salloc", "-N", "1", *SIZE, "sleep", str(2 * LIMIT_S + 1)],
        capture_output=True,
        text=True,
        timeout=60,
        stdin=subprocess.DEVNULL,
        env=env(limited),
    )
    assert done.returncode == 0, done.stderr
    assert "revoked" not in done.stderr, done.stderr
    job = client.wait(job_id_of(done.stderr), timeout=20)
    assert (job["state"], job["exit_code"]) == ("Completed", 0), job
    assert client.wait(batch, timeout=20)["state"] == "Completed"


def test_the_keepalive_stops_when_the_controller_refuses(limited: LocalCluster) -> None:
    """A job that nothing holds (a batch job): the first ping is refused and the thread ends,
    saying why; an attended one is pinged at the pace the controller asks for."""
    client = Client(limited.url)
    batch = client.submit_files(
        [{"name": "b.sh", "text": "#!/bin/sh\n#SBATCH -t 1 --mem-per-cpu=64M\ntrue\n"}]
    )["ids"][0]
    refused = Keepalive(client, batch).start()
    assert refused.ended(timeout=10) and refused.pings == 0
    assert refused.refused is not None and "not submitted attended" in refused.refused
    held = Attended(client.submit, pytest.fail)(dict(HELD))
    pinging = Keepalive(client, held).start()
    try:
        time.sleep(1.0)
        assert pinging.pings >= 2  # (every 0.4 s under a 2 s limit)
    finally:
        pinging.stop()
        client.cancel(held)
    assert client.wait(held, timeout=20)["state"] == "Cancelled"  # (not the limit's doing)
