"""``fusesched scontrol ping``, ``version``/``-V``, ``show config|steps|topology``, the
refusals of ``suspend``, ``resume``, ``listpids``, ``notify`` and ``top``, and ``update
JobId=… Nice=…`` (and the job keys the controller cannot change), as Slurm 22.05's scontrol
says them."""

from __future__ import annotations

import time
from typing import Any

import pytest

from fusesched.cli import scontrol_cluster as sc
from fusesched.cli import scontrol_update as su
from fusesched.cli.scontrol import _command, run
from fusesched.cli.scontrol_update import ScontrolError

NOW = 1_800_000_000.0
DOWN = "http://127.0.0.1:9"  # (nothing listens there)


def test_ping_lines_as_slurms() -> None:
    assert sc.ping_lines([("http://head:8642", True)]) == ["Slurmctld(primary) at head is UP"]
    assert sc.ping_lines([("https://a:1", True), ("https://b:1", False)]) == [
        "Slurmctld(primary) at a is UP",
        "Slurmctld(backup) at b is DOWN",
    ]
    three = sc.ping_lines([("http://a", True), ("http://b", True), ("http://c", True)])
    assert three[2] == "Slurmctld(backup2) at c is UP"


def test_ping_of_a_controller_that_does_not_answer(capsys: pytest.CaptureFixture[str]) -> None:
    assert run(["ping"], DOWN, None, None) == 1
    assert capsys.readouterr().out == "Slurmctld(primary) at 127.0.0.1 is DOWN\n"


@pytest.mark.parametrize("argv", [["version"], ["-V"], ["--version"], ["-o", "-V", "show"]])
def test_version(argv: list[str], capsys: pytest.CaptureFixture[str]) -> None:
    assert run(argv, DOWN, None, None) == 0
    assert capsys.readouterr().out == "slurm 22.05.0\n"


def test_config_says_what_is_known() -> None:
    lines = sc.config_lines(
        ["http://head:8642", "http://standby:8642"], [{"name": "matlab", "total": 10}], NOW
    )
    stamp = time.strftime("%Y-%m-%dT%H:%M:%S", time.localtime(NOW))
    assert lines[0] == f"Configuration data as of {stamp}"
    assert "ClusterName             = fusesched" in lines  # (23 wide, as Slurm's)
    assert "SlurmctldHost[0]        = head" in lines
    assert "SlurmctldHost[1]        = standby" in lines
    assert "SlurmctldPort           = 8642" in lines
    assert "Licenses                = matlab:10" in lines
    assert "PriorityType            = priority/multifactor" in lines
    assert "MinJobAge               = 300 sec" in lines  # (squeue's ended jobs, as Slurm's)
    assert "SLURM_VERSION           = 22.05.0" in lines  # (three numbers, as Slurm's)
    assert all(" = " in line for line in lines[1:])


STEPS = [
    {"step": "batch", "name": "batch", "tasks": 1, "ntasks": 1, "nodes": ["n1"]},
    {"step": "0", "name": "inner", "tasks": 2, "ntasks": 2, "nodes": ["n1", "n2"]},
    {"step": "1", "name": "done", "tasks": 1, "ntasks": 1, "nodes": ["n1"], "end_time": NOW},
]
JOB = {"id": "31", "user": "nobody-here-xyz", "queue": "gpu", "time_limit_s": 3600.0}


def test_running_steps_as_scontrol_writes_them() -> None:
    records = sc.step_records([JOB | {"steps": STEPS}], None)
    assert [r[0][0] for r in records] == [("StepId", "31.batch"), ("StepId", "31.0")]
    assert records[1][0][3] == ("TimeLimit", "01:00:00")
    assert records[1][1] == [("State", "RUNNING"), ("Partition", "gpu"), ("NodeList", "n[1-2]")]
    assert records[1][2] == [("Nodes", "2"), ("Tasks", "2"), ("Name", "inner")]
    assert len(sc.step_records([JOB | {"steps": STEPS}], "0")) == 1
    assert sc.step_records([JOB | {"steps": None}], None) == []  # (an older controller)


class Fake:
    token = None

    def __init__(self, jobs: list[dict[str, Any]]) -> None:
        self.urls = [DOWN]
        self._jobs = jobs
        self.asked: list[dict[str, Any]] = []
        self.updates: list[tuple[Any, ...]] = []

    def jobs(self, **query: Any) -> list[dict[str, Any]]:
        self.asked.append(query)
        return [j for j in self._jobs if not query.get("ids") or j["id"] in query["ids"]]

    def update(self, *args: Any, **changes: Any) -> list[str]:
        """Records the positional arguments, and the keyword ones that are given."""
        given = {k: v for k, v in changes.items() if v is not None}
        self.updates.append((*args, given) if given else args)
        return [args[0]]


@pytest.mark.parametrize(
    ("words", "code", "out", "err"),
    [
        (["show", "steps"], 0, "StepId=31.batch ", ""),
        (["show", "step", "31.0"], 0, "StepId=31.0 ", ""),
        (["show", "step", "31.7"], 1, "", "Job step 31.7 not found\n"),
        (["show", "step", "99"], 1, "", "slurm_get_job_steps error: Invalid job id specified\n"),
    ],
)
def test_show_steps(
    words: list[str], code: int, out: str, err: str, capsys: pytest.CaptureFixture[str]
) -> None:
    fake = Fake([JOB | {"steps": STEPS}])
    assert _command(fake, words, False) == code
    said = capsys.readouterr()
    assert said.out.startswith(out) and said.err == err
    assert all(q.get("steps") for q in fake.asked)


def test_no_steps_at_all(capsys: pytest.CaptureFixture[str]) -> None:
    assert _command(Fake([]), ["show", "steps"], False) == 0
    assert capsys.readouterr().out == "No job steps in the system\n"


def test_no_topology_as_slurm_without_one(capsys: pytest.CaptureFixture[str]) -> None:
    assert run(["show", "topology"], DOWN, None, None) == 0
    assert capsys.readouterr().err == "scontrol: error: No topology information available\n"


@pytest.mark.parametrize("verb", ["suspend", "resume", "listpids", "notify", "top"])
def test_what_cannot_be_done_here_is_refused_saying_why(
    verb: str, capsys: pytest.CaptureFixture[str]
) -> None:
    assert run([verb, "12", "hello"], DOWN, None, None) == 1
    said = capsys.readouterr().err
    assert said.startswith(f"scontrol: error: '{verb}' is not supported here: ")
    assert "cannot reach" not in said  # (refused before any controller is asked)


def test_nice_is_a_lower_priority_as_sbatchs() -> None:
    assert su.job_update(su.pairs(["JobId=5", "Nice=50"])).priority == -50
    assert su.job_update(su.pairs(["JobId=5", "Nice=-10"])).priority == 10
    with pytest.raises(ScontrolError, match="Priority= or Nice=, not both"):
        su.job_update(su.pairs(["JobId=5", "Nice=5", "Priority=3"]))
    with pytest.raises(ScontrolError, match="Nice: expected a whole number"):
        su.job_update(su.pairs(["JobId=5", "Nice=x"]))
    fake = Fake([])
    assert _command(fake, ["update", "JobId=5", "Nice=7"], False) == 0
    assert fake.updates == [("5", -7, None, None)]


@pytest.mark.parametrize("key", ["NumCPUs", "NumNodes", "NumTasks", "MinMemoryNode"])
def test_job_keys_the_controller_cannot_change_are_refused(key: str) -> None:
    with pytest.raises(ScontrolError, match=f"a job's {key} cannot be changed here: "):
        su.job_update(su.pairs(["JobId=5", f"{key}=x"]))
