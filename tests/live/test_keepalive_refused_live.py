"""A ``fusesched salloc`` whose token is revoked while it holds its allocation (a real process
against a live controller with authentication and ``--inactive-limit 2``): its keepalive's
pings are refused (401), and it says so on stderr — it no longer holds the job, which the
limit then ends — instead of stopping silently."""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import time
from collections.abc import Iterator

import pytest
from tests.live.test_salloc_live import PYTHON, SIZE

from fusesched.cli.local import LocalCluster
from fusesched.sdk import Client

from .conftest import local_cluster

SAID = "the controller refused to hear that this command still holds job"


@pytest.fixture(scope="module")
def secured(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LocalCluster]:
    data = tmp_path_factory.mktemp("keepalive") / "data"
    with local_cluster(data, lambda a: a[:1], auth=True, inactive_limit_s=2) as cluster:
        yield cluster


def test_a_revoked_token_stops_the_pings_and_salloc_says_so(secured: LocalCluster) -> None:
    admin = Client(secured.url, token=secured.admin_token)
    made = admin.create_token("dan", tenant="lab")
    env = {
        "FUSESCHED_CONTROLLER": secured.url,
        "FUSESCHED_TOKEN": made["token"],
        "PATH": "/usr/bin:/bin",
        "HOME": "/nonexistent",
        "COLUMNS": "400",  # (the warning on one line)
    }
    process = subprocess.Popen(
        [*PYTHON, "salloc", "-N", "1", *SIZE, "sh", "-c", "echo $$; exec sleep 60"],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        stdin=subprocess.DEVNULL,
        text=True,
        env=env,
    )
    command_pid = 0
    try:
        assert process.stdout is not None and process.stderr is not None
        command_pid = int(process.stdout.readline())  # the command runs: the job is granted
        admin.revoke_token(made["id"])
        deadline = time.monotonic() + 30
        said: list[str] = []
        while not any(SAID in line for line in said):
            assert time.monotonic() < deadline, said
            line = process.stderr.readline()
            assert line, f"salloc ended without saying it: {said}"
            said.append(line)
        assert "(HTTP 401:" in said[-1] and "may end the job" in said[-1], said[-1]
    finally:
        process.kill()
        process.wait()
        if command_pid:  # (salloc's command, in a process group of its own, outlives it)
            with contextlib.suppress(ProcessLookupError):
                os.kill(command_pid, signal.SIGKILL)
