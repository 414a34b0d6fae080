"""By Slurm's name, ``squeue`` without ``--limit`` lists every job, as Slurm's squeue does (a
script that counts its jobs, ``squeue -u $USER -h | wc -l``, must count them all), reading a
page of 1,000 after another; ``fusesched jobs`` keeps its 50. Against a real controller whose
agent only pretends to run its tasks. cli/job_list._list, cli/squeue_plan._limit."""

from __future__ import annotations

import time
from collections.abc import Iterator

import pytest
from tests.cli.conftest import pretend_cluster
from typer.testing import CliRunner

from fusesched.cli import job_list
from fusesched.cli.main import app
from fusesched.sdk import Client

#: Two arrays of this many members: more than one page (1,000) in all.
MEMBERS = 560


@pytest.fixture(scope="module")
def url(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    with pretend_cluster(tmp_path_factory.mktemp("every")) as where:
        client = Client(where)
        for name in ("first", "second"):
            client.submit(
                {
                    "name": name,
                    "walltime_s": 600,
                    "hold": True,  # (all wait: none starts while the test reads)
                    "array": {"start": 0, "stop": MEMBERS - 1},
                    "groups": [{"resources": {"cpu": 1, "memory": "64Mi"}, "argv": ["true"]}],
                }
            )
        yield where


def cli(url: str, *args: str) -> tuple[list[str], str]:
    result = CliRunner().invoke(app, [*args, "--controller", url])
    assert result.exit_code == 0, result.output
    return result.stdout.splitlines(), result.stderr


def test_squeue_lists_every_job_over_pages(url: str) -> None:
    members, err = cli(url, "squeue", "-r", "-h", "-o", "%i")
    assert len(members) == len(set(members)) == 2 * MEMBERS and err == ""
    assert {m.split("_")[1] for m in members} == {str(i) for i in range(MEMBERS)}
    rows, _ = cli(url, "squeue", "-h", "-o", "%i|%j")  # (each array's waiting members: a row)
    assert sorted(row.split("|")[1] for row in rows) == ["first", "second"]
    cut, note = cli(url, "squeue", "-r", "--limit", "7", "-o", "%i")
    assert len(cut) == 8 and "showing the newest 7 rows" in note  # (a header, 7 rows)


def test_fusesched_jobs_keeps_its_default_of_fifty(url: str) -> None:
    members, err = cli(url, "jobs", "-r", "-h", "-o", "%i")
    assert len(members) == 50 and err == ""


def test_squeue_leaves_out_jobs_ended_longer_ago_than_min_job_age(
    tmp_path_factory: pytest.TempPathFactory, monkeypatch: pytest.MonkeyPatch
) -> None:
    """As Slurm's controller forgets an ended job after MinJobAge (300 s), ``squeue -t all``
    lists the jobs ended since then only (``sacct`` has the rest); ``jobs -t all`` all."""
    monkeypatch.setattr(job_list, "MIN_JOB_AGE_S", 1.5)
    with pretend_cluster(tmp_path_factory.mktemp("aged")) as where:
        client = Client(where)
        done = {"resources": {"cpu": 1, "memory": "64Mi"}, "argv": ["true"]}
        [ended] = client.submit({"name": "ended", "groups": [done]})
        until = time.monotonic() + 20
        while client.show(str(ended))["state"] != "Completed":
            assert time.monotonic() < until
            time.sleep(0.05)
        assert cli(where, "squeue", "-t", "all", "-h", "-o", "%j")[0] == ["ended"]
        time.sleep(2)
        client.submit({"name": "held", "hold": True, "groups": [done]})
        assert cli(where, "squeue", "-t", "all", "-h", "-o", "%j")[0] == ["held"]
        assert cli(where, "jobs", "-t", "all", "-h", "-o", "%j")[0] == ["held", "ended"]
