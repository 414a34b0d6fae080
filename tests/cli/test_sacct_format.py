"""``fusesched sacct``'s pure parts: Slurm's state names for ``-s`` and as shown, exit codes,
the ``-o`` fields and widths, the table, ``-p``/``-P`` and JSON outputs, and the ``-S``/``-E``
times."""

from __future__ import annotations

import time
from datetime import UTC, datetime, timedelta, timezone

import pytest

from fusesched.agent.runtime import REASON_OOM
from fusesched.cli import sacct_format as sf
from fusesched.cli.sacct_time import parse_sacct_time
from fusesched.core.deadlines import REASON as DEADLINE_REASON
from fusesched.core.requeue import NOT_REQUEUED
from fusesched.model.phases import node_failure

NOW = 1_000_000.0


def job(**fields: object) -> dict[str, object]:
    base: dict[str, object] = {
        "id": "7",
        "name": "train",
        "user": "alice",
        "tenant": "physics",
        "queue": "gpu",
        "state": "Completed",
        "phase": "completed",
        "exit_code": 0,
        "reason": "",
        "priority": 3,
        "cpus": 4.0,
        "gpus": 1,
        "min_nodes": 1,
        "accelerators": {"nvidia.com/gpu": 1},
        "nodes": ["n1"],
        "submit_time": NOW - 100,
        "start_time": NOW - 90,
        "end_time": NOW - 25,
        "time_limit_s": 3600.0,
    }
    base.update(fields)
    return base


def shown(fmt: str, usage: dict[str, object] | None = None, **fields: object) -> list[str]:
    return sf.values(sf.parse_format(fmt), job(**fields), usage or {}, NOW)


@pytest.mark.parametrize(
    ("fields", "state"),
    [
        ({}, "COMPLETED"),
        ({"state": "Failed", "phase": "failed", "reason": "exit 3"}, "FAILED"),
        ({"state": "Failed", "phase": "failed", "reason": REASON_OOM}, "OUT_OF_MEMORY"),
        ({"state": "Failed", "phase": "failed", "reason": node_failure("node lost")}, "NODE_FAIL"),
        # (a lost node named in a reason without the controller's marker: a plain failure)
        ({"state": "Failed", "phase": "failed", "reason": "node n0 lost"}, "FAILED"),
        ({"state": "Failed", "phase": "timeout"}, "TIMEOUT"),
        ({"state": "Cancelled", "phase": "cancelled", "reason": "by alice"}, "CANCELLED"),
        ({"state": "Cancelled", "phase": "cancelled", "reason": DEADLINE_REASON}, "DEADLINE"),
        (
            {"state": "Cancelled", "phase": "cancelled", "reason": f"room; {NOT_REQUEUED}"},
            "PREEMPTED",
        ),
        ({"state": "Pending", "phase": "preempted"}, "PREEMPTED"),
        ({"state": "Pending", "phase": "queued"}, "PENDING"),
        ({"state": "Pending", "phase": "held"}, "PENDING"),
        ({"state": "Running", "phase": "running"}, "RUNNING"),
    ],
)
def test_states_as_sacct_prints_them(fields: dict[str, object], state: str) -> None:
    assert sf.sacct_state(job(**fields)) == state


def test_state_names_and_codes() -> None:
    assert sf.parse_states(["cd,F", "oom"]) == {"COMPLETED", "FAILED", "OUT_OF_MEMORY"}
    assert sf.parse_states(["TIMEOUT", "nf", "PR", "dl"]) == {
        "TIMEOUT",
        "NODE_FAIL",
        "PREEMPTED",
        "DEADLINE",
    }
    assert sf.parse_states(["RQ,CG"]) == set()  # (states no fusesched job shows)
    with pytest.raises(ValueError, match=r"unknown job state 'XX'; known: PD/PENDING"):
        sf.parse_states(["CD,XX"])
    with pytest.raises(ValueError, match="unknown job state"):
        sf.parse_states(["CD,"])
    query = sf.state_query({"COMPLETED", "OUT_OF_MEMORY", "PREEMPTED"})
    assert query == sf.StateMatch(("Completed",), ("cancelled", "failed", "preempted"))


@pytest.mark.parametrize(("code", "text"), [(0, "0:0"), (3, "3:0"), (-15, "0:15"), (-1, "0:0")])
def test_exit_codes_are_code_colon_signal(code: int, text: str) -> None:
    assert sf.exit_code(job(exit_code=code)) == text
    assert sf.exit_code(job(exit_code=None, state="Pending", phase="queued")) == "0:0"


def test_out_of_memory_is_0_125_as_in_slurm() -> None:
    """Slurm shows the job and its step killed for memory as ``0:125`` (its SIG_OOM, 253,
    less the signal flag), not the SIGKILL's ``0:9``."""
    oom = job(state="Failed", phase="failed", reason=REASON_OOM, exit_code=-9)
    assert shown("State,ExitCode", **oom) == ["OUT_OF_MEMORY", "0:125"]
    step = {"step": "batch", "state": "OUT_OF_MEMORY", "phase": "", "exit_code": -9}
    assert sf.exit_code(step) == "0:125"
    assert sf.exit_code({**step, "state": "CANCELLED"}) == "0:9"
    assert sf.exit_code(job(state="Failed", phase="failed", exit_code=-9)) == "0:9"


@pytest.mark.parametrize("code", [-1, 1, 129, None])
def test_a_job_its_node_failure_ended_is_0_1_as_in_slurm(code: int | None) -> None:
    """slurmctld sets the exit code of a job it kills on a failed node to 1, which sacct reads
    as signal 1: ``NODE_FAIL 0:1`` whatever was stored; its steps keep their own codes."""
    lost = job(state="Failed", phase="failed", reason=node_failure("node lost"), exit_code=code)
    assert shown("State,ExitCode", **lost) == ["NODE_FAIL", "0:1"]
    step = {"step": "0", "state": "NODE_FAIL", "phase": "", "exit_code": None}
    assert sf.exit_code(step) == "0:0"


def test_times_and_durations() -> None:
    stamp = time.strftime("%Y-%m-%dT%H:%M:%S", time.localtime(NOW - 90))
    assert shown("Start,Elapsed,ElapsedRaw,Timelimit,CPUTime,CPUTimeRaw") == [
        stamp,
        "00:01:05",
        "65",
        "01:00:00",
        "00:04:20",
        "260",
    ]
    waiting = {"start_time": None, "end_time": None, "phase": "pending", "state": "Pending"}
    assert shown("Start,End,Elapsed,Eligible,AllocCPUS,AllocTRES", **waiting) == [
        "Unknown",
        "Unknown",
        "00:00:00",
        "Unknown",
        "0",
        "",
    ]
    assert shown("Elapsed,Timelimit", end_time=None, time_limit_s=None) == ["00:01:30", "UNLIMITED"]
    assert sf.duration(2 * 86400 + 3661) == "2-01:01:01"
    assert sf.cpu_duration(61.5) == "01:01.500"
    assert sf.cpu_duration(7200) == "02:00:00"


def test_usage_fields_read_the_efficiency_view() -> None:
    usage = {"max_rss_bytes": 5 * 2**20, "cpu_seconds": 12.25, "memory_bytes": 4 * 2**30}
    usage["tasks_count"] = 2
    usage["tasks"] = [{"node": "n1", "max_rss_bytes": 5 * 2**20}, {"node": "n1"}]
    assert shown("MaxRSS,TotalCPU,ReqMem,NTasks,AllocTRES", usage) == [
        "5M",
        "00:12.250",
        "4G",
        "2",
        "cpu=4,mem=4G,node=1,gres/gpu=1",
    ]
    assert shown("MaxRSS,TotalCPU,ReqMem,NTasks") == ["", "", "", ""]  # (not sampled)
    assert shown("ReqMem", {"memory_bytes": 500 * 2**20}) == ["500M"]
    assert sf.needs_usage(sf.parse_format("JobID,maxrss"))
    assert not sf.needs_usage(sf.parse_format(sf.DEFAULT_FORMAT))


def test_other_fields() -> None:
    assert shown("jobid,JOBIDRAW,jobname,user,partition,account,qos,reason,priority") == [
        "7",
        "7",
        "train",
        "alice",
        "gpu",
        "physics",
        "",
        "None",
        "3",
    ]
    assert shown("NodeList,NNodes,AllocNodes,AllocCPUS,ReqCPUS", cpus=0.5) == [
        "n1",
        "1",
        "1",
        "0.5",
        "0.5",
    ]
    assert shown("NodeList,NNodes,AllocNodes", nodes=[], min_nodes=2) == ["None assigned", "2", "0"]
    many = ["n1", "n2", "n3", "gpu7"]  # (Slurm's short host list)
    assert shown("NodeList%20,AllocNodes", nodes=many) == ["n[1-3],gpu7", "4"]
    assert shown("JobName", name="a\nb\x1b[31m") == ["a?b?[31m"]


def test_format_errors_list_the_known_fields() -> None:
    with pytest.raises(ValueError, match=r"unknown field 'Bogus'.*known: JobID,JobIDRaw,JobName"):
        sf.parse_format("JobID,Bogus")
    with pytest.raises(ValueError, match="no field"):
        sf.parse_format(" , ")
    # (blank items skipped, as Slurm's sacct: its own lists end in a comma)
    assert [c.field.header for c in sf.parse_format("JobID,,State,")] == ["JobID", "State"]
    with pytest.raises(ValueError, match="bad width"):
        sf.parse_format("JobID%0")
    with pytest.raises(ValueError, match="unknown field"):
        sf.parse_format("JobID%12345")


def test_table_widths_justification_and_cuts() -> None:
    columns = sf.parse_format("JobID,JobName%5,State%-9")
    rows = [["12_3", "training", "COMPLETED"], ["4", "ok", "FAILED"]]
    assert sf.table(columns, rows) == [
        "JobID        JobNa State",
        "------------ ----- ---------",
        "12_3         trai+ COMPLETED",
        "4               ok FAILED",
    ]
    assert sf.table(columns, rows, header=False)[0].startswith("12_3")
    default = sf.table(sf.parse_format(sf.DEFAULT_FORMAT), [])
    assert default[0].split() == DEFAULT_HEADERS
    assert default[0].startswith("JobID        ") and default[0].endswith("    State ExitCode")


DEFAULT_HEADERS = ["JobID", "JobName", "Partition", "Account", "AllocCPUS", "State", "ExitCode"]


def test_parsable_and_json() -> None:
    columns = sf.parse_format("JobID,JobName")
    rows = [["5", "a|b"], ["6", "x"]]
    assert sf.parsable(columns, rows) == ["JobID|JobName", "5|a?b", "6|x"]
    assert sf.parsable(columns, rows, header=False, trailing=True) == ["5|a?b|", "6|x|"]
    assert sf.records(columns, rows[1:]) == [{"JobID": "6", "JobName": "x"}]


# ---------------------------------------------------------------------- times

ZONE = timezone(timedelta(hours=2))
#: 2026-03-10 14:30:00 in ZONE.
AT = datetime(2026, 3, 10, 14, 30, tzinfo=ZONE).timestamp()


def at(*args: int) -> float:
    return datetime(*args, tzinfo=ZONE).timestamp()  # type: ignore[misc]


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("now", AT),
        ("now-2days", AT - 2 * 86400),
        ("now-1hours", AT - 3600),
        ("NOW-3h", AT - 3 * 3600),
        ("now-90", AT - 90),
        ("now+10minutes", AT + 600),
        ("today", at(2026, 3, 10)),
        ("midnight", at(2026, 3, 10)),
        ("tomorrow", at(2026, 3, 11)),
        ("noon", at(2026, 3, 10, 12)),
        ("teatime", at(2026, 3, 9, 16)),  # (not yet today: yesterday's)
        ("09:15", at(2026, 3, 10, 9, 15)),
        ("15:00:30", at(2026, 3, 9, 15, 0, 30)),
        ("2026-03-01", at(2026, 3, 1)),
        ("2026-03-01T08:05", at(2026, 3, 1, 8, 5)),
        ("2026-03-01T08:05:09", at(2026, 3, 1, 8, 5, 9)),
        ("2026-03-01T08:05:09+00:00", datetime(2026, 3, 1, 8, 5, 9, tzinfo=UTC).timestamp()),
        ("0301", at(2026, 3, 1)),
        ("030125", at(2025, 3, 1)),
        ("03/01", at(2026, 3, 1)),
        ("03/01/25-10:00", at(2025, 3, 1, 10)),
        ("3.1.24", at(2024, 3, 1)),
        ("0301-06:30:15", at(2026, 3, 1, 6, 30, 15)),
        # no year and a month still to come: last year's (sacct looks back, across New Year)
        ("1231", at(2025, 12, 31)),
        ("04/01-08:00", at(2025, 4, 1, 8)),
        ("0325", at(2026, 3, 25)),  # (this month: this year's, as Slurm's)
        ("12.31.26", at(2026, 12, 31)),  # (a year given: that one)
    ],
)
def test_sacct_times(text: str, expected: float) -> None:
    assert parse_sacct_time(text, AT, ZONE) == expected


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("", "an empty --starttime"),
        ("yesterday-ish", "cannot read the --starttime 'yesterday-ish'"),
        ("now-3fortnights", "unknown unit 'fortnights'"),
        ("now-999999999999weeks", "more than 100 years"),
        ("25:00", "no such time of day"),
        ("1332", "month must be in 1..12"),
        ("02/30", "day is out of range"),
        ("2026-13-01", "--starttime"),
        ("03/01.25", "cannot read"),
    ],
)
def test_bad_sacct_times(text: str, message: str) -> None:
    with pytest.raises(ValueError, match=message.replace("(", r"\(")):
        parse_sacct_time(text, AT, ZONE, what="--starttime")
