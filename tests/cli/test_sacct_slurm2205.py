"""``fusesched sacct`` where it differed from Slurm 22.05's sacct, each checked against a real
22.05.8 here: ``--reason`` takes Slurm's reason codes only and ``-R`` is no option, ``-F``
takes whole flag names only, ``-C`` selects jobs by the features they asked for, an empty
``--delimiter`` runs the values together, ``-U`` is ``--usage``, and ``-B`` on an array
names its waiting members as one record (``13_[1-3,5]``)."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

import pytest
from tests.cli.test_sacct_options import JOBS, _job, _lines, _run

from fusesched.cli import sacct_format as sf
from fusesched.cli import sacct_reasons as sr
from fusesched.cli import sacct_select as sel

# ---------------------------------------------------------------------- --reason, -R


@pytest.mark.parametrize(
    "given",
    ["Dependency", "dependency", "PRIORITY", "None", "ReqNodeNotAvail", "DeadLine", "Prolog"],
)
def test_slurms_reason_codes_are_taken_in_any_case(given: str) -> None:
    assert sr.parse_reasons([given]) == {given.lower()}


@pytest.mark.parametrize("given", ["foo", "Dep", "Prio", "exit 3", "Dependency,foo"])
def test_other_reasons_are_refused_as_slurms_sacct_refuses_them(given: str) -> None:
    with pytest.raises(ValueError, match="unrecognized job reason value"):
        sr.parse_reasons([given])
    result = _run(["--reason", given, "-a"])
    assert result.exit_code == 2
    assert "unrecognized job reason value" in result.output
    assert not result.client.asked  # (refused before asking the controller)


def test_the_list_is_slurm_22_05s() -> None:
    assert len(sr.REASONS) == 196  # (every name its sacct took, none another version added)
    assert {"Priority", "Resources", "JobHeldAdmin", "QOSMaxJobsPerUserLimit"} <= sr.REASONS
    assert "WaitingForScheduling" not in sr.REASONS  # (a later Slurm's)


def test_reason_matches_by_code() -> None:
    waiting = [
        _job(
            "20",
            state="Pending",
            phase="queued",
            start_time=None,
            end_time=None,
            nodes=[],
            reason="ReqNodeNotAvail: n3 (drained), n4 (down)",
        ),
        _job(
            "21",
            state="Pending",
            phase="queued",
            start_time=None,
            end_time=None,
            nodes=[],
            reason="Priority: waits while 3 jobs go first",
        ),
    ]
    assert sr.reason_code(waiting[0]["reason"]) == "reqnodenotavail"
    assert _lines(["-X", "-o", "jobid", "--reason", "ReqNodeNotAvail"], jobs=waiting) == ["20"]
    assert _lines(["-X", "-o", "jobid", "--reason=priority,Dependency"], jobs=waiting) == ["21"]


def test_short_r_is_refused_saying_to_use_reason() -> None:
    for args in (["-R", "Dependency"], ["-RDependency"], ["-XR"]):
        result = _run([*args, "-a"])
        assert result.exit_code == 2, args
        assert "has no -R" in result.output and "--reason" in result.output, args
    result = _run(["--name", "-Rx", "-a"])  # (an option's value: a job's name)
    assert result.exit_code == 0, result.output
    assert result.client.asked[0]["names"] == ["-Rx"]


# ---------------------------------------------------------------------- -F


def test_flags_are_whole_names_in_any_case() -> None:
    assert sel.parse_flags(["schedmain,SCHEDSUBMIT", "SchedBackfill"]) == set(sel.FLAGS)
    for bad in ("schedm", "Sched", "SchedM"):
        with pytest.raises(ValueError, match="invalid job flag"):
            sel.parse_flags([bad])
        assert _run(["-F", bad, "-a"]).exit_code == 2


# ---------------------------------------------------------------------- -C


def test_constraints_keep_jobs_that_asked_for_every_one() -> None:
    asked = [
        _job("30", constraints="ib&gpu"),
        _job("31", constraints="IB"),
        _job("32"),  # (asked for none)
    ]
    assert sel.parse_constraints(["ib,GPU", "ib"]) == ("ib", "gpu")
    assert _lines(["-X", "-o", "jobid", "-C", "ib"], jobs=asked) == ["30", "31"]
    assert _lines(["-X", "-o", "jobid", "-C", "ib,gpu"], jobs=asked) == ["30"]
    assert _lines(["-X", "-o", "jobid", "-C", "gpu", "-C", "ib"], jobs=asked) == ["30"]
    assert _lines(["-X", "-o", "jobid,constraints", "-j", "30"], jobs=asked) == ["30|ib&gpu"]


def test_constraints_without_them_served_keep_none_and_say_why() -> None:
    result = _run(["-X", "-o", "jobid", "-C", "ib", "-a", "-S", "now-1day", "-n", "-P"])
    assert result.exit_code == 0, result.output
    assert result.stdout == ""
    assert "serves no job's constraints" in result.stderr
    assert _run(["-C", ",", "-a"]).exit_code == 2  # (an empty item, as every list here)


# ---------------------------------------------------------------------- --delimiter


def test_an_empty_delimiter_runs_the_values_together() -> None:
    args = ["-X", "-j", "10", "-o", "jobid,state"]
    assert _lines([*args, "--delimiter="]) == ["10COMPLETED"]
    result = _run([*args, "-p", "--delimiter", ""])
    assert result.stdout.splitlines() == ["JobIDState", "10COMPLETED"]
    named = [_job("10", name="a,b|c")]
    rows = sf.parsable(sf.parse_format("jobname"), [["a,b|c"]], header=False, delimiter="")
    assert rows == ["a,b|c"]  # (nothing to stand in for: as it is)
    assert _lines(["-X", "-j", "10", "-o", "jobname", "--delimiter="], jobs=named) == ["a,b|c"]


# ---------------------------------------------------------------------- -U, -B on arrays


def test_capital_u_is_usage() -> None:
    result = _run(["-U"])
    assert result.exit_code == 0
    assert result.stdout == "Usage: sacct [options]\n\tUse --help for help\n"


def test_batch_script_of_an_array_names_its_waiting_members_as_one() -> None:
    """Slurm keeps an array's members that have not started as one record, named
    ``13_[1-3,5]`` (its id string), and a started one as its own (``13_1``)."""
    rule = "-" * 80
    result = _run(["-j", "13", "-B"])
    assert result.exit_code == 0, result.output
    assert result.stdout == f"Batch Script for 13_[1-3,5]\n{rule}\nNONE\n\n"
    started = [_job("13_1", array_parent="13", seq=13), *(j for j in JOBS if j["id"] > "13_1")]
    result = _run(["-j", "13", "-B"], jobs=started)
    titles = [line for line in result.stdout.splitlines() if line.startswith("Batch")]
    assert titles == ["Batch Script for 13_[2-3,5]", "Batch Script for 13_1"]


# ---------------------------------------------------------------------- against real Slurm

REAL_SACCT = Path("/usr/bin/sacct")


def _real(tmp_path: Path, *args: str) -> str:
    """What Slurm's own sacct says to ``args`` (a configuration with no accounting: it
    checks its options, then says accounting is disabled; its job completion data, for
    ``-c``, an empty file)."""
    conf = tmp_path / "slurm.conf"
    if not conf.exists():  # (never JobCompLoc=/dev/null: as root, sacct chmods it 0644)
        conf.write_text(
            "ClusterName=check\nSlurmctldHost=localhost\n"
            f"JobCompType=jobcomp/filetxt\nJobCompLoc={tmp_path / 'jobcomp.log'}\n"
        )
    env = {**os.environ, "SLURM_CONF": str(conf)}
    done = subprocess.run(
        [str(REAL_SACCT), *args], capture_output=True, text=True, env=env, timeout=30
    )
    return done.stdout + done.stderr


def _real_is_22_05() -> bool:
    if not REAL_SACCT.is_file():
        return False
    done = subprocess.run([str(REAL_SACCT), "-V"], capture_output=True, text=True, timeout=30)
    return " 22.05." in done.stdout


@pytest.mark.skipif(not _real_is_22_05(), reason="no Slurm 22.05 sacct here")
def test_real_slurm_22_05_takes_these_and_refuses_those(tmp_path: Path) -> None:
    for name in sorted(sr.REASONS):
        assert "unrecognized job reason" not in _real(tmp_path, f"--reason={name}"), name
    for bad in ("foo", "Dep", "WaitingForScheduling"):
        assert "unrecognized job reason" in _real(tmp_path, f"--reason={bad}"), bad
    assert "invalid option -- 'R'" in _real(tmp_path, "-R", "Dependency")
    assert "Invalid job flag" in _real(tmp_path, "-F", "schedm")
    assert "Invalid job flag" not in _real(tmp_path, "-F", "SCHEDMAIN,schedsubmit")
    assert _real(tmp_path, "-c", "-U") == "Usage: sacct [options]\n\tUse --help for help\n"


@pytest.mark.skipif(not _real_is_22_05(), reason="no Slurm 22.05 sacct here")
def test_real_slurm_22_05_runs_values_together_with_an_empty_delimiter(tmp_path: Path) -> None:
    record = tmp_path / "jobcomp.txt"
    record.write_text(
        "JobId=10 UserId=root(0) GroupId=root(0) Name=job10 JobState=COMPLETED "
        "Partition=cpu TimeLimit=60 StartTime=2026-12-08T01:26:48 "
        "EndTime=2026-12-08T01:26:50 NodeList=n1 NodeCnt=1 ProcCnt=1 WorkDir=/tmp "
        "SubmitTime=2026-12-08T01:26:46 EligibleTime=2026-12-08T01:26:46 ExitCode=0:0\n"
    )
    conf = tmp_path / "slurm.conf"
    conf.write_text(
        f"ClusterName=check\nSlurmctldHost=localhost\nJobCompType=jobcomp/filetxt\n"
        f"JobCompLoc={record}\n"
    )
    args = ["-c", "-a", "-n", "-o", "jobid,state", "--delimiter="]
    for form in ("-P", "-p"):
        real = _real(tmp_path, *args, form)
        ours = _run(["-X", "-j", "10", "-n", "-o", "jobid,state", "--delimiter=", form])
        assert real == ours.stdout == "10COMPLETED\n", form
