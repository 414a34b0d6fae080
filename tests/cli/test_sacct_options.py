"""``fusesched sacct``'s options of Slurm 22.05's sacct besides its first ones: the field lists
(-b, -l, -c, ALL, a field's start), the selecting options (-N, -q, -g, -i, -I, -k, -K,
--reason, -C, -W, -x, -F), -T, --units/--noconvert, --delimiter, --array, -B/--env-vars,
--yaml, -v, -V, --usage/-U, --whole-hetjob and the options taken that change nothing; and
Snakemake's calls."""

from __future__ import annotations

import grp
import json
import os
import pwd
import time
from dataclasses import dataclass
from typing import Any

import pytest
import typer
import yaml
from typer.testing import CliRunner

from fusesched.cli import sacct as sacct_cli
from fusesched.cli import sacct_format as sf
from fusesched.cli import sacct_select as sel
from fusesched.cli.sacct_usage import Units, convert, parse_units

NOW = time.time()
ME = pwd.getpwuid(os.getuid()).pw_name


def _job(job_id: str, **extra: Any) -> dict[str, Any]:
    view: dict[str, Any] = {
        "id": job_id,
        "name": f"job{job_id}",
        "user": ME,
        "tenant": "default",
        "queue": "cpu",
        "state": "Completed",
        "phase": "completed",
        "exit_code": 0,
        "reason": "",
        "cpus": 2.0,
        "nodes": ["n1"],
        "submit_time": NOW - 600,
        "start_time": NOW - 500,
        "end_time": NOW - 100,
        "time_limit_s": 3600.0,
        "qos": "normal",
        "batch": True,
        "steps": [],
        "seq": int(job_id.split("_")[0]),
    }
    view.update(extra)
    return view


class FakeClient:
    """The jobs it answers (newest first) and the queries it was asked."""

    token = None

    def __init__(self, jobs: list[dict[str, Any]]) -> None:
        self.answer = sorted(jobs, key=lambda j: -j["seq"])
        self.asked: list[dict[str, Any]] = []

    def jobs(self, **query: Any) -> list[dict[str, Any]]:
        self.asked.append(query)
        return [dict(j) for j in self.answer if not query.get("ids") or _named(j, query["ids"])]

    def efficiency(self, job_id: str) -> dict[str, Any]:
        return {"memory_bytes": 2 * 2**30, "tasks_count": 1, "max_rss_bytes": 1536000}


def _named(job: dict[str, Any], ids: list[str]) -> bool:
    return job["id"] in ids or str(job["id"]).split("_")[0] in ids


JOBS = [
    _job("10", nodes=["n1", "n2"], cpus=4.0, qos="high", time_limit_s=7200.0),
    _job("11", user="root", phase="failed", state="Failed", exit_code=3, reason="exit 3"),
    _job(
        "12",
        state="Pending",
        phase="queued",
        start_time=None,
        end_time=None,
        nodes=[],
        reason="Dependency: job 11",
        time_limit_s=None,
    ),
    *(
        _job(
            f"13_{i}",
            array_parent="13",
            state="Pending",
            phase="queued",
            start_time=None,
            end_time=None,
            nodes=[],
            reason="Priority",
            seq=13,
        )
        for i in (1, 2, 3, 5)
    ),
]


@dataclass
class Ran:
    """A run of the command: its exit code, outputs, and the client it asked."""

    exit_code: int
    stdout: str
    stderr: str
    output: str
    client: FakeClient


def _run(args: list[str], jobs: list[dict[str, Any]] | None = None, **env: str) -> Ran:
    client = FakeClient(JOBS if jobs is None else jobs)
    app = typer.Typer()
    sacct_cli.register(app)
    app.command("other")(lambda: None)  # (two commands: `sacct` is named)
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(sacct_cli, "_client", lambda *_a, **_k: client)
        result = CliRunner().invoke(app, ["sacct", *args], env={"SACCT_FORMAT": "", **env})
    return Ran(result.exit_code, result.stdout, result.stderr, result.output, client)


def _lines(args: list[str], **kw: Any) -> list[str]:
    result = _run([*args, "-a", "-S", "now-1day", "-n", "-P"], **kw)
    assert result.exit_code == 0, result.output
    return result.stdout.splitlines()


# ---------------------------------------------------------------------- field lists


def test_brief_long_and_completion_field_lists() -> None:
    assert sel.field_list([], brief=True) == "jobid,state,exitcode"
    assert sel.field_list(["JobName"], brief=True) == "JobName,jobid,state,exitcode"
    assert sel.field_list([], long=True).startswith("jobid,jobidraw,jobname,partition,maxvmsize")
    assert sel.field_list([], completion=True) == sel.COMPLETION_FIELDS
    assert sel.field_list([], environ="jobid,user") == "jobid,user"
    assert sel.field_list(["a", "b"]) == "a,b"
    with pytest.raises(ValueError, match="mutually exclusive"):
        sel.field_list(["jobid"], long=True)
    headers = [c.field.header for c in sf.parse_format(sel.LONG_FIELDS)]
    assert headers[:3] == ["JobID", "JobIDRaw", "JobName"]
    assert "TRESUsageInMaxNode" in headers and "TRESUsageOutMaxTask" in headers


def test_a_field_by_its_start_and_all() -> None:
    shown = [c.field.header for c in sf.parse_format("jobn,st,tresusageinmint,nodel")]
    assert shown == ["JobName", "Start", "TRESUsageInMinTask", "NodeList"]
    assert len(sf.parse_format("ALL%8")) == len(sf.parse_format("a"))
    assert {c.width for c in sf.parse_format("all%8")} == {8}


def test_brief_and_long_on_the_command_line() -> None:
    assert _lines(["-X", "-b", "-j", "10"]) == ["10|COMPLETED|0:0"]
    result = _run(["-X", "-l", "-j", "10", "-P"])
    assert result.stdout.splitlines()[0].startswith("JobID|JobIDRaw|JobName|Partition|MaxVMSize")
    assert _run(["-l", "-o", "jobid", "-j", "10"]).exit_code == 2
    # -o given twice adds up, as Slurm's; SACCT_FORMAT only without -o/-b/-l
    assert _lines(["-X", "-o", "jobid", "--fields", "state", "-j", "10"]) == ["10|COMPLETED"]
    assert _lines(["-X", "-j", "10"], SACCT_FORMAT="jobid,qos") == ["10|high"]


# ---------------------------------------------------------------------- states


@pytest.mark.parametrize(
    "code", ["CA", "CD", "F", "NF", "OOM", "PD", "PR", "R", "RQ", "RS", "RV", "S", "TO", "BF", "DL"]
)
def test_every_state_code_of_slurm_is_taken(code: str) -> None:
    sf.parse_states([code.lower()])  # (no ValueError)
    assert _run(["-s", code, "-a", "-n"]).exit_code == 0


# ---------------------------------------------------------------------- selecting


def test_ranges_and_time_limits() -> None:
    assert sel.parse_range("2", "node") == sel.Range(2)
    assert sel.parse_range("2-4", "node") == sel.Range(2, 4)
    assert sel.parse_range("1k", "cpu") == sel.Range(1024)
    for bad in ("x", "4-2", "2-", "-3"):
        with pytest.raises(ValueError, match="range"):
            sel.parse_range(bad, "node")
    assert sel.parse_timelimit("60") == 60
    assert sel.parse_timelimit("2:00:00") == 120
    assert sel.parse_timelimit("1-0") == 1440
    assert sel.parse_timelimit("0:30") == 1  # (a part of a minute: rounded up)
    assert sel.parse_timelimit("UNLIMITED") == sel.UNLIMITED
    for bad in ("0", "soon"):
        with pytest.raises(ValueError, match="time limit"):
            sel.parse_timelimit(bad)


def test_selecting_options_on_the_command_line() -> None:
    def ids(*args: str) -> list[str]:
        return [line.split("|")[0] for line in _lines(["-X", "-o", "jobid", *args])]

    assert ids("-N", "n[2-3]") == ["10"]
    assert ids("-q", "HIGH") == ["10"]
    assert ids("-i", "2") == ["10"]
    assert ids("-i", "1-2") == ["10", "11"]
    assert ids("-I", "4") == ["10"]
    assert ids("-k", "60") == ["11", "13_[1-3,5]"]
    assert ids("-k", "60", "-K", "2:00:00") == ["10", "11", "13_[1-3,5]"]
    assert ids("-K", "60") == ids()  # (alone: no restriction, as Slurm's)
    assert ids("-k", "UNLIMITED") == ["12"]
    assert ids("--reason", "dependency") == ["12"]
    for none in (["-W", "w"], ["-x", "7"], ["-F", "SchedMain"], ["-F", "schedbackfill"]):
        assert ids(*none) == []
    mine = grp.getgrgid(pwd.getpwnam(ME).pw_gid)
    assert "10" in ids("-g", mine.gr_name) and "10" in ids("-g", str(mine.gr_gid))
    assert _run(["-F", "bogus"]).exit_code == 2
    assert _run(["-g", "no-such-group-here"]).exit_code == 2


def test_nodelist_and_uid_minus_one_ask_for_everyones_jobs() -> None:
    for args in (["-N", "n1"], ["-u", "-1"]):
        result = _run(["-X", *args])
        assert result.exit_code == 0, result.output
        assert result.client.asked[0]["user"] is None and not result.client.asked[0]["me"]
    result = _run(["-X", "-u", str(os.getuid())])
    assert result.client.asked[0]["user"] == [ME]


def test_truncate_cuts_rows_to_the_window() -> None:
    view = {"start_time": 100.0, "end_time": None}
    assert sel.truncate(view, 150.0, 300.0) == {"start_time": 150.0, "end_time": 300.0}
    assert sel.truncate({"start_time": 100.0, "end_time": 200.0}, 50.0, 150.0)["end_time"] == 150
    assert sel.truncate({"start_time": None}, 0.0, 1.0) == {"start_time": None}
    start = time.strftime("%Y-%m-%dT%H:%M", time.localtime(NOW - 300))
    args = ["-X", "-j", "10", "-o", "start,elapsedraw", "-S", start, "-n", "-P"]
    plain = _run(args).stdout.split("|")
    cut = _run([*args, "-T"]).stdout.split("|")
    assert int(plain[1]) == 400
    assert cut[0] == f"{start}:00" and 200 <= int(cut[1]) < 300


# ---------------------------------------------------------------------- outputs


def test_units_and_noconvert() -> None:
    assert parse_units("m") == 2 and parse_units("Gb") == 3
    with pytest.raises(ValueError, match="unit"):
        parse_units("X")
    assert convert(1536000, 0, Units(spec=2)) == "1.46M"
    assert convert(2048, 2, Units(spec=3)) == "2G"
    assert convert(2048, 2, Units(noconvert=True)) == "2048M"
    assert convert(2048, 2, Units(spec=1, noconvert=True)) == "2097152K"  # (--units wins)
    assert convert(12345, 0, Units(spec=1), kilo=1000) == "12.35K"
    assert convert(0, 0, Units(spec=3)) == "0"
    fields = ["-X", "-j", "10", "-o", "reqmem,maxrss"]
    run = [_job("10", batch=False)]  # (its own tasks are its work: MaxRSS on its row)
    assert _lines(fields, jobs=run) == ["2G|1500K"]  # (sacct's own: exact)
    assert _lines([*fields, "--units=M"], jobs=run) == ["2048M|1.46M"]
    assert _lines([*fields, "--noconvert"], jobs=run) == ["2048M|1536000"]
    assert _lines([*fields, "--units=K"], jobs=run) == ["2097152K|1500K"]
    assert _run(["--units", "Q"]).exit_code == 2


def test_delimiter() -> None:
    assert _lines(["-X", "-j", "10", "-o", "jobid,state", "--delimiter", ";;"]) == ["10;;COMPLETED"]
    rows = sf.parsable(sf.parse_format("jobname"), [["a,b"]], header=False, delimiter=",")
    assert rows == ["a?b"]
    result = _run(["-X", "-j", "10", "-o", "jobid,state", "-n", "--delimiter", ","])
    assert result.stdout.split() == ["10", "COMPLETED"]  # (without -p/-P: the table)


def test_waiting_array_members_are_one_row_unless_array() -> None:
    combined = _lines(["-X", "-j", "13", "-o", "jobid,jobidraw,state"])
    assert combined == ["13_[1-3,5]|13|PENDING"]
    each = _lines(["-X", "-j", "13", "-o", "jobid,jobidraw", "--array"])
    assert each == ["13_1|13_1", "13_2|13_2", "13_3|13_3", "13_5|13_5"]
    named = _lines(["-X", "-j", "13_2,13", "-o", "jobid"])
    assert named == ["13_[1-5:2]", "13_2"]  # (as squeue writes a stepped range)


def test_batch_script_and_env_vars() -> None:
    result = _run(["-j", "10,11", "-B"])
    assert result.exit_code == 0, result.output
    rule = "-" * 80
    assert (
        result.stdout
        == f"Batch Script for 10\n{rule}\nNONE\n\nBatch Script for 11\n{rule}\nNONE\n\n"
    )
    assert "serves no job's batch script" in result.stderr
    result = _run(["-j", "10", "--env-vars"])
    assert result.stdout.startswith("Environment used for 10 (must be batch to display)\n")
    for bad in (["-B"], ["--env-vars"], ["-j", "10", "-B", "--env-vars"]):
        assert _run(bad).exit_code == 2


def test_yaml_is_json_s_rows() -> None:
    args = ["-j", "10", "-o", "jobid,state", "-a"]
    as_json = json.loads(_run([*args, "--json"]).stdout)
    assert yaml.safe_load(_run([*args, "--yaml"]).stdout) == as_json
    assert _run([*args, "--yaml", "-P"]).exit_code == 2
    assert _run([*args, "--yaml", "--json"]).exit_code == 2


def test_completion_shows_ended_jobs_with_its_fields(tmp_path: Any) -> None:
    result = _run(["-c", "-a", "-S", "now-1day", "-P"])
    lines = result.stdout.splitlines()
    assert lines[0] == "JobID|UID|JobName|Partition|NNodes|NodeList|State|End"
    assert [line.split("|")[0] for line in lines[1:]] == ["10", "11"]  # (no steps, none waiting)
    log = tmp_path / "jobcomp.log"
    log.write_text("")
    result = _run(["-f", str(log), "-a", "-n", "-S", "now-1day", "-b", "-P"])
    assert result.exit_code == 0 and result.stdout.splitlines()[0].startswith("10|")
    assert "is not read" in result.stderr
    result = _run(["-f", str(tmp_path / "none"), "-a"])
    assert result.exit_code == 1 and "is not a valid file" in result.output


def test_verbose_says_the_window() -> None:
    line = sel.window_line({"COMPLETED"}, None, 0.0)
    assert line.startswith("sacct: Jobs COMPLETED in the time window from Epoch 0 to ")
    assert "at the time instant" in sel.window_line(None, 5.0, 5.0)
    result = _run(["-v", "-X", "-j", "10"])
    assert "sacct: Jobs Eligible in the time window from Epoch 0 to" in result.stderr


def test_usage_version_and_options_taken() -> None:
    result = _run(["--usage"])
    assert result.stdout == "Usage: sacct [options]\n\tUse --help for help\n"
    result = _run(["-V"])
    assert result.exit_code == 0 and result.stdout.startswith("slurm ")
    taken = [["-D"], ["-L"], ["--local"], ["--federation"], ["--use-local-uid"], ["-t"]]
    taken += [["--whole-hetjob"], ["--whole-hetjob=no"], ["--whole-hetjob=Y"], ["-M", "all"]]
    taken += [["--cluster", "fusesched"], ["--uid", ME], ["--help-fields"]]
    plain = _run(["-X", "-j", "10"]).stdout
    for args in taken:
        result = _run(["-X", "-j", "10", *args])
        assert result.exit_code == 0, (args, result.output)
        if args != ["--help-fields"]:
            assert result.stdout == plain, args
    assert _run(["--whole-hetjob=maybe"]).exit_code == 2
    assert _run(["--cluster", "other"]).exit_code == 2


# ---------------------------------------------------------------------- Snakemake's calls


def test_snakemake_calls() -> None:
    named = [_job("30", name="7f3c-uuid"), _job("31", name="other")]
    result = _run(
        [
            "-X",
            "--parsable2",
            "--clusters",
            "all",
            "--noheader",
            "--format=JobIdRaw,State",
            "--starttime",
            "2026-01-01T22:00",
            "--endtime",
            "now",
            "--name",
            "7f3c-uuid",
        ],
        jobs=named,
    )
    assert result.exit_code == 0, result.output
    assert result.client.asked[0]["names"] == ["7f3c-uuid"]
    result = _run(["--name=7f3c-uuid", "--parsable2", "--noheader"], jobs=named)
    assert result.exit_code == 0, result.output
    assert result.client.asked[0]["names"] == ["7f3c-uuid"]
    result = _run(["-j", "30", "-n", "-X", "-o", "nodelist%-256"], jobs=named)
    assert result.exit_code == 0 and result.stdout == "n1\n"
