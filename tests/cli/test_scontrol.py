"""``fusesched scontrol``: scontrol's words read into fusesched's calls, its records as Slurm
writes them (pure), and the refusals made before any controller is asked. The commands
against a live controller: tests/live/test_slurm_tools_live.py."""

from __future__ import annotations

import subprocess
import sys

import pytest

from fusesched.cli import scontrol_update as su
from fusesched.cli.scontrol import run
from fusesched.cli.scontrol_show import (
    job_record,
    license_record,
    node_record,
    partition_records,
    reason_word,
    render,
    reservation_record,
    stamp,
)
from fusesched.cli.scontrol_update import ScontrolError

NOW = 1_800_000_000.0


def _job(**extra: object) -> dict[str, object]:
    return {
        "id": "12",
        "name": "train",
        "user": "nobody-here-xyz",
        "tenant": "physics",
        "queue": "gpu",
        "state": "Running",
        "phase": "running",
        "reason": "",
        "priority": 5,
        "qos": "gold",
        "time_limit_s": 7200.0,
        "nodes": ["n1", "n2", "n3"],
        "cpus": 8.0,
        "cpus_per_task": 2.0,
        "gpus": 4,
        "accelerators": {"nvidia.com/gpu": 4},
        "submit_time": NOW - 100,
        "start_time": NOW - 65,
        "end_time": None,
        "batch": True,
        "restarts": 1,
        "exit_code": None,
        **extra,
    }


def test_a_job_as_scontrol_writes_it() -> None:
    shown = render([job_record(_job(), NOW)], oneliner=False)
    lines = shown.split("\n")
    assert lines[0] == "JobId=12 JobName=train"
    assert lines[1] == "   UserId=nobody-here-xyz"  # (no account here: no uid to show)
    assert "   Priority=5 Account=physics QOS=gold" in lines
    assert "   JobState=RUNNING Reason=None" in lines
    assert "   Restarts=1 BatchFlag=1 ExitCode=0:0" in lines
    assert "   RunTime=00:01:05 TimeLimit=02:00:00" in lines
    assert "   Partition=gpu" in lines and "   NodeList=n[1-3]" in lines
    assert "   NumNodes=3 NumCPUs=8 NumTasks=4 CPUs/Task=2" in lines
    assert "   TRES=cpu=8,node=3,gres/gpu=4" in lines
    assert shown.endswith("\n\n")  # (a blank line after each record, as Slurm's)
    one = render([job_record(_job(), NOW)] * 2, oneliner=True).splitlines()
    assert len(one) == 2 and one[0].startswith("JobId=12 JobName=train UserId=")
    assert "EndTime=" in one[0]  # (a running job's: when its limit runs out)


def test_an_array_member_and_ended_jobs() -> None:
    member = job_record(_job(id="40_3", array_parent="40"), NOW)
    assert member[0] == [
        ("JobId", "40_3"),
        ("ArrayJobId", "40"),
        ("ArrayTaskId", "3"),
        ("JobName", "train"),
    ]
    failed = _job(state="Failed", phase="failed", exit_code=3, end_time=NOW, reason="exit 3")
    text = render([job_record(failed, NOW)], oneliner=True)
    assert "JobState=FAILED Reason=NonZeroExitCode" in text and "ExitCode=3:0" in text
    waiting = _job(state="Pending", phase="queued", nodes=[], start_time=None, min_nodes=2)
    text = render([job_record(waiting, NOW)], oneliner=True)
    assert "StartTime=Unknown EndTime=Unknown" in text and "NodeList=(null)" in text
    assert "NumNodes=2" in text and "TimeLimit=02:00:00" in text


def test_a_begin_time_is_the_eligible_and_expected_start_time_as_slurms() -> None:
    """``sbatch --begin`` (or ``scontrol update StartTime=``): Slurm writes the job's
    EligibleTime and, while it waits for it, its StartTime as that time."""
    later = NOW + 3600
    waiting = _job(state="Pending", phase="queued", start_time=None, begin_time=later)
    lines = render([job_record(waiting, NOW)], oneliner=False).split("\n")
    assert f"   SubmitTime={stamp(NOW - 100)} EligibleTime={stamp(later)}" in lines
    assert any(line.startswith(f"   StartTime={stamp(later)} EndTime=Unknown") for line in lines)
    plain = render([job_record(_job(), NOW)], oneliner=False).split("\n")
    assert f"   SubmitTime={stamp(NOW - 100)} EligibleTime={stamp(NOW - 100)}" in plain
    assert any(line.startswith(f"   StartTime={stamp(NOW - 65)} EndTime=") for line in plain)


@pytest.mark.parametrize(
    ("reason", "word"),
    [
        ("Resources", "Resources"),
        ("Dependency: job 12", "Dependency"),
        ("QuotaExceeded: queue physics gpu 8/8, needs 2", "QuotaExceeded"),
        ("Resources; requeued (preempted for job 12)", "Resources"),
        ("held: submitted held", "JobHeldUser"),
        ("held by administrator: disk", "JobHeldAdmin"),
        ("begin time 2026-01-01T00:00:00", "BeginTime"),
        ("waiting for licenses: matlab 2 (1 of 10 free)", "Licenses"),
        ("reservation r starts at 2026-…", "Reservation"),
        ("pending in pool hpc: (Priority)", "None"),
        ("", "None"),
    ],
)
def test_a_waiting_jobs_reason_is_one_word(reason: str, word: str) -> None:
    assert reason_word(_job(state="Pending", phase="queued", reason=reason)) == word


NODE = {
    "name": "n1",
    "state": "draining",
    "address": "10.0.0.1",
    "capacity": {"cpu": "8", "memory": "16Gi", "nvidia.com/gpu": "2"},
    "free": {"cpu": "6", "memory": "16Gi", "nvidia.com/gpu": "2"},
    "labels": {"kubernetes.io/arch": "amd64", "fusesched.io/pool": "gpu"},
    "drain_reason": "disk",
    "drained_by": "root",
    "drained_at": NOW,
    "responding": True,
}


def test_a_node_and_its_partition() -> None:
    text = render([node_record(NODE)], oneliner=True)
    assert text.startswith("NodeName=n1 Arch=amd64 CPUAlloc=2 CPUTot=8 ")
    assert "Gres=gpu:2" in text and "RealMemory=16384" in text
    assert "State=MIXED+DRAIN" in text and "Partitions=gpu" in text
    assert "Reason=disk [root@" in text
    parts = partition_records([NODE, {**NODE, "name": "n2", "drain_reason": None}])
    assert list(parts) == ["gpu"]
    assert "Nodes=n[1-2] TotalCPUs=16 TotalNodes=2" in render(parts.values(), oneliner=True)


def test_reservations_and_licenses() -> None:
    res = {
        "name": "maint",
        "nodes": ["n1", "n2"],
        "start": NOW,
        "end": NOW + 5400,
        "users": [],
        "tenants": [],
        "maintenance": True,
        "active": False,
    }
    text = render([reservation_record(res)], oneliner=True)
    assert text.startswith("ReservationName=maint StartTime=")
    assert "Duration=01:30:00 Nodes=n[1-2] NodeCnt=2 Flags=MAINT" in text
    assert "Users=(null) Accounts=(null) State=INACTIVE" in text
    lic = {"name": "matlab", "total": 10, "in_use": 3, "free": 7}
    assert render([license_record(lic)], oneliner=True) == (
        "LicenseName=matlab Total=10 Used=3 Free=7 Reserved=0 Remote=no\n"
    )


# ---------------------------------------------------------------------- words


def test_keys_in_any_case() -> None:
    given = su.pairs(["JobId=5,6", "timelimit=1:30:00", "PRIORITY=3", "qos=bronze"])
    assert su.target(given) == "job"
    change = su.job_update(given)
    assert change == su.JobUpdate(["5", "6"], 3, "bronze", 5400.0, None)
    later = su.job_update(su.pairs(["jobid=5", "TimeLimit=+30"]))
    assert later.time_limit_s is None and later.time_delta_s == 1800.0
    sooner = su.job_update(su.pairs(["jobid=5", "TimeLimit=-1:00:00"]))
    assert sooner.time_delta_s == -3600.0
    assert su.job_update(su.pairs(["jobid=5", "Priority=-5"])).priority == -5  # (fusesched's)


@pytest.mark.parametrize(
    ("words", "says"),
    [
        (["JobId=5", "NumCPUs=4"], "a job's NumCPUs cannot be changed here"),
        (["JobId=5"], "give TimeLimit=, Priority=, Nice=, QOS=, Name=, Comment=, Partition="),
        (["JobId=5", "TimeLimit=UNLIMITED"], "a time limit cannot be lifted"),
        (["JobId=5", "TimeLimit=soon"], "TimeLimit: cannot read time"),
        (["JobId=5", "Priority=high"], "Priority: a whole number"),
        (["JobId=5", "Priority=--5"], "Priority: a whole number, not '--5'"),
        (["JobId=5", "Priority=-"], "Priority: a whole number, not '-'"),
        (["TimeLimit=5"], "name what to change"),
        (["JobId=5", "NodeName=n1"], "name what to change"),
        (["JobId="], "update: JobId= names nothing"),
        (["JobId"], "'JobId' is not Key=Value"),
    ],
)
def test_bad_job_updates(words: list[str], says: str) -> None:
    with pytest.raises(ScontrolError, match=says):
        given = su.pairs(words)
        su.target(given)
        su.job_update(given)


def test_node_updates() -> None:
    drain = su.pairs(["NodeName=n[1-2]", "State=DRAIN", "Reason=disk swap"])
    assert su.target(drain) == "node"
    assert su.node_update(drain) == (["n1", "n2"], "drain", "disk swap")
    assert su.node_update(su.pairs(["nodename=n1", "state=resume"]))[1] == "resume"
    with pytest.raises(ScontrolError, match="State=DRAIN needs Reason=WHY"):
        su.node_update(su.pairs(["NodeName=n1", "State=DRAIN"]))
    with pytest.raises(ScontrolError, match="State=DOWN is not supported here"):
        su.node_update(su.pairs(["NodeName=n1", "State=DOWN", "Reason=x"]))
    with pytest.raises(ScontrolError, match="a node's Weight cannot be changed"):
        su.node_update(su.pairs(["NodeName=n1", "Weight=3"]))


def test_reservation_words() -> None:
    words = [
        "ReservationName=maint",
        "StartTime=now+1hour",
        "Duration=90",
        "Nodes=n[1-3]",
        "Users=ann,bob",
        "Flags=MAINT",
    ]
    spec = su.new_reservation(su.pairs(words))
    assert spec == su.ReservationSpec(
        "maint", ["n1", "n2", "n3"], "now+1hour", None, "5400s", ["ann", "bob"], []
    )
    with pytest.raises(ScontrolError, match="Flags=IGNORE_JOBS is not supported"):
        su.new_reservation(su.pairs([*words[:4], "Flags=IGNORE_JOBS"]))
    with pytest.raises(ScontrolError, match="give Nodes=HOSTLIST"):
        su.new_reservation(su.pairs(["ReservationName=r", "Duration=5"]))
    with pytest.raises(ScontrolError, match="CoreCnt not supported here"):
        su.new_reservation(su.pairs([*words[:4], "CoreCnt=4"]))
    change = su.reservation_change(su.pairs(["ReservationName=r", "EndTime=now+2h", "Users="]))
    assert change == su.ReservationChange("r", None, "now+2h", None, None, [], None)


# ---------------------------------------------------------------------- before asking


@pytest.mark.parametrize(
    ("argv", "says"),
    [
        ([], "give a command; supported: show job [ID]"),
        (["frob"], "'frob' is not supported here; supported: show job [ID]"),
        (["show", "frob"], "'show frob' is not supported here"),
        (["show"], "'show' without what is not supported here"),
        (["show", "job", "1", "2"], "'show job' takes at most one name"),
        (["--json", "show", "job"], "option --json is not supported here"),
        (["hold"], "'hold' needs job ids"),
        (["update", "JobId=5", "NumNodes=2"], "update: a job's NumNodes cannot be changed"),
        (["delete", "job", "5"], "'delete' takes ReservationName=NAME"),
        (["create", "node", "x"], "'create node' is not supported here"),
    ],
)
def test_what_is_not_supported_is_said(
    argv: list[str], says: str, capsys: pytest.CaptureFixture[str]
) -> None:
    assert run(argv, "http://127.0.0.1:9", None, None) == 1
    out, err = capsys.readouterr()
    assert not out and err.startswith(f"scontrol: error: {says}")


def test_host_lists_need_no_controller(capsys: pytest.CaptureFixture[str]) -> None:
    argv = ["-o", "-dd", "show", "hostnames", "n[1-2],x"]
    assert run(argv, "http://127.0.0.1:9", None, None) == 0
    assert capsys.readouterr().out == "n1\nn2\nx\n"


def test_an_unreachable_controller_is_said(capsys: pytest.CaptureFixture[str]) -> None:
    assert run(["show", "job", "5"], "http://127.0.0.1:9", None, None) == 1
    assert "cannot reach the controller at http://127.0.0.1:9" in capsys.readouterr().err


def test_fusesched_scontrol_host_lists_start_quickly() -> None:
    """``fusesched scontrol show hostnames`` (the ``scontrol`` that ``fusesched slurm-commands``
    installs runs it; scripts call it in loops) imports no command framework and no HTTP
    client: as quick as a job's own ``scontrol``."""
    command = [sys.executable, "-X", "importtime", "-m", "fusesched", "scontrol"]
    done = subprocess.run(
        [*command, "show", "hostnames", "n[1-3]"],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert (done.returncode, done.stdout) == (0, "n1\nn2\nn3\n"), done.stderr[-2000:]
    imported = {line.rsplit("|", 1)[1].strip() for line in done.stderr.splitlines() if "|" in line}
    assert "fusesched.scontrol" in imported
    assert not {"typer", "click", "httpx", "fusesched.cli.live"} & imported
