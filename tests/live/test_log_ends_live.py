"""The end of a log, against a live cluster of real agents: ``fusesched run``, ``logs -f`` and
``srun`` steps stop exactly at the end of the output (the agent marks it, the controller says
the log is complete), with every byte of a large last burst and without waiting for quiet; with
an agent that marks nothing (an older one) they still end, once its beats leave the task out,
with a warning that the end may be missing.

"Without waiting for quiet" is counted, not timed (a loaded machine makes any time limit
flaky): the controller runs in this process, and each log is answered as complete once,
since a reader stops at that answer (one that waited for quiet would read it again).
"""

from __future__ import annotations

import subprocess
import sys
import time
from collections import Counter
from pathlib import Path
from typing import Any

import pytest
from tests.live.test_cli import PYTHON, fusesched
from tests.live.test_cli_run_wait import run_in

from fusesched.agent.client import AgentClient
from fusesched.api import log_routes
from fusesched.api.wire import LogChunk
from fusesched.cli.local import LocalCluster
from fusesched.controller.logs import LogStore
from fusesched.sdk import Client

MB5 = 5_000_000


class Answers:
    """Log reads the controller answers: per task, how many said its log is complete (the
    many-task route's and the one-task route's), and the one-task route's reads."""

    def __init__(self, monkeypatch: pytest.MonkeyPatch) -> None:
        self.complete: Counter[str] = Counter()
        self.one_task_reads: list[str] = []
        answer = log_routes.json_response
        read = LogStore.read_some

        def many(view: Any) -> Any:
            for task in view.tasks:
                self.complete[task.task_id] += task.complete
            return answer(view)

        def one(store: LogStore, task_id: str, offset: int, final: bool, limit: int) -> Any:
            text, after, at_end = read(store, task_id, offset, final, limit)
            if sys._getframe(1).f_code.co_name == "logs":  # (the one-task route's read)
                self.one_task_reads.append(task_id)
                self.complete[task_id] += final and at_end
            return text, after, at_end

        monkeypatch.setattr(log_routes, "json_response", many)
        monkeypatch.setattr(LogStore, "read_some", one)


def burst(size: int, letter: str) -> str:
    return f"head -c {size} /dev/zero | tr '\\0' {letter}; echo; printf end"


def test_run_prints_a_burst_of_megabytes_whole_and_returns_at_once(
    cluster: LocalCluster, scratch: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    answers = Answers(monkeypatch)
    result = run_in(scratch, cluster, PYTHON, "run", "-Q", "sh", "-c", burst(MB5, "a"))
    assert result.returncode == 0, result.stderr
    assert len(result.stdout) == MB5 + 4 and result.stdout.endswith("a\nend")
    assert set(result.stdout[:MB5]) == {"a"}
    assert result.stderr == ""  # (no warning: the agent confirmed the end)
    client = Client(cluster.url)
    (task,) = (t["task_id"] for t in client.show(client.jobs()[0]["id"])["tasks"])
    # it stopped at the answer that said the log is complete: no read after it (it used to
    # read on for 1.5 s after a large last burst)
    assert answers.complete == {task: 1} and answers.one_task_reads == []


def test_run_follows_many_tasks_to_their_ends(
    cluster: LocalCluster, scratch: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """One request a round reads every task's output (not one per task a round)."""
    answers = Answers(monkeypatch)
    cmd = 'head -c 300000 /dev/zero | tr "\\0" x; echo; echo "end of $RANK"'
    result = run_in(scratch, cluster, PYTHON, "run", "-n", "4", "-l", "-Q", "sh", "-c", cmd)
    assert answers.one_task_reads == []
    assert result.returncode == 0, result.stderr
    assert sorted(answers.complete.values()) == [1, 1, 1, 1]  # (each read to its end once)
    lines = result.stdout.splitlines()
    assert sorted(line for line in lines if "end of" in line) == [
        f"{r}: end of {r}" for r in range(4)
    ]
    assert sorted(len(line) for line in lines if "x" in line) == [300_003] * 4


def test_the_log_api_reads_all_tasks_in_one_request(cluster: LocalCluster) -> None:
    client = Client(cluster.url)
    job_id = client.submit(
        {
            "name": "three",
            "groups": [
                {
                    "replicas": 3,
                    "resources": {"cpu": "500m", "memory": "32Mi"},
                    "argv": ["sh", "-c", "echo task $RANK"],
                }
            ],
        }
    )
    job = client.wait(job_id, timeout=60)
    answer = client.task_logs(job_id, {}, all_tasks=True)
    while not all(t["complete"] for t in answer["tasks"]):  # (marks of the last exits)
        time.sleep(0.05)
        answer = client.task_logs(job_id, {}, all_tasks=True)
    assert [t["task_id"] for t in answer["tasks"]] == [t["task_id"] for t in job["tasks"]]
    assert [t["text"] for t in answer["tasks"]] == [f"task {r}\n" for r in range(3)]
    assert all(t["confirmed"] for t in answer["tasks"])
    page = client.log_page(job_id)
    assert (page.text, page.complete, page.confirmed) == ("task 0\n", True, True)


def test_logs_follow_stops_at_the_end(
    cluster: LocalCluster, scratch: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """``logs -f --task`` stops once that task's log is complete, though its job runs on;
    ``logs -f`` of the job stops at the job's end, with all of its output."""
    answers = Answers(monkeypatch)
    client = Client(cluster.url)
    gate = scratch / "go"
    script = (
        'if [ "$RANK" = 0 ]; then '
        + burst(1_000_000, "f")
        + f"; else while [ ! -e {gate} ]; do sleep 0.05; done; fi"
    )
    job_id = client.submit(
        {
            "name": "two",
            "groups": [
                {
                    "replicas": 2,
                    "resources": {"cpu": "500m", "memory": "32Mi"},
                    "argv": ["sh", "-c", script],
                }
            ],
        }
    )
    deadline = time.monotonic() + 30
    while client.show(job_id)["state"] == "Pending" and time.monotonic() < deadline:
        time.sleep(0.05)
    first = f"{job_id}.main.0"
    task = fusesched(cluster, "logs", job_id, "--task", first, "-f")
    assert task.returncode == 0, task.stderr
    assert len(task.stdout) == 1_000_004 and task.stdout.endswith("f\nend")
    assert client.show(job_id)["state"] == "Running"  # (rank 1 waits for the gate)
    assert answers.complete[first] == 1  # it stopped at the answer that said so
    gate.touch()
    whole = fusesched(cluster, "logs", job_id, "-f")
    assert whole.returncode == 0, whole.stderr
    assert whole.stdout == task.stdout and whole.stderr == ""
    assert client.show(job_id)["state"] == "Completed"


STEP = """#!/bin/bash
#SBATCH -n 1
#SBATCH --mem=64M
#SBATCH -t 2
srun sh -c 'head -c 2000000 /dev/zero | tr "\\0" s; echo; date +%s.%N'
date +%s.%N
"""


def test_a_step_prints_its_tasks_last_burst_and_ends_at_once(
    client: Client, monkeypatch: pytest.MonkeyPatch
) -> None:
    answers = Answers(monkeypatch)
    (job_id,) = client.submit_files([{"name": "step.sh", "text": STEP}])["ids"]
    done = client.wait(job_id, timeout=60)
    output = client.logs(job_id)
    assert done["state"] == "Completed", output[-2000:]
    lines = output.splitlines()
    assert "s" * 2_000_000 in lines
    task_end, step_end = (float(line) for line in lines[-2:])
    assert task_end <= step_end
    # the step read its task's log until the answer that said it is complete, and no more
    # (it used to read on until 0.6 s had passed without output; tests/agent/
    # test_step_log_end.py counts its reads and pauses on a scripted controller)
    (step_task,) = {t for t in answers.one_task_reads if ".remote." in t}
    assert answers.complete[step_task] == 1, answers.complete


def test_an_agent_that_marks_no_end_still_ends_with_a_warning(
    cluster: LocalCluster, scratch: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The agents here run in this process: made to send no end marks, as older ones."""
    new_logs = AgentClient._new_logs

    def no_marks(self: AgentClient) -> list[LogChunk]:
        chunks = new_logs(self)
        for chunk in chunks:
            if not chunk.data:
                self._offsets.pop(chunk.task_id, None)  # (as an older agent forgets it)
        return [c for c in chunks if c.data]

    monkeypatch.setattr(AgentClient, "_new_logs", no_marks)
    result = run_in(scratch, cluster, PYTHON, "run", "-Q", "sh", "-c", burst(500_000, "o"))
    assert result.returncode == 0, result.stderr
    assert len(result.stdout) == 500_004 and result.stdout.endswith("o\nend")
    assert "task 0's output may be missing its end" in result.stderr
    followed = subprocess.run(
        [*PYTHON, "logs", Client(cluster.url).jobs()[0]["id"], "-f"],
        capture_output=True,
        text=True,
        timeout=60,
        env={"FUSESCHED_CONTROLLER": cluster.url, "PATH": "/usr/bin:/bin"},
    )
    assert followed.returncode == 0 and followed.stdout == result.stdout
    assert "may be missing" in followed.stderr
