"""``squeue -s``: the running jobs' steps in Slurm 22.05's step lines (``STEPID NAME PARTITION
USER TIME NODELIST``, ``37.0`` before ``37.batch`` as a real one sorts them), ``-s 37.0``
those steps, and the filters that narrow it (cli/squeue_steps.py). Against a fake
controller answering ``GET /v1/jobs?steps=true``."""

from __future__ import annotations

import json
import re
import time
from typing import Any

import pytest
from typer.testing import CliRunner

from fusesched.cli import job_list
from fusesched.cli.main import app
from fusesched.cli.squeue_options import normalise_argv
from fusesched.cli.squeue_steps import parse_steps

Job = dict[str, Any]
NOW = time.time()


def step(name: str, label: str, nodes: list[str], ended: bool = False, ntasks: int = 1) -> Job:
    return {
        "step": label,
        "name": name,
        "tasks": ntasks,
        "ntasks": ntasks,
        "nodes": nodes,
        "start_time": NOW - 75,
        "end_time": NOW - 5 if ended else None,
    }


def view(job_id: str, steps: list[Job], queue: str = "debug", user: str = "ann") -> Job:
    return {
        "id": job_id,
        "name": "stepper",
        "user": user,
        "queue": queue,
        "state": "Running",
        "phase": "running",
        "array_parent": job_id.partition("_")[0] if "_" in job_id else None,
        "nodes": ["n1", "n2"],
        "steps": steps,
    }


RUNNING = [
    view(
        "38",
        [
            step("batch", "batch", ["n1"]),
            step("inner", "0", ["n1", "n2"], ntasks=4),
            step("done", "1", ["n1"], ended=True),
        ],
    ),
    view("37", [step("batch", "batch", ["n3"]), step("mpi", "0", ["n3"])], queue="a-first"),
    view("9_2", [step("extern", "extern", ["n4"]), step("sh", "10", ["n4"])], user="bob"),
]


class Fake:
    token = None
    url = "http://fake"

    def __init__(self, views: list[Job]) -> None:
        self.views = views
        self.asked: list[dict[str, Any]] = []

    def jobs(self, user: Any = None, states: Any = (), queue: Any = None, limit: int = 50,
             array: Any = None, **kw: Any) -> list[Job]:  # fmt: skip
        self.asked.append({"user": user, "states": tuple(states), "queue": queue, **kw})
        ids = kw.get("ids") or ()
        found = [v for v in self.views if not ids or v["id"] in ids]
        found = [v for v in found if not user or v["user"] in user]
        return [v for v in found if not queue or v["queue"] in queue][:limit]


def steps(monkeypatch: pytest.MonkeyPatch, *args: str, code: int = 0) -> Any:
    fake = Fake(RUNNING)
    monkeypatch.setattr(job_list, "_client", lambda *a: fake)
    result = CliRunner().invoke(app, ["squeue", *normalise_argv(args)])
    assert result.exit_code == code, result.output
    if code == 0:
        assert fake.asked[0]["states"] == ("Running",) and fake.asked[0]["steps"] is True
    return result


def test_every_running_step_in_squeues_lines_and_order(monkeypatch: pytest.MonkeyPatch) -> None:
    header, *rows = steps(monkeypatch, "-s").stdout.splitlines()
    assert header == "         STEPID     NAME PARTITION     USER      TIME NODELIST"
    assert re.fullmatch(r" {11}37\.0 {6}mpi {3}a-first {6}ann +\d+:\d\d n3", rows[0])
    assert [row.split()[0] for row in rows] == [
        "37.0",
        "37.batch",
        "9_2.10",
        "9_2.extern",
        "38.0",
        "38.batch",
    ]  # (by partition, then job and step id as numbers; step 38.1 has ended)
    assert rows[4].split()[-1] == "n[1-2]"


def test_named_steps_and_the_filters_narrow_it(monkeypatch: pytest.MonkeyPatch) -> None:
    def ids(*args: str) -> list[str]:
        return [line.split()[0] for line in steps(monkeypatch, *args, "-h").stdout.splitlines()]

    assert ids("-s", "38.0,37.batch") == ["37.batch", "38.0"]
    assert ids("-s38.batch") == ["38.batch"]
    assert ids("--steps=38") == ["38.0", "38.batch"]  # (a job id: all its steps)
    assert ids("-s", "-j", "37") == ["37.0", "37.batch"]
    assert ids("-s", "-u", "bob") == ["9_2.10", "9_2.extern"]
    assert ids("-s", "-n", "inner,mpi") == ["37.0", "38.0"]  # (the steps' names)
    assert ids("-s", "-w", "n2,n4") == ["9_2.10", "9_2.extern", "38.0"]
    assert ids("-s", "-p", "debug", "-S", "-i") == ["38.batch", "38.0", "9_2.extern", "9_2.10"]


def test_a_steps_fields_and_long_layout(monkeypatch: pytest.MonkeyPatch) -> None:
    out = steps(monkeypatch, "-s", "9_2.10", "-o", "%i|%F|%K|%A|%l|%U", "-h").stdout
    assert out == "9_2.10|9|2|1|UNLIMITED|N/A\n"
    out = steps(monkeypatch, "-s", "38.0", "-O", "StepID,NumTasks:6,nodes", "-h").stdout
    assert out.split() == ["38.0", "4", "n[1-2]"]
    date, header, row = steps(monkeypatch, "-s", "38.0", "-l").stdout.splitlines()
    assert re.fullmatch(r"\w{3} \w{3} \d\d \d\d:\d\d:\d\d \d{4}", date)
    assert header.split()[0] == "STEPID" and row.split()[0] == "38.0"
    data = json.loads(steps(monkeypatch, "-s", "38.0", "--json").stdout)
    assert [(s["id"], s["name"], s["ntasks"]) for s in data] == [("38.0", "inner", 4)]


def test_a_jobs_letter_or_a_bad_step_is_refused(monkeypatch: pytest.MonkeyPatch) -> None:
    assert "%t" in steps(monkeypatch, "-s", "-o", "%i %t", code=2).stderr
    assert "bad job step '38.x'" in steps(monkeypatch, "-s", "38.x", code=2).stderr
    with pytest.raises(ValueError, match="bad job step"):
        parse_steps("38.0,,39")
    assert parse_steps("").jobs == parse_steps("").steps == frozenset()
