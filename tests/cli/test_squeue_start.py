"""``squeue --start`` as Slurm 22.05's (checked against a real one): it is ``-t PENDING -S S``
in its own layout, so ``-j``, ``-n`` and ``-t`` narrow or change it, a held job is listed
with ``N/A`` and ``(null)`` (``GET /v1/starts`` leaves it out), and ``--limit`` cuts the
listing after its order, saying so. Against a real controller whose agent only pretends to
run its tasks (one CPU: the second job waits for the first). cli/squeue_start.py."""

from __future__ import annotations

import re
import time
from collections.abc import Iterator
from typing import Any

import pytest
from tests.cli.conftest import pretend_cluster
from typer.testing import CliRunner

from fusesched.cli.main import app
from fusesched.sdk import Client

STAMP = r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d"


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[str, dict[str, str]]]:
    """The controller's URL and its jobs: ``running``, ``waiting``, ``held`` (submitted
    held), ``later`` (waits behind ``waiting``)."""
    with pretend_cluster(tmp_path_factory.mktemp("start")) as url:
        client = Client(url)
        ids = {"running": submit(client, "running")}
        until = time.monotonic() + 20
        while client.show(ids["running"])["state"] != "Running":
            assert time.monotonic() < until
            time.sleep(0.05)
        ids["waiting"] = submit(client, "waiting")
        ids["held"] = submit(client, "held", hold=True)
        ids["later"] = submit(client, "later")
        until = time.monotonic() + 20
        while len(client.starts()["jobs"]) < 2:  # (the projection holds both waiting jobs)
            assert time.monotonic() < until
            time.sleep(0.05)
        yield url, ids


def submit(client: Client, name: str, **extra: Any) -> str:
    request = {
        "name": name,
        "walltime_s": 600,
        "groups": [
            {
                "resources": {"cpu": 1, "memory": "256Mi"},
                "argv": ["sleep", "60"],
                "env": {"FUSESCHED_FAKE_DURATION": "60"},
            }
        ],
        **extra,
    }
    [job_id] = client.submit(request)
    return str(job_id)


def cli(url: str, *args: str, code: int = 0) -> tuple[str, str]:
    result = CliRunner().invoke(app, [*args, "--controller", url])
    assert result.exit_code == code, result.output
    return result.stdout, result.stderr


def rows(url: str, *args: str) -> list[list[str]]:
    out, _ = cli(url, "squeue", "--start", "-h", "-o", "%i|%j|%t|%S|%Y|%r", *args)
    return [line.split("|") for line in out.splitlines()]


def test_held_jobs_are_listed_without_a_start(cluster: tuple[str, dict[str, str]]) -> None:
    url, ids = cluster
    found = rows(url)
    assert [r[1] for r in found] == ["waiting", "later", "held"]  # (soonest first, N/A last)
    assert all(re.fullmatch(STAMP, r[3]) and r[4] == "n1" for r in found[:2]), found
    assert found[0][3] < found[1][3]
    assert found[2] == [ids["held"], "held", "PD", "N/A", "(null)", "JobHeldUser"]
    default, _ = cli(url, "squeue", "--start")
    assert default.splitlines()[-1].split()[5:] == ["N/A", "1", "(null)", "(JobHeldUser)"]


def test_jobs_names_and_states_narrow_it(cluster: tuple[str, dict[str, str]]) -> None:
    url, ids = cluster
    assert [r[1] for r in rows(url, "-j", f"{ids['held']},{ids['waiting']}")] == [
        "waiting",
        "held",
    ]
    assert rows(url, "-j", ids["running"]) == []  # (running: not pending, as Slurm's)
    assert [r[1] for r in rows(url, "-n", "later")] == ["later"]
    (running,) = rows(url, "-t", "R")
    assert running[:3] == [ids["running"], "running", "R"] and re.fullmatch(STAMP, running[3])
    assert [r[1] for r in rows(url, "-t", "all", "-S", "-i")] == [
        "later",
        "held",
        "waiting",
        "running",
    ]
    out, err = cli(url, "squeue", "--start", "-j", "99999", code=1)
    assert (out, err.strip()) == ("", "slurm_load_jobs error: Invalid job id specified")


def test_limit_cuts_after_the_order_and_says_so(cluster: tuple[str, dict[str, str]]) -> None:
    url, _ = cluster
    out, err = cli(url, "squeue", "--start", "--limit", "1", "-o", "%j")
    assert out.split() == ["NAME", "waiting"]
    assert "showing the first 1 of 3 rows" in err
    out, err = cli(url, "squeue", "--start", "--limit", "1", "-h", "-o", "%j")
    assert (out, err) == ("waiting\n", "")  # (-h: lines for a script, nothing else)


def test_fusesched_jobs_start_keeps_its_table_and_its_limits(
    cluster: tuple[str, dict[str, str]],
) -> None:
    url, ids = cluster
    _, err = cli(url, "jobs", "--start", "-j", ids["held"], code=2)
    assert "leave out --state, --jobs and --name" in err
