"""``GET /v1/jobs?steps=true``: each job's steps summarised by the controller (``steps``: a
line a step of its latest run, as ``fusesched sacct`` prints them), not its tasks, so the
answer grows with steps, not tasks; ``detail=true`` still answers every task (older
clients). ``fusesched sacct`` asks for the summaries and prints what it printed from the
tasks (the expected tables below are its output before), and from a controller older than
summaries it reads the tasks as before."""

from __future__ import annotations

import json
import time
from collections.abc import Iterator
from typing import Any

import pytest
from fastapi.testclient import TestClient
from tests.store.rows import event, job, task
from typer.testing import CliRunner

from fusesched.cli import sacct as sacct_cli
from fusesched.cli.main import app
from fusesched.controller.service import Controller
from fusesched.model.phases import node_failure
from fusesched.sdk import Client
from fusesched.store import JobState

T = 1_000_000.0
SCRIPT = {"script": "#!/bin/sh\nsrun x\n", "count": 2, "resources": {"cpu": "2"}}
SALLOC = {"script": 'echo "fusesched-salloc: allocation ready"\n', "resources": {"cpu": "1"}}
PLAIN = {"argv": ["x"], "count": 2, "resources": {"cpu": "1"}}


def _job(seq: int, group: dict[str, Any], state: JobState, phase: str, **extra: Any) -> Any:
    fields: dict[str, Any] = {
        "state": state,
        "phase": phase,
        "submit_time": T + 10 * seq,
        "start_time": T + 10 * seq + 1,
        "end_time": None if state is JobState.RUNNING else T + 10 * seq + 9,
        "nodes": ("n0", "n1"),
        "request": {"name": f"j{seq}", "groups": [group]},
    }
    fields.update(extra)
    return job(seq, **fields)


def _tasks(job_id: str, at: float, *specs: tuple[Any, ...]) -> list[Any]:
    """A task a spec: (group, index, node, start offset, end offset or None, exit code, step,
    extra fields)."""
    return [
        task(
            job_id,
            index,
            group,
            state=JobState.COMPLETED if end is not None else JobState.RUNNING,
            node=node,
            start_time=at + start,
            end_time=None if end is None else at + end,
            exit_code=code,
            step_id=step,
            **extra,
        )
        for group, index, node, start, end, code, step, extra in specs
    ]


def fill(ctl: Controller) -> None:
    """Jobs with steps of each outcome sacct tells apart."""
    named = {"step_name": "train", "step_tasks": 2}
    used = {"cpu_seconds": 1.5, "max_rss_bytes": 4096}
    rows = [
        _job(1, SCRIPT, JobState.FAILED, "failed", exit_code=3),
        _job(2, SALLOC, JobState.CANCELLED, "cancelled", exit_code=-15),
        _job(3, SCRIPT, JobState.RUNNING, "running"),
        _job(4, SCRIPT, JobState.COMPLETED, "completed", exit_code=0),
        _job(5, SCRIPT, JobState.FAILED, "failed", reason="OOM killer: task 5.main.0"),
        _job(
            6,
            SCRIPT,
            JobState.FAILED,
            "failed",
            reason=node_failure("node n1 stopped heartbeating"),
        ),
        _job(7, SCRIPT, JobState.FAILED, "timeout", exit_code=-15),
        _job(8, PLAIN, JobState.FAILED, "failed", exit_code=1),
        _job(9, SCRIPT, JobState.PENDING, "queued", start_time=None, end_time=None, nodes=()),
        _job(10, SCRIPT, JobState.COMPLETED, "completed", id="10_1", array_parent="10"),
    ]
    tasks = [
        *_tasks(
            "1",
            T + 11,
            ("main", 0, "n0", 0, 8, 3, None, used),
            ("remote", 1, "n0", 1, 4, 0, 0, {**named, **used}),
            ("remote", 2, "n1", 1, 5, 3, 0, {**named, "max_rss_bytes": 9000}),
            ("remote", 3, "n0", 5, 7, 0, 1, {"step_name": "mpi", "step_tasks": 4}),
            ("remote", 4, "n1", 5, 6, 0, 1, {}),  # (its mpirun's daemon)
        ),
        *_tasks(
            "2",
            T + 21,
            ("main", 0, "n0", 0, 8, -15, None, {}),
            ("remote", 1, "n1", 2, 8, -15, 0, named),
        ),
        *_tasks(
            "3",
            T + 31,
            ("main", 0, "n0", 0, None, None, None, {}),
            ("remote", 1, "n0", 1, 3, 0, 0, named),
            ("remote", 2, "n1", 1, None, None, 0, named),
            ("remote", 3, "n1", 4, 5, 2, 1, named),
        ),
        *_tasks(
            "4",
            T + 30,  # an earlier run, requeued: not shown
            ("main", 1, "n1", 0, 2, -15, None, {}),
            ("remote", 9, "n1", 1, 2, -15, 0, {}),
        ),
        *_tasks(
            "4",
            T + 41,
            ("main", 0, "n0", 0, 8, 0, None, used),
            ("remote", 1, "n0", 1, 7, 0, 0, used),
        ),
        *_tasks(
            "5",
            T + 51,
            ("main", 0, "n0", 0, 8, -9, None, {}),
            ("remote", 1, "n0", 1, 8, -9, 0, {}),
            ("remote", 2, "n1", 1, 8, -15, 1, {}),
        ),
        *_tasks(
            "6",
            T + 61,
            ("main", 0, "n0", 0, 8, -1, None, {}),
            ("remote", 1, "n0", 1, 5, -1, 0, {}),
            ("remote", 2, "n1", 1, None, None, 0, {}),
            ("remote", 3, "n1", 2, 4, None, 1, {}),
        ),
        *_tasks(
            "7",
            T + 71,
            ("main", 0, "n0", 0, 8, -15, None, {}),
            ("remote", 1, "n0", 1, 8, -15, 0, {}),
            ("remote", 2, "n0", 1, 8, -11, 1, {}),
        ),
        *_tasks(
            "8",
            T + 81,
            ("main", 0, "n0", 0, 8, 0, None, {}),
            ("main", 1, "n1", 0, 8, 1, None, {}),
            ("remote", 1, "n0", 1, 3, -11, 0, {}),
            ("remote", 2, "n1", 1, 3, None, 2, {"step_name": "post"}),
        ),
        *_tasks(
            "10_1",
            T + 101,
            ("main", 0, "n0", 0, 8, 0, None, {}),
            ("remote", 1, "n1", 1, 3, 0, 0, {"step_name": "a", "step_tasks": 1}),
        ),
    ]
    ctl.persist.store.add_jobs(rows)
    ctl.persist.store.add_tasks(tasks)
    ctl.persist.store.add_events([event("JobRequeued", "4", time=T + 35)])


class Via(Client):
    """The SDK's calls, answered by the app in process (``old``: as a controller older than
    step summaries answers, without ``steps``)."""

    def __init__(self, client: TestClient, old: bool = False) -> None:
        super().__init__("http://test")
        self.client, self.old, self.asked, self.read = client, old, [], 0

    def _call(self, method: str, path: str, body: Any = None, raw: bool = False) -> Any:
        self.asked.append(path)
        answer = self.client.request(method, path, json=body)
        assert answer.status_code == 200, answer.text
        self.read += len(answer.content)
        found = answer.json()
        if self.old and path.startswith("/v1/jobs?"):
            for shown in found:
                shown.pop("steps", None)
        return found


@pytest.fixture
def utc(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    monkeypatch.setenv("TZ", "UTC")
    time.tzset()
    yield
    monkeypatch.undo()
    time.tzset()


@pytest.fixture
def api(ctl: Controller, client: TestClient, utc: None) -> TestClient:
    """The app of a controller that has :func:`fill`'s jobs."""
    fill(ctl)
    return client


def sacct(via: Via, monkeypatch: pytest.MonkeyPatch, *args: str) -> str:
    monkeypatch.setattr(sacct_cli, "_client", lambda *_: via)
    monkeypatch.setattr(sacct_cli.time, "time", lambda: T + 200)
    result = CliRunner().invoke(app, ["sacct", "-a", "-S", "1970-01-02", "-P", *args])
    assert result.exit_code == 0, result.output
    return result.stdout


SIZES = "JobID,Account,AllocCPUS,AllocNodes,NodeList,NNodes,NTasks,TotalCPU,MaxRSS,CPUTimeRAW"
SIZES += ",Restarts"
#: ``fusesched sacct``'s output for :func:`fill`'s jobs before the controller summarised
#: steps (from their tasks), and the arguments that printed it.
EXPECTED: list[tuple[list[str], str]] = [
    (
        ["-o", "JobID,JobName,State,ExitCode,Start,End,ElapsedRaw"],
        """\
JobID|JobName|State|ExitCode|Start|End|ElapsedRaw
1|job1|FAILED|3:0|1970-01-12T13:46:51|1970-01-12T13:46:59|8
1.batch|batch|FAILED|3:0|1970-01-12T13:46:51|1970-01-12T13:46:59|8
1.0|train|FAILED|3:0|1970-01-12T13:46:52|1970-01-12T13:46:56|4
1.1|mpi|COMPLETED|0:0|1970-01-12T13:46:56|1970-01-12T13:46:58|2
2|job2|CANCELLED|0:0|1970-01-12T13:47:01|1970-01-12T13:47:09|8
2.extern|extern|COMPLETED|0:0|1970-01-12T13:47:01|1970-01-12T13:47:09|8
2.0|train|CANCELLED|0:15|1970-01-12T13:47:03|1970-01-12T13:47:09|6
3|job3|RUNNING|0:0|1970-01-12T13:47:11|Unknown|169
3.batch|batch|RUNNING|0:0|1970-01-12T13:47:11|Unknown|169
3.0|train|RUNNING|0:0|1970-01-12T13:47:12|Unknown|168
3.1|train|FAILED|2:0|1970-01-12T13:47:15|1970-01-12T13:47:16|1
4|job4|COMPLETED|0:0|1970-01-12T13:47:21|1970-01-12T13:47:29|8
4.batch|batch|COMPLETED|0:0|1970-01-12T13:47:21|1970-01-12T13:47:29|8
4.0||COMPLETED|0:0|1970-01-12T13:47:22|1970-01-12T13:47:28|6
5|job5|OUT_OF_MEMORY|0:125|1970-01-12T13:47:31|1970-01-12T13:47:39|8
5.batch|batch|OUT_OF_MEMORY|0:125|1970-01-12T13:47:31|1970-01-12T13:47:39|8
5.0||OUT_OF_MEMORY|0:125|1970-01-12T13:47:32|1970-01-12T13:47:39|7
5.1||CANCELLED|0:15|1970-01-12T13:47:32|1970-01-12T13:47:39|7
6|job6|NODE_FAIL|0:1|1970-01-12T13:47:41|1970-01-12T13:47:49|8
6.batch|batch|NODE_FAIL|0:0|1970-01-12T13:47:41|1970-01-12T13:47:49|8
6.0||NODE_FAIL|0:0|1970-01-12T13:47:42|Unknown|138
6.1||NODE_FAIL|0:0|1970-01-12T13:47:43|1970-01-12T13:47:45|2
7|job7|TIMEOUT|0:0|1970-01-12T13:47:51|1970-01-12T13:47:59|8
7.batch|batch|CANCELLED|0:15|1970-01-12T13:47:51|1970-01-12T13:47:59|8
7.0||CANCELLED|0:15|1970-01-12T13:47:52|1970-01-12T13:47:59|7
7.1||CANCELLED|0:11|1970-01-12T13:47:52|1970-01-12T13:47:59|7
8|job8|FAILED|1:0|1970-01-12T13:48:01|1970-01-12T13:48:09|8
8.0||FAILED|0:11|1970-01-12T13:48:02|1970-01-12T13:48:04|2
8.2|post|CANCELLED|0:0|1970-01-12T13:48:02|1970-01-12T13:48:04|2
9|job9|PENDING|0:0|Unknown|Unknown|0
10_1|job10|COMPLETED|0:0|1970-01-12T13:48:21|1970-01-12T13:48:29|8
10_1.batch|batch|COMPLETED|0:0|1970-01-12T13:48:21|1970-01-12T13:48:29|8
10_1.0|a|COMPLETED|0:0|1970-01-12T13:48:22|1970-01-12T13:48:24|2
""",
    ),
    (
        [
            "-o",
            "JobID,Account,AllocCPUS,AllocNodes,NodeList,NNodes,NTasks,TotalCPU,MaxRSS,CPUTimeRAW,Restarts",
        ],
        """\
JobID|Account|AllocCPUS|AllocNodes|NodeList|NNodes|NTasks|TotalCPU|MaxRSS|CPUTimeRAW|Restarts
1|default|2|2|n[0-1]|2|1|00:00:03||16|0
1.batch|default|1|1|n0|1|1|00:01.500|4K|8|
1.0|default|4|2|n[0-1]|2|2|00:01.500|9000|16|
1.1|default|8|2|n[0-1]|2|4|||16|
2|default|1|2|n[0-1]|2|1|||8|0
2.extern|default|1|2|n[0-1]|2|2|||8|
2.0|default|2|1|n1|1|2|||12|
3|default|2|2|n[0-1]|2|1|||338|0
3.batch|default|1|1|n0|1|1|||169|
3.0|default|4|2|n[0-1]|2|2|||672|
3.1|default|4|1|n1|1|2|||4|
4|default|2|2|n[0-1]|2|1|00:00:03||16|1
4.batch|default|1|1|n0|1|1|00:01.500|4K|8|
4.0|default|2|1|n0|1|1|00:01.500|4K|12|
5|default|2|2|n[0-1]|2|1|||16|0
5.batch|default|1|1|n0|1|1|||8|
5.0|default|2|1|n0|1|1|||14|
5.1|default|2|1|n1|1|1|||14|
6|default|2|2|n[0-1]|2|1|||16|0
6.batch|default|1|1|n0|1|1|||8|
6.0|default|4|2|n[0-1]|2|2|||552|
6.1|default|2|1|n1|1|1|||4|
7|default|2|2|n[0-1]|2|1|||16|0
7.batch|default|1|1|n0|1|1|||8|
7.0|default|2|1|n0|1|1|||14|
7.1|default|2|1|n0|1|1|||14|
8|default|1|2|n[0-1]|2|1|||8|0
8.0|default|1|1|n0|1|1|||2|
8.2|default|1|1|n1|1|1|||2|
9|default|0|0|None assigned|1|1|||0|0
10_1|default|2|2|n[0-1]|2|1|||16|0
10_1.batch|default|1|1|n0|1|1|||8|
10_1.0|default|2|1|n1|1|1|||4|
""",
    ),
    (
        ["-o", "JobID,State,ExitCode", "-j", "1.0,2.extern,3.batch,10_1.0,8"],
        """\
JobID|State|ExitCode
1.0|FAILED|3:0
2.extern|COMPLETED|0:0
3.batch|RUNNING|0:0
8|FAILED|1:0
8.0|FAILED|0:11
8.2|CANCELLED|0:0
10_1.0|COMPLETED|0:0
""",
    ),
    (
        ["-X", "-o", "JobID,Restarts"],
        """\
JobID|Restarts
1|0
2|0
3|0
4|1
5|0
6|0
7|0
8|0
9|0
10_1|0
""",
    ),
    (
        [],
        """\
JobID|JobName|Partition|Account|AllocCPUS|State|ExitCode
1|job1|default|default|2|FAILED|3:0
1.batch|batch||default|1|FAILED|3:0
1.0|train||default|4|FAILED|3:0
1.1|mpi||default|8|COMPLETED|0:0
2|job2|default|default|1|CANCELLED|0:0
2.extern|extern||default|1|COMPLETED|0:0
2.0|train||default|2|CANCELLED|0:15
3|job3|default|default|2|RUNNING|0:0
3.batch|batch||default|1|RUNNING|0:0
3.0|train||default|4|RUNNING|0:0
3.1|train||default|4|FAILED|2:0
4|job4|default|default|2|COMPLETED|0:0
4.batch|batch||default|1|COMPLETED|0:0
4.0|||default|2|COMPLETED|0:0
5|job5|default|default|2|OUT_OF_MEMORY|0:125
5.batch|batch||default|1|OUT_OF_MEMORY|0:125
5.0|||default|2|OUT_OF_MEMORY|0:125
5.1|||default|2|CANCELLED|0:15
6|job6|default|default|2|NODE_FAIL|0:1
6.batch|batch||default|1|NODE_FAIL|0:0
6.0|||default|4|NODE_FAIL|0:0
6.1|||default|2|NODE_FAIL|0:0
7|job7|default|default|2|TIMEOUT|0:0
7.batch|batch||default|1|CANCELLED|0:15
7.0|||default|2|CANCELLED|0:15
7.1|||default|2|CANCELLED|0:11
8|job8|default|default|1|FAILED|1:0
8.0|||default|1|FAILED|0:11
8.2|post||default|1|CANCELLED|0:0
9|job9|default|default|0|PENDING|0:0
10_1|job10|default|default|2|COMPLETED|0:0
10_1.batch|batch||default|1|COMPLETED|0:0
10_1.0|a||default|2|COMPLETED|0:0
""",
    ),
]


@pytest.mark.parametrize("old", [False, True], ids=["summaries", "older controller"])
@pytest.mark.parametrize(("args", "expected"), EXPECTED)
def test_sacct_prints_what_it_printed_from_the_tasks(
    api: TestClient, monkeypatch: pytest.MonkeyPatch, args: list[str], expected: str, old: bool
) -> None:
    via = Via(api, old)
    assert sacct(via, monkeypatch, *args) == expected
    listings = [path for path in via.asked if path.startswith("/v1/jobs?")]
    if "-X" in args and "Restarts" not in args[-1]:
        return
    asked = [path for path in listings if "detail=true" in path]
    assert bool(asked) is old  # (the tasks only from a controller without summaries)
    assert all("steps=true" in path for path in listings if path not in asked)


def test_a_jobs_steps_are_summarised_not_listed(api: TestClient) -> None:
    answer = api.get("/v1/jobs?steps=true&id=1&id=4&id=9")
    assert answer.status_code == 200, answer.text
    shown = {job["id"]: job for job in answer.json()}
    assert [job["tasks"] for job in shown.values()] == [[], [], []]
    assert {key: job["restarts"] for key, job in shown.items()} == {"1": 0, "4": 1, "9": 0}
    none: dict[str, Any] = {"running": 0, "signals": [], "lost": False, "oom": False}
    unsampled = {"cpu_seconds": None, "max_rss_bytes": None}
    assert shown["1"]["steps"] == [
        {"step": "batch", "name": "batch", "tasks": 1, "ntasks": 1, "nodes": ["n0"],
         "start_time": T + 11, "end_time": T + 19, "exit_code": 3, **none,
         "cpu_seconds": 1.5, "max_rss_bytes": 4096},
        {"step": "0", "name": "train", "tasks": 2, "ntasks": 2, "nodes": ["n0", "n1"],
         "start_time": T + 12, "end_time": T + 16, "exit_code": 3, **none,
         "cpu_seconds": 1.5, "max_rss_bytes": 9000},
        {"step": "1", "name": "mpi", "tasks": 2, "ntasks": 4, "nodes": ["n0", "n1"],
         "start_time": T + 16, "end_time": T + 18, "exit_code": 0, **none, **unsampled},
    ]  # fmt: skip
    assert [step["step"] for step in shown["4"]["steps"]] == ["batch", "0"]  # (latest run)
    assert shown["9"]["steps"] == []
    ended = api.get("/v1/jobs?steps=true&id=6").json()[0]["steps"]
    assert [(s["running"], s["lost"], s["end_time"]) for s in ended[1:]] == [
        (1, True, None),
        (0, True, T + 65),
    ]
    signalled = api.get("/v1/jobs?steps=true&id=7").json()[0]["steps"]
    assert [(s["signals"], s["exit_code"]) for s in signalled] == [
        ([15], -15),
        ([15], -15),
        ([11], -11),
    ]
    listed = api.get("/v1/jobs?id=1").json()[0]
    assert listed["steps"] is None and listed["restarts"] is None  # (not asked for)


def test_the_answer_grows_with_steps_not_tasks(
    ctl: Controller, api: TestClient, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A job of 3,000 tasks in 3 steps: a few hundred bytes summarised (``detail=true``
    still answers every task, for older clients), and sacct prints its 4 lines."""
    ranks = {"step_tasks": 1000, "cpu_seconds": 0.5, "max_rss_bytes": 10}
    big = _job(11, SCRIPT, JobState.COMPLETED, "completed", exit_code=0)
    specs = [
        ("remote", i, f"n{i % 2}", 1 + i % 3, 5, 0, i % 3, {**ranks, "step_name": "r"})
        for i in range(1, 3001)
    ]
    ctl.persist.store.add_jobs([big])
    ctl.persist.store.add_tasks(_tasks("11", T + 111, ("main", 0, "n0", 0, 8, 0, None, {}), *specs))
    summed = api.get("/v1/jobs?steps=true&id=11")
    detailed = api.get("/v1/jobs?detail=true&id=11")
    assert len(summed.content) < 3000 < len(detailed.json()[0]["tasks"]) + 1
    (job,) = summed.json()
    assert [(s["step"], s["tasks"], s["ntasks"], s["cpu_seconds"]) for s in job["steps"]] == [
        ("batch", 1, 1, None),
        ("0", 1000, 1000, 500.0),
        ("1", 1000, 1000, 500.0),
        ("2", 1000, 1000, 500.0),
    ]
    shown = sacct(Via(api), monkeypatch, "-j", "11", "-o", "JobID,NTasks,NodeList,State")
    assert shown.splitlines()[1:] == [
        "11|1|n[0-1]|COMPLETED",
        "11.batch|1|n0|COMPLETED",
        "11.0|1000|n[1,0]|COMPLETED",  # (in the order of first use)
        "11.1|1000|n[1,0]|COMPLETED",
        "11.2|1000|n[0-1]|COMPLETED",
    ]


def test_a_bad_steps_value_is_a_422_that_names_it(api: TestClient) -> None:
    answer = api.get("/v1/jobs?steps=maybe")
    assert answer.status_code == 422
    assert "steps" in json.dumps(answer.json()["detail"])
