"""Called by Slurm's names, ``squeue --start``, ``sbatch --test-only`` and ``seff`` print
Slurm 22.05's lines (scripts parse them); ``fusesched jobs --start``, ``submit --test-only``
and ``eff`` keep fusesched's own. Against a real controller with an agent whose tasks only
pretend to run (one CPU: a second job waits for the first)."""

from __future__ import annotations

import re
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from tests.cli.conftest import pretend_cluster
from typer.testing import CliRunner

from fusesched.cli.main import app
from fusesched.sdk import Client

STAMP = r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d"


@pytest.fixture
def url(tmp_path: Path) -> Iterator[str]:
    with pretend_cluster(tmp_path) as found:
        yield found


def submit(client: Client, name: str, seconds: float, **extra: object) -> str:
    request = {
        "name": name,
        "walltime_s": 600,
        "groups": [
            {
                "resources": {"cpu": 1, "memory": "256Mi"},
                "argv": ["sleep", str(seconds)],
                "env": {"FUSESCHED_FAKE_DURATION": str(seconds)},
            }
        ],
        **extra,
    }
    [job_id] = client.submit(request)
    return str(job_id)


def running(client: Client, job_id: str) -> None:
    until = time.monotonic() + 20
    while client.show(job_id)["state"] != "Running":
        assert time.monotonic() < until, client.show(job_id)
        time.sleep(0.05)


def cli(url: str, *args: str) -> tuple[int, str, str]:
    result = CliRunner().invoke(app, [*args, "--controller", url])
    return result.exit_code, result.stdout, result.stderr


def test_squeue_start_prints_squeues_start_lines(url: str) -> None:
    client = Client(url)
    first = submit(client, "first", 60)
    running(client, first)
    waiting = submit(client, "waitingjob", 60)
    started = client.show(first)["start_time"]
    code, out, _ = cli(url, "squeue", "--start")
    assert code == 0, out
    header, *rows = out.splitlines()
    assert header.split() == [
        "JOBID",
        "PARTITION",
        "NAME",
        "USER",
        "ST",
        "START_TIME",
        "NODES",
        "SCHEDNODES",
        "NODELIST(REASON)",
    ]
    assert header.startswith(" " * 13 + "JOBID PARTITION")  # (%.18i: right-aligned)
    (row,) = rows  # (the running job is not listed, as Slurm's)
    fields = row.split()
    assert fields[:5] == [waiting, "default", "waitingj", fields[3], "PD"], row
    assert re.fullmatch(STAMP, fields[5]), row
    expected = time.strftime("%Y-%m-%dT%H:%M:%S", time.localtime(started + 600))
    assert abs(time.mktime(time.strptime(fields[5], "%Y-%m-%dT%H:%M:%S")) - (started + 600)) < 5
    assert fields[5][:13] == expected[:13]
    assert fields[6:8] == ["1", "n1"] and fields[8].startswith("("), row
    code, out, _ = cli(url, "squeue", "--start", "-h")
    assert (code, out.splitlines()) == (0, rows)
    code, out, _ = cli(url, "squeue", "--start", "-h", "-o", "%i|%S|%Y")
    assert code == 0 and out == f"{waiting}|{fields[5]}|n1\n", out
    code, out, _ = cli(url, "squeue", "--start", "-O", "JobID:6,StartTime:20,SchedNodes:5")
    assert code == 0 and out.splitlines()[1].split() == [waiting, fields[5], "n1"], out
    # without --start too, %S is a waiting job's expected start (and a running one's start)
    code, out, _ = cli(url, "squeue", "-h", "-o", "%i %S")
    shown = dict(line.split() for line in out.splitlines())
    assert code == 0 and shown[waiting] == fields[5], out
    assert shown[first] == time.strftime("%Y-%m-%dT%H:%M:%S", time.localtime(started)), out
    # fusesched's own command keeps its table, and refuses -o with --start
    code, out, _ = cli(url, "jobs", "--start")
    assert code == 0 and "expected start" in out and "START_TIME" not in out, out
    code, _, err = cli(url, "jobs", "--start", "-o", "%i")
    assert code == 2 and "leave out --start" in err


def test_sbatch_test_only_writes_slurms_line_on_stderr(url: str, tmp_path: Path) -> None:
    client = Client(url)
    first = submit(client, "first", 60)
    running(client, first)
    script = tmp_path / "job.sh"
    script.write_text("#!/bin/sh\n#SBATCH -c 1 --time=5\ntrue\n")
    code, out, err = cli(url, "sbatch", "--test-only", "-J", "s", str(script))
    assert (code, out) == (0, ""), err
    said = re.fullmatch(
        rf"sbatch: Job 0 to start at ({STAMP}) using 1 processors on nodes n1 "
        r"in partition default\n",
        err,
    )
    assert said, err
    assert [j["id"] for j in client.starts()["jobs"]] == []  # nothing was submitted
    # more than the cluster has: Slurm's refusal, exit 1
    code, out, err = cli(url, "sbatch", "--test-only", "-c", "64", str(script))
    assert code == 1 and out == "" and err.startswith("allocation failure: "), err
    # fusesched's own command keeps its words
    code, out, _ = cli(url, "submit", "--test-only", str(script))
    assert code == 0 and "would start at" in out and "Nothing was submitted." in out


def test_seff_prints_seffs_lines_and_eff_its_own(url: str) -> None:
    client = Client(url)
    done = submit(client, "quick", 0.05)
    assert client.wait(done, timeout=20)["state"] == "Completed"
    code, out, _ = cli(url, "seff", done)
    assert code == 0, out
    lines = out.splitlines()
    assert lines[:6] == [
        f"Job ID: {done}",
        "Cluster: fusesched",
        f"User/Group: {client.show(done)['user']}/default",
        "State: COMPLETED (exit code 0)",
        "Cores: 1",
        "CPU Utilized: 00:00:00",
    ], out
    assert re.fullmatch(r"CPU Efficiency: \d+\.\d\d% of \d\d:\d\d:\d\d core-walltime", lines[6])
    assert re.fullmatch(r"Job Wall-clock time: \d\d:\d\d:\d\d", lines[7])
    assert re.fullmatch(r"Memory Utilized: \d+\.\d\d [KMG]B", lines[8]), lines
    assert lines[9] == "Memory Efficiency: 0.00% of 256.00 MB (256.00 MB/node)" or re.fullmatch(
        r"Memory Efficiency: \d+\.\d\d% of 256\.00 MB \(256\.00 MB/node\)", lines[9]
    ), lines
    assert len(lines) == 10
    code, out, _ = cli(url, "eff", done)
    assert code == 0 and "Memory efficiency" in out and "Cluster:" not in out, out


def test_seff_of_a_running_and_a_pending_job(url: str) -> None:
    client = Client(url)
    first = submit(client, "first", 60)
    running(client, first)
    waiting = submit(client, "next", 60)
    code, out, _ = cli(url, "seff", first)
    assert code == 0 and "State: RUNNING\n" in out, out
    assert out.endswith("WARNING: Efficiency statistics may be misleading for RUNNING jobs.\n")
    code, out, _ = cli(url, "seff", waiting)
    assert code == 0, out
    assert out.splitlines()[-3:] == [
        "State: PENDING",
        "Cores: 1",
        "Efficiency not available for jobs in the PENDING state.",
    ], out
