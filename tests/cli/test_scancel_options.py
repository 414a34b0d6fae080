"""scancel's options of Slurm 22.05 beyond its first filters: ``-A``, ``-q``, ``-w`` (matched
on the listed jobs, then cancelled by id in one request), ``-i`` (asks as Slurm's), ``-v``,
``-Q``, ``-H``, ``-V``, ``-b``/``-f`` without ``--signal`` (a cancel, as Slurm's KILL ends
the job), and the refusals of ``-R`` and ``--wckey``."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from typer.testing import CliRunner

from fusesched.cli import cancel_filters as cf
from fusesched.cli import live
from fusesched.cli.main import app
from fusesched.sdk import ControllerError

JOBS = [  # (newest first, as GET /v1/jobs lists them)
    {"id": "4", "name": "d", "queue": "gpu", "tenant": "bio", "qos": "high", "nodes": ["n3"]},
    {"id": "3", "name": "c", "queue": "cpu", "tenant": "phys", "qos": "low", "nodes": []},
    {"id": "2", "name": "b", "queue": "cpu", "tenant": "bio", "qos": "low", "nodes": ["n2"]},
    {"id": "1", "name": "a", "queue": "cpu", "tenant": "phys", "qos": "high", "nodes": ["n1"]},
]


class Fake:
    token = "t"

    def __init__(self) -> None:
        self.cancelled: list[str] = []
        self.bulk: list[dict[str, Any]] = []
        self.listed: list[dict[str, Any]] = []

    def jobs(self, **query: Any) -> list[dict[str, Any]]:
        self.listed.append(query)
        if query.get("array"):
            return []
        return [j for j in JOBS if not query.get("ids") or j["id"] in query["ids"]]

    def show(self, job_id: str) -> dict[str, Any]:
        for job in JOBS:
            if job["id"] == job_id:
                return job
        raise ControllerError(404, f"no job {job_id!r}")

    def cancel(self, job_id: str) -> list[str]:
        self.show(job_id)
        self.cancelled.append(job_id)
        return [job_id]

    def cancel_matching(self, **filters: Any) -> dict[str, Any]:
        self.bulk.append(filters)
        return {"cancelled": list(filters.get("id") or []), "denied": []}

    def signal_report(self, job_id: str, signal: str, main_only: bool = False) -> Any:
        raise AssertionError("no signal is sent without --signal")


@pytest.fixture
def fake(monkeypatch: pytest.MonkeyPatch) -> Fake:
    made = Fake()
    monkeypatch.setattr(live, "_client", lambda *args: made)
    return made


def scancel(*args: str, given: str | None = None) -> Any:
    return CliRunner().invoke(app, ["scancel", *args], input=given)


@pytest.mark.parametrize(
    ("args", "ids"),
    [
        (["-A", "bio"], ["2", "4"]),
        (["--account", "bio,phys", "-q", "high"], ["1", "4"]),
        (["-w", "n[1-2]"], ["1", "2"]),
        (["-w", "n9"], []),
    ],
)
def test_account_qos_and_nodes_are_matched_then_cancelled_by_id(
    fake: Fake, args: list[str], ids: list[str]
) -> None:
    result = scancel(*args)
    assert result.exit_code == 0, result.output
    assert fake.bulk == ([{"id": ids}] if ids else [])  # (one request, oldest first)
    assert result.stdout == ""  # (scancel says nothing, as Slurm's)


def test_a_nodelist_file(fake: Fake, tmp_path: Path) -> None:
    hosts = tmp_path / "hosts"
    hosts.write_text("n3\nn1\n")
    assert scancel("-w", str(hosts)).exit_code == 0
    assert fake.bulk == [{"id": ["1", "4"]}]
    assert scancel("-w", str(tmp_path / "none")).exit_code == 2


def test_interactive_asks_as_slurms_and_cancels_the_yes(fake: Fake) -> None:
    result = scancel("-i", "1", "2", "3", given="y\nmaybe\nn\nY\n")
    assert result.exit_code == 0, result.output
    assert fake.cancelled == ["1", "3"]
    asked = result.stdout.count("[y/n]? ")
    assert asked == 4  # (an answer that is neither: asked again)
    assert result.stdout.startswith("Cancel job_id=1 name=a partition=cpu [y/n]? ")


def test_interactive_stops_asking_at_the_end_of_input(fake: Fake) -> None:
    result = scancel("-i", "-A", "bio", given="")
    assert result.exit_code == 0  # (Slurm's asks for ever; no answer here is no)
    assert fake.cancelled == [] and fake.bulk == []
    assert result.stdout.count("[y/n]? ") == 1


def test_verbose_says_what_was_done_as_slurms_and_quiet_hides_an_unknown_job(fake: Fake) -> None:
    said = scancel("-v", "2")  # (Slurm 22.05: on stderr; qtoolkit looks for this line there)
    assert (said.exit_code, said.stdout) == (0, "")
    assert said.stderr == "scancel: Terminating job 2\n"
    assert scancel("2").output == ""
    unknown = scancel("99")  # (Slurm's: nothing said, exit 0; -v says why)
    assert (unknown.exit_code, unknown.output) == (0, "")
    told = scancel("-v", "99")
    assert told.exit_code == 0
    assert told.stderr == (
        "scancel: Terminating job 99\n"
        "scancel: error: Kill job error on job id 99: Invalid job id specified\n"
    )
    quiet = scancel("-Q", "99")
    assert quiet.exit_code == 0 and quiet.stderr == ""
    assert scancel("-Q", "-v", "2").exit_code == 2
    own = CliRunner().invoke(app, ["cancel", "99"])  # (fusesched's words, as before)
    assert own.exit_code == 2 and "no job '99'" in own.stderr


@pytest.mark.parametrize("flag", ["-b", "-f", "--full", "--batch"])
def test_batch_and_full_without_a_signal_cancel(fake: Fake, flag: str) -> None:
    result = scancel(flag, "1")
    assert result.exit_code == 0, result.output
    assert fake.cancelled == ["1"]


@pytest.mark.parametrize(("flag", "kind"), [("-b", "batch "), ("-f", "full "), ("-bf", "full ")])
def test_batch_and_full_without_a_signal_say_slurms_words(fake: Fake, flag: str, kind: str) -> None:
    said = scancel("-v", flag, "1")
    assert said.exit_code == 0 and said.stderr == f"scancel: Terminating {kind}job 1\n"
    assert fake.cancelled == ["1"]


@pytest.mark.parametrize(
    ("args", "says"),
    [
        (["-R", "maint"], "-R/--reservation is not supported here"),
        (["--wckey", "w"], "--wckey is not supported here"),
    ],
)
def test_what_cannot_be_matched_is_refused(fake: Fake, args: list[str], says: str) -> None:
    result = scancel(*args, "1")
    assert result.exit_code == 2 and says in result.stderr
    assert fake.cancelled == []


def test_hurry_version_and_clusters(fake: Fake) -> None:
    assert scancel("-V").stdout == "slurm 22.05.0\n"
    assert scancel("-H", "-M", "all", "1").exit_code == 0 and fake.cancelled == ["1"]


def test_the_filters_match_here() -> None:
    f = cf.Filters(accounts=["bio"], qos=["low"], nodes=["n2"])
    assert f.listed and [j["id"] for j in JOBS if f.matches(j)] == ["2"]
    assert not cf.Filters(users=["x"]).listed
    assert cf.host_names("n[1-2],g1") == ["n1", "n2", "g1"]
