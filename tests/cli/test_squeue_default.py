"""``fusesched squeue`` lists what Slurm's squeue lists without ``-t``: the pending, running
and completing jobs, not the ended ones (``squeue -u $USER -h | wc -l`` in a script that
throttles its submissions must fall as jobs end); ``fusesched jobs`` lists every job. Against
a real controller with an agent whose tasks only pretend to run."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
from tests.cli.conftest import pretend_cluster
from typer.testing import CliRunner

from fusesched.cli.main import app
from fusesched.sdk import Client


@pytest.fixture
def url(tmp_path: Path) -> Iterator[str]:
    with pretend_cluster(tmp_path) as found:
        yield found


def submit(client: Client, name: str, seconds: float) -> str:
    request = {
        "name": name,
        "groups": [
            {
                "resources": {"cpu": 1},
                "argv": ["sleep", str(seconds)],
                "env": {"FUSESCHED_FAKE_DURATION": str(seconds)},
            }
        ],
    }
    [job_id] = client.submit(request)
    return str(job_id)


def ids(url: str, *args: str) -> list[str]:
    result = CliRunner().invoke(app, [*args, "-h", "-o", "%i", "--controller", url])
    assert result.exit_code == 0, result.output
    return result.output.split()


def test_squeue_leaves_out_ended_jobs_and_jobs_does_not(url: str) -> None:
    client = Client(url)
    done = submit(client, "quick", 0.05)
    assert client.wait(done, timeout=20)["state"] == "Completed"
    running = submit(client, "long", 60)  # (one CPU: the next one waits for it)
    waiting = submit(client, "next", 60)
    assert sorted(ids(url, "squeue")) == sorted([running, waiting])
    assert sorted(ids(url, "jobs")) == sorted([done, running, waiting])
    assert ids(url, "squeue", "-t", "all") == ids(url, "jobs")
    assert ids(url, "squeue", "-t", "CD") == [done]
    assert ids(url, "squeue", "-j", done) == []  # (as Slurm's: an ended job is not listed)
    assert ids(url, "jobs", "-j", done) == [done]


def test_squeue_prints_squeues_own_layout(url: str) -> None:
    """Called by Slurm's name without ``-o``, squeue's default columns, as people read them
    (and scripts cut them): ``JOBID PARTITION NAME USER ST TIME NODES NODELIST(REASON)``."""
    client = Client(url)
    running = submit(client, "long", 60)
    waiting = submit(client, "next", 60)
    result = CliRunner().invoke(app, ["squeue", "--controller", url])
    assert result.exit_code == 0, result.output
    header, *rows = result.output.splitlines()
    assert header.split() == [
        "JOBID",
        "PARTITION",
        "NAME",
        "USER",
        "ST",
        "TIME",
        "NODES",
        "NODELIST(REASON)",
    ]
    assert header.startswith(" " * 13 + "JOBID PARTITION")  # (%.18i: right-aligned)
    shown = {row.split()[0]: row.split()[4] for row in rows}
    assert shown == {running: "R", waiting: "PD"}


def test_scancel_is_silent_as_slurms_and_cancel_says_what_it_did(url: str) -> None:
    """Slurm's scancel prints nothing when it cancels (scripts run it for its exit status);
    ``fusesched cancel`` says what it cancelled."""
    client = Client(url)
    first, second, third = (submit(client, name, 60) for name in ("a", "b", "c"))
    quiet = CliRunner().invoke(app, ["scancel", first, "--controller", url])
    assert (quiet.exit_code, quiet.output) == (0, "")
    quiet = CliRunner().invoke(app, ["scancel", "-n", "b", "--controller", url])
    assert (quiet.exit_code, quiet.output) == (0, "")
    said = CliRunner().invoke(app, ["cancel", third, "--controller", url])
    assert (said.exit_code, said.output.strip()) == (0, f"Cancelling {third}")
    # (a running job's cancel ends when its agent has stopped it: wait for that)
    ended = {client.wait(j, timeout=20)["state"] for j in (first, second, third)}
    assert ended == {"Cancelled"}
