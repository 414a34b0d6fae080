"""``fusesched sacct``'s fields beyond the first ones, by Slurm's names: sizes and energy in
Slurm's units, a step's per-task figures (AveRSS, MinCPU, the node and task of the peak), the
job's own fields (WorkDir, ReqTRES, Planned, …), the fields accepted though always blank, and
``sacct -e``'s list."""

from __future__ import annotations

import os
import pwd
from typing import Any

import pytest
from tests.cli.test_sacct_steps import TASKS, task
from tests.cli.test_sacct_steps import job as step_job
from typer.testing import CliRunner

from fusesched.cli import sacct as sacct_cli
from fusesched.cli import sacct_fields as fl
from fusesched.cli import sacct_format as sf
from fusesched.cli import sacct_steps as st
from fusesched.cli import sacct_usage as su
from fusesched.cli.main import app

NOW = 1_000_000.0

#: The names Slurm 22.05's ``sacct -e`` lists (its man page's list).
SLURM_22_05 = """Account AdminComment AllocCPUS AllocNodes AllocTRES AssocID AveCPU AveCPUFreq
AveDiskRead AveDiskWrite AvePages AveRSS AveVMSize BlockID Cluster Comment Constraints
ConsumedEnergy ConsumedEnergyRaw Container CPUTime CPUTimeRAW DBIndex DerivedExitCode Elapsed
ElapsedRaw Eligible End ExitCode Flags GID Group JobID JobIDRaw JobName Layout MaxDiskRead
MaxDiskReadNode MaxDiskReadTask MaxDiskWrite MaxDiskWriteNode MaxDiskWriteTask MaxPages
MaxPagesNode MaxPagesTask MaxRSS MaxRSSNode MaxRSSTask MaxVMSize MaxVMSizeNode MaxVMSizeTask
McsLabel MinCPU MinCPUNode MinCPUTask NCPUS NNodes NodeList NTasks Partition Priority QOS QOSRAW
Reason ReqCPUFreq ReqCPUFreqGov ReqCPUFreqMax ReqCPUFreqMin ReqCPUS ReqMem ReqNodes ReqTRES
Reservation ReservationId Reserved ResvCPU ResvCPURAW Start State Submit SubmitLine Suspended
SystemComment SystemCPU Timelimit TimelimitRaw TotalCPU TRESUsageInAve TRESUsageInMax
TRESUsageInMaxNode TRESUsageInMaxTask TRESUsageInMin TRESUsageInMinNode TRESUsageInMinTask
TRESUsageInTot TRESUsageOutAve TRESUsageOutMax TRESUsageOutMaxNode TRESUsageOutMaxTask
TRESUsageOutMin TRESUsageOutMinNode TRESUsageOutMinTask TRESUsageOutTot UID User UserCPU WCKey
WCKeyID WorkDir"""  # (read with .split())


def job(**fields: Any) -> dict[str, Any]:
    base: dict[str, Any] = {
        "id": "7",
        "name": "train",
        "user": "nobody-here-xyz",
        "tenant": "physics",
        "queue": "gpu",
        "state": "Completed",
        "phase": "completed",
        "exit_code": 0,
        "cpus": 4.0,
        "gpus": 1,
        "min_nodes": 2,
        "accelerators": {"nvidia.com/gpu": 1},
        "nodes": ["n1", "n2"],
        "submit_time": NOW - 100,
        "start_time": NOW - 90,
        "end_time": NOW - 25,
        "time_limit_s": 3601.0,
    }
    base.update(fields)
    return base


def shown(fmt: str, the_job: dict[str, Any], usage: dict[str, Any] | None = None) -> list[str]:
    return sf.values(sf.parse_format(fmt), the_job, usage or {}, NOW)


def steps(the_job: dict[str, Any], fmt: str) -> dict[str, list[str]]:
    columns = sf.parse_format(fmt)
    rows = st.step_rows(the_job, sf.sacct_state(the_job))
    return {view["id"]: sf.values(columns, view, used, NOW) for view, used in rows}


def test_every_field_of_slurm_22_05_is_taken_in_any_case_with_a_width() -> None:
    for name in SLURM_22_05.split():
        (column,) = sf.parse_format(f"{name.lower()}%-7")
        assert column.field.header == name and column.width == -7
        assert sf.parse_format(name.upper())[0].field.header == name
    assert [c.width for c in sf.parse_format("AveRSS,ConsumedEnergy,WorkDir%30")] == [10, 14, 30]
    with pytest.raises(ValueError, match="unknown field 'AveRSSS'"):
        sf.parse_format("JobID,AveRSSS")


def test_helpformat_lists_the_fields_four_a_line_as_slurm() -> None:
    lines = fl.helpformat().splitlines()
    assert (
        lines[0].rstrip()
        == "Account             AdminComment        AllocCPUS           AllocNodes"
    )
    assert (
        lines[5].rstrip()
        == "CPUTime             CPUTimeRAW          DBIndex             DerivedExitCode"
    )
    assert all(len(line) == 79 for line in lines[:-1])
    listed = " ".join(lines).split()
    assert listed == sorted(listed, key=str.lower)
    assert set(SLURM_22_05.split()) <= set(listed)
    assert set(listed) - set(SLURM_22_05.split()) == {
        "Planned",
        "PlannedCPU",
        "PlannedCPURAW",
        "Restarts",
    }
    for flag in ("-e", "--helpformat"):  # (no controller asked)
        result = CliRunner().invoke(app, ["sacct", flag])
        assert result.exit_code == 0, result.output
        assert result.stdout == fl.helpformat()


def test_sizes_and_energy_in_slurm_units() -> None:
    assert [su.slurm_size(n) for n in (None, 0, 2048, 5 * 2**20, 5 * 2**19, 5000)] == [
        "",
        "0",
        "2K",
        "5M",
        "2.50M",
        "5000",
    ]
    assert su.slurm_size(1234567 * 1024) == "1234567K"
    assert su.slurm_size(1536, unit=2) == "1.50G"
    assert [su.energy(j) for j in (None, 0, 999, 12345, 3_000_000)] == [
        "0",
        "0",
        "999",
        "12.35K",
        "3M",
    ]
    assert shown("ConsumedEnergy,ConsumedEnergyRaw", job(energy_kwh=0.5)) == ["1.80M", "1800000"]
    assert shown("ConsumedEnergy,ConsumedEnergyRaw", job()) == ["0", "0"]  # (not known yet)
    assert shown("ReqMem", job(), {"memory_bytes": 3 * 2**29}) == ["1.50G"]
    assert sf.cpu_duration(2.0) == "00:00:02"  # (no milliseconds: Slurm's 00:MM:SS)
    assert sf.cpu_duration(12.2509) == "00:12.250"  # (milliseconds cut, not rounded)
    assert sf.cpu_duration(59.9999) == "00:59.999"


PER_TASK = "JobID,MaxRSS,MaxRSSNode,MaxRSSTask,AveRSS,AveCPU,MinCPU,MinCPUNode,MinCPUTask"


def test_a_steps_per_task_figures_from_its_tasks() -> None:
    assert sf.needs_tasks(sf.parse_format(PER_TASK))
    assert not sf.needs_tasks(sf.parse_format("JobID,MaxRSS,TotalCPU"))
    rows = steps(step_job(TASKS), PER_TASK)
    # the batch script: one task, its figures; step 0: two tasks, n2's the higher peak (the
    # only CPU time sampled is n1's); step 1: not sampled
    assert rows["7.batch"][1:] == ["2K", "n1", "0", "2K", "00:00:01", "00:00:01", "n1", "0"]
    assert rows["7.0"][1:] == ["5000", "n2", "1", "2505", "00:00:02", "00:00:02", "n1", "0"]
    assert rows["7.1"][1:] == ["", "", "", "", "", "", "", ""]
    # the controller's summaries alone: a one-task step's figures, a larger one's peak only
    summaries = [
        st.summarise("batch", TASKS[:1]),
        st.summarise("0", TASKS[1:3]),
    ]
    summarised = step_job([], steps=summaries)
    rows = steps(summarised, PER_TASK)
    assert rows["7.batch"][1:] == ["2K", "n1", "0", "2K", "00:00:01", "00:00:01", "n1", "0"]
    assert rows["7.0"][1:] == ["5000", "", "", "", "", "", "", ""]


def test_a_jobs_own_row_shows_per_task_figures_only_without_step_rows() -> None:
    usage = {
        "tasks_count": 2,
        "max_rss_bytes": 6 * 2**20,
        "tasks": [
            {"group": "main", "node": "n1", "cpu_seconds": 10.0, "max_rss_bytes": 2**20},
            {"group": "main", "node": "n2", "cpu_seconds": 4.0, "max_rss_bytes": 5 * 2**20},
        ],
    }
    assert shown(PER_TASK, job(), usage)[1:] == [
        "5M",
        "n2",
        "1",
        "3M",
        "00:00:07",
        "00:00:04",
        "n2",
        "1",
    ]
    # a batch job's (or one with steps): on its steps' rows, blank on its own, as Slurm's
    assert shown(PER_TASK, job(batch=True), usage)[1:] == [""] * 8
    assert shown(PER_TASK, job(steps=[{"step": "0"}]), usage)[1:] == [""] * 8
    # an efficiency view without tasks: a one-task job's peak
    assert shown("MaxRSS", job(), {"tasks_count": 1, "max_rss_bytes": 4096}) == ["4K"]
    assert shown("MaxRSS", job(), {"tasks_count": 2, "max_rss_bytes": 4096}) == [""]


def test_the_jobs_own_fields() -> None:
    fmt = "WorkDir,Comment,TimelimitRaw,ReqNodes,ReqTRES,Cluster,Suspended,ReqCPUFreqMin,DBIndex"
    the_job = job(workdir="/home/a/run", comment="sweep 3", seq=41)
    assert shown(fmt, the_job, {"memory_bytes": 2**32}) == [
        "/home/a/run",
        "sweep 3",
        "61",
        "2",
        "cpu=4,mem=4G,node=2,gres/gpu=1",
        "fusesched",
        "00:00:00",
        "Unknown",
        "41",
    ]
    assert shown("TimelimitRaw,WorkDir", job(time_limit_s=None)) == ["UNLIMITED", ""]
    planned = "Planned,Reserved,PlannedCPU,ResvCPU,PlannedCPURAW,ResvCPURAW"
    assert shown(planned, job()) == ["00:00:10", "00:00:10", "00:00:40", "00:00:40", "40", "40"]
    waiting = job(start_time=None, end_time=None, state="Pending", phase="queued")
    assert shown("Planned,ReqTRES", waiting) == ["00:01:40", "cpu=4,node=2,gres/gpu=1"]
    held = job(start_time=None, end_time=None, state="Pending", phase="held")
    assert shown("Planned", held) == ["00:00:00"]  # (not eligible)
    never = job(start_time=None, end_time=NOW - 40, state="Cancelled", phase="cancelled")
    assert shown("Planned", never) == ["00:01:00"]  # (to its end)


def test_derived_exit_code_is_the_worst_of_the_steps() -> None:
    fmt = "DerivedExitCode,ExitCode"
    assert sf.needs_detail(sf.parse_format(fmt))  # (its steps, with -X too)
    assert shown(fmt, step_job(TASKS)) == ["3:0", "3:0"]
    killed = [task("7.main.0", code=0), task("7.remote.1", step=0, code=-9)]
    assert shown(fmt, step_job(killed, exit_code=0)) == ["0:9", "0:0"]
    assert shown(fmt, job(exit_code=2)) == ["2:0", "2:0"]  # (no steps: its own)
    assert shown(fmt, job(exit_code=None)) == ["0:0", "0:0"]


def test_uid_gid_and_group_of_the_user_on_this_machine() -> None:
    me = pwd.getpwuid(os.getuid())
    uid, gid, group = shown("UID,GID,Group", job(user=me.pw_name))
    assert (uid, gid) == (str(me.pw_uid), str(me.pw_gid)) and group
    assert shown("UID,GID,Group", job()) == ["", "", ""]  # (no such user here)


def test_step_rows_leave_the_jobs_fields_blank_and_show_their_own() -> None:
    fmt = "WorkDir,Comment,TimelimitRaw,ReqTRES,DerivedExitCode,Planned,UID,Reason,ReqNodes"
    fmt += ",NCPUS,Cluster,ConsumedEnergy,ConsumedEnergyRaw,Suspended,DBIndex"
    the_job = step_job(TASKS, workdir="/w", comment="c", energy_kwh=1.0, seq=5)
    rows = steps(the_job, fmt)
    blank = [""] * 8  # (the job's alone)
    assert rows["7.0"] == [*blank, "2", "4", "fusesched", "0", "0", "00:00:00", "5"]


def test_fields_fusesched_keeps_no_figure_for_are_blank() -> None:
    assert {"MaxVMSize", "UserCPU", "SystemCPU", "Flags", "SubmitLine"} <= fl.ALWAYS_BLANK
    fmt = ",".join(sorted(fl.ALWAYS_BLANK))
    assert set(shown(fmt, job(batch=False))) == {""}
    assert {v for row in steps(step_job(TASKS), fmt).values() for v in row} == {""}


class Recorder:
    """A controller that answers one job with its tasks, and records what sacct asks."""

    def __init__(self) -> None:
        self.asked: list[dict[str, Any]] = []

    def jobs(self, **query: Any) -> list[dict[str, Any]]:
        self.asked.append(query)
        the_job = step_job(TASKS, user="alice", seq=1)
        if not query.get("detail"):
            the_job.pop("tasks")
            the_job["steps"] = [st.summarise("batch", TASKS[:1]), st.summarise("0", TASKS[1:3])]
        return [the_job]

    def efficiency(self, job_id: str) -> dict[str, Any]:
        return {"id": job_id, "tasks_count": 3, "tasks": []}


def test_per_task_fields_ask_for_the_jobs_tasks(monkeypatch: pytest.MonkeyPatch) -> None:
    via = Recorder()
    monkeypatch.setattr(sacct_cli, "_client", lambda *_: via)
    monkeypatch.setattr(sacct_cli.time, "time", lambda: NOW)
    for fmt, detail in [("JobID,averss", True), ("JobID,MaxRSS", False)]:
        result = CliRunner().invoke(app, ["sacct", "-j", "7", "-P", "-n", "-o", fmt])
        assert result.exit_code == 0, result.output
        assert via.asked[-1]["detail"] is detail and via.asked[-1]["steps"] is not detail
        lines = result.stdout.splitlines()
        # (from the tasks, the average of step 0's peaks, and step 1, not sampled; from the
        # summaries, step 0's highest peak: the controller summarised no step 1 here)
        expected = ["7.0|2505", "7.1|"] if detail else ["7.0|5000"]
        assert lines == ["7|", "7.batch|2K", *expected]
