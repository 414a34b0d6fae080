"""``scontrol update JobId=… Name=… Comment=… Partition=… Dependency=… StartTime=…`` and
``fusesched update --job-name/--comment/--partition/--dependency/--begin``: the words read
(pure), then both commands against a real controller with an agent whose tasks only
pretend to run, with what ``scontrol show job`` says after."""

from __future__ import annotations

import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from tests.cli.conftest import pretend_cluster
from typer.testing import CliRunner

from fusesched.cli import scontrol_update as su
from fusesched.cli.main import app
from fusesched.cli.scontrol_update import ScontrolError
from fusesched.sdk import Client

NOW = 1_800_000_000.0


def words(*given: str) -> su.JobUpdate:
    return su.job_update(su.pairs(["JobId=5", *given]), NOW)


def test_the_new_keys_are_read() -> None:
    change = words(
        "name=train2",
        "Comment=see ticket 7",
        "PARTITION=gpu",
        "Dependency=afterok:3:4,singleton",
        "StartTime=now+1hour",
    )
    assert (change.name, change.comment, change.partition) == ("train2", "see ticket 7", "gpu")
    assert change.dependencies == [
        {"kind": "afterok", "job_id": "3"},
        {"kind": "afterok", "job_id": "4"},
        {"kind": "singleton", "job_id": ""},
    ]
    assert change.begin_time == NOW + 3600
    assert words("JobName=x").name == "x" and words("Name=").name == ""  # (Slurm's: no name)
    assert words("Dependency=").dependencies == []  # cleared
    assert words("BeginTime=now").begin_time == NOW
    assert words("Comment=").comment == ""
    assert words("Priority=3").dependencies is None  # (not given: kept)


@pytest.mark.parametrize(
    ("given", "says"),
    [
        (["Name=a", "JobName=b"], "give Name= or JobName=, not both"),
        (["StartTime=now", "BeginTime=now"], "give StartTime= or BeginTime=, not both"),
        (["StartTime="], "StartTime: give a time"),
        (["StartTime=soonish"], "StartTime: cannot read the start time 'soonish'"),
        (["Dependency=afterok:3?afterany:4"], "Dependency: .*'\\?' \\(any of\\) is not supported"),
        (["Dependency=after:"], "Dependency: dependency 'after:': give job ids"),
        (["Dependency=later:3"], "Dependency: dependency 'later:3' is not supported"),
        (["Partition="], "Partition: name one partition, not ''"),
        (["Partition=a,b"], "Partition: name one partition, not 'a,b'"),
        (["Comment=a\u001bb"], "Comment: the comment holds a control character"),
        (["Name=" + "n" * 201], "Name: the job name is 201 characters long"),
    ],
)
def test_bad_words_are_refused_before_asking(given: list[str], says: str) -> None:
    with pytest.raises(ScontrolError, match=says):
        words(*given)


def test_fusesched_update_refuses_bad_options_before_asking() -> None:
    down = {"FUSESCHED_CONTROLLER": "http://127.0.0.1:9"}
    for args, says in (
        (["--time", "+30"], "give the new limit, not a change of it"),
        (["--begin", "whenever"], "cannot read the start time 'whenever'"),
        (["-d", "afterok"], "dependency 'afterok': give job ids"),
        (["-p", ""], "name one partition"),
        ([], "give --priority, --qos, --time, --job-name"),
    ):
        result = CliRunner().invoke(app, ["update", "5", *args], env=down)
        assert result.exit_code == 2 and says in result.output, result.output


# ---------------------------------------------------------------------- against a controller


@pytest.fixture
def url(tmp_path: Path) -> Iterator[str]:
    with pretend_cluster(tmp_path, cpus=1) as found:
        yield found


def request(name: str, seconds: float = 300, **extra: Any) -> dict[str, Any]:
    """A one-CPU job (the whole node) that pretends to run ``seconds``."""
    env = {"FUSESCHED_FAKE_DURATION": str(seconds)}
    task = {"resources": {"cpu": 1}, "argv": ["true"], "env": env}
    return {"name": name, "groups": [task], **extra}


def command(url: str, *args: str) -> tuple[int, str]:
    result = CliRunner().invoke(app, list(args), env={"FUSESCHED_CONTROLLER": url})
    return result.exit_code, result.output


def shown(url: str, job_id: str) -> dict[str, str]:
    code, text = command(url, "scontrol", "-o", "show", "job", job_id)
    assert code == 0, text
    return dict(w.split("=", 1) for w in text.split() if "=" in w)


def running(client: Client, job_id: str) -> None:
    deadline = time.monotonic() + 20
    while client.show(job_id)["state"] != "Running":
        assert time.monotonic() < deadline, client.show(job_id)
        time.sleep(0.05)


def test_scontrol_update_changes_a_waiting_job(url: str) -> None:
    client = Client(url)
    [first] = client.submit(request("first"))
    running(client, str(first))
    [job] = client.submit(request("second"))
    job = str(job)
    update = [
        "scontrol",
        "update",
        f"JobId={job}",
        "Name=renamed",
        "Comment=see ticket 7",
        "Partition=debug",
        f"Dependency=afterok:{first}",
        "StartTime=now+1hour",
    ]
    assert command(url, *update) == (0, "")
    record = shown(url, job)
    assert (record["JobName"], record["Partition"]) == ("renamed", "debug")
    assert record["Dependency"] == f"afterok:{first}(unfulfilled)"
    view = client.show(job)
    assert view["comment"] == "see ticket 7"
    assert view["dependencies"] == [{"kind": "afterok", "job_id": str(first)}]
    assert command(url, "scontrol", "update", f"JobId={job}", "Dependency=") == (0, "")
    assert shown(url, job)["Dependency"] == "(null)"
    assert client.show(job)["reason"].startswith("begin time ")


def test_what_a_running_job_cannot_change_is_said(url: str) -> None:
    client = Client(url)
    [job] = client.submit(request("first"))
    running(client, str(job))
    assert command(url, "scontrol", "update", f"JobId={job}", "Name=now-named") == (0, "")
    assert shown(url, str(job))["JobName"] == "now-named"
    code, said = command(url, "scontrol", "update", f"JobId={job}", "Partition=other")
    assert code == 1 and f"job {job} is running: its partition cannot change" in said, said
    code, said = command(url, "scontrol", "update", f"JobId={job}", "Dependency=afterok:99999")
    assert code == 1 and "its dependencies cannot change" in said, said


def test_an_unknown_dependency_is_refused(url: str) -> None:
    client = Client(url)
    [job] = client.submit(request("first", hold=True))
    code, said = command(url, "scontrol", "update", f"JobId={job}", "Dependency=afterok:99999")
    assert code == 1 and "dependency on unknown job '99999'" in said, said


def test_an_arrays_waiting_members_change_together(url: str) -> None:
    client = Client(url)
    [array] = client.submit(request("arr", array={"start": 1, "stop": 3}))
    running(client, f"{array}_1")
    assert command(url, "scontrol", "update", f"JobId={array}", "Partition=debug") == (0, "")
    queues = {j["id"]: j["queue"] for j in client.jobs(array=str(array))}
    assert queues == {f"{array}_1": "default", f"{array}_2": "debug", f"{array}_3": "debug"}


def test_fusesched_update_takes_the_same_changes(url: str) -> None:
    client = Client(url)
    [first] = client.submit(request("first"))
    running(client, str(first))
    [job] = client.submit(request("second"))
    args = ["update", str(job), "-J", "n2", "--comment", "c2", "-p", "p2"]
    code, said = command(url, *args, "-d", f"afterany:{first}", "--begin", "now+2hours")
    assert code == 0 and said == f"Updated {job}\n", said
    view = client.show(str(job))
    assert (view["name"], view["comment"], view["queue"]) == ("n2", "c2", "p2")
    assert view["dependencies"] == [{"kind": "afterany", "job_id": str(first)}]
    assert command(url, "update", str(job), "-d", "", "--begin", "now")[0] == 0
    assert client.show(str(job))["dependencies"] == []
