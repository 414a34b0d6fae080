"""``squeue`` by Slurm's name pages through every job (cli/job_list._list): each page asked
for with the arrays' waiting members combined by the controller (one row an array, read
once, with its throttle ``%2``, each row on one page only), and a job that ended before
MinJobAge ago is one Slurm's controller no longer knows (``-j`` of it: Slurm's error).
Against a real controller whose agent only pretends to run its tasks."""

from __future__ import annotations

import time
from collections.abc import Iterator
from typing import Any

import pytest
from tests.cli.conftest import pretend_cluster
from typer.testing import CliRunner

from fusesched.cli import job_list
from fusesched.cli.main import app
from fusesched.sdk import Client

#: Jobs of no array between the two arrays: more than one page (1,000 rows) in all.
SINGLES = 1200
HELD: dict[str, Any] = {
    "walltime_s": 600,
    "hold": True,  # (all wait: none starts while the test reads)
    "groups": [{"resources": {"cpu": 1, "memory": "64Mi"}, "argv": ["true"]}],
}


class Counting(Client):
    """The SDK's client, counting its ``GET /v1/jobs`` and efficiency calls."""

    calls = 0
    efficiencies = 0

    def jobs(self, *args: Any, **kwargs: Any) -> list[dict[str, Any]]:
        self.calls += 1
        return super().jobs(*args, **kwargs)

    def efficiency(self, job_id: str) -> dict[str, Any]:
        self.efficiencies += 1
        return super().efficiency(job_id)


@pytest.fixture(scope="module")
def url(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    with pretend_cluster(tmp_path_factory.mktemp("pages")) as where:
        client = Client(where)
        client.submit({**HELD, "name": "old", "array": {"start": 0, "stop": 4, "max_parallel": 2}})
        client.submit_many([{**HELD, "name": f"s{i}"} for i in range(SINGLES)])
        client.submit({**HELD, "name": "new", "array": {"start": 0, "stop": 999}})
        yield where


def cli(url: str, *args: str, code: int = 0) -> tuple[list[str], str]:
    result = CliRunner().invoke(app, [*args, "--controller", url])
    assert result.exit_code == code, result.output
    return result.stdout.splitlines(), result.stderr


def test_pages_hold_each_row_once_and_an_arrays_throttle(url: str) -> None:
    rows, err = cli(url, "squeue", "-h", "-o", "%i|%j")
    assert len(rows) == len(set(rows)) == SINGLES + 2 and err == ""
    arrays = {row.split("|")[1]: row.split("|")[0] for row in rows if "[" in row}
    assert arrays["old"] == "1_[0-4%2]" and arrays["new"].endswith("_[0-999]")
    members, _ = cli(url, "squeue", "-r", "-h", "-o", "%i")
    assert len(members) == len(set(members)) == SINGLES + 1005


def test_an_arrays_waiting_members_are_read_as_one_row(url: str) -> None:
    """1,000 waiting members are one row of the controller's: two pages, not three."""
    from fusesched.cli.squeue_plan import EVERY, Filters

    client = Counting(url)
    filters = Filters([], None, [], None, [], [], False)
    found = job_list._list(client, filters, EVERY, True)
    assert len(found) == SINGLES + 2 and client.calls == 2


def test_a_job_ended_before_min_job_age_is_unknown_to_squeue(
    tmp_path_factory: pytest.TempPathFactory, monkeypatch: pytest.MonkeyPatch
) -> None:
    """As Slurm's: ``squeue -j ID`` of a job its controller forgot (ended more than MinJobAge
    ago) says ``Invalid job id specified`` and exits 1; ``fusesched jobs`` still lists it."""
    monkeypatch.setattr(job_list, "MIN_JOB_AGE_S", 1.0)
    with pretend_cluster(tmp_path_factory.mktemp("forgot")) as where:
        client = Client(where)
        done = {"resources": {"cpu": 1, "memory": "64Mi"}, "argv": ["true"]}
        ended = client.submit({"name": "ended", "groups": [done]})
        until = time.monotonic() + 20
        while client.show(ended)["state"] != "Completed":
            assert time.monotonic() < until
            time.sleep(0.05)
        assert cli(where, "squeue", "-j", ended, "-t", "all", "-h", "-o", "%j")[0] == ["ended"]
        time.sleep(1.5)
        for state in ([], ["-t", "all"]):
            out, err = cli(where, "squeue", "-j", ended, *state, code=1)
            assert out == [] and err.strip() == "slurm_load_jobs error: Invalid job id specified"
        out, _ = cli(where, "squeue", "--start", "-j", ended, code=1)
        assert out == []
        assert cli(where, "jobs", "-j", ended, "-t", "all", "-h", "-o", "%j")[0] == ["ended"]


def test_memory_is_asked_once_an_array_and_shown_on_its_combined_row(
    url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """``%m`` of 1,005 array members: two efficiency views (one an array), not 1,005; a
    combined row shows its members' memory, as Slurm's, not 0."""
    client = Counting(url)
    monkeypatch.setattr(job_list, "_client", lambda *a: client)
    rows, _ = cli(url, "squeue", "-h", "-n", "old,new", "-o", "%j|%i|%m")
    assert sorted(row.split("|", 1)[0] + "|" + row.rsplit("|", 1)[1] for row in rows) == [
        "new|64M",
        "old|64M",
    ]
    assert client.efficiencies == 2
    members, _ = cli(url, "squeue", "-h", "-r", "-n", "old,new", "-o", "%m")
    assert members == ["64M"] * 1005 and client.efficiencies == 4
