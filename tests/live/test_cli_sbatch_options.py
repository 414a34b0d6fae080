"""sbatch options beyond the script's directives (``--wrap``), as a user types them: the Python
command, the native front (which hands ``--wrap`` over to Python) and the full command table,
against a live cluster of real agents."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path
from typing import Any

import pytest
from tests.live.test_cli import PYTHON
from typer.testing import CliRunner

from fusesched.cli.local import LocalCluster
from fusesched.cli.main import app
from fusesched.sdk import Client


@pytest.fixture(params=["python", "native"])
def command(request: pytest.FixtureRequest) -> list[str]:
    """The Python ``fusesched`` command and the native front (as in tests/live/test_cli.py)."""
    if request.param == "python":
        return PYTHON
    return [str(request.getfixturevalue("native_front"))]


def run_in(
    cwd: Path, cluster: LocalCluster, cmd: list[str], *args: str
) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [*cmd, *args],
        capture_output=True,
        text=True,
        timeout=60,
        cwd=cwd,
        env={"FUSESCHED_CONTROLLER": cluster.url, "PATH": "/usr/bin:/bin", "COLUMNS": "200"},
    )


def submitted(result: subprocess.CompletedProcess[str]) -> str:
    assert result.returncode == 0, result.stderr
    answer: Any = json.loads(result.stdout)
    return str(answer["id"])


def test_wrap_runs_the_command(cluster: LocalCluster, tmp_path: Path, command: list[str]) -> None:
    # a file named like an option's value must not be taken for the script
    (tmp_path / "wrapped").write_text("#!/bin/sh\necho not this\n")
    job_id = submitted(
        run_in(
            tmp_path,
            cluster,
            command,
            "sbatch",
            "--wrap",
            "echo wrapped $((20 + 22)) as $0",
            "--mem=64M",
            "-J",
            "wrapped",
            "--json",
        )
    )
    client = Client(cluster.url)
    shown = client.wait(job_id, timeout=30)
    assert shown["state"] == "Completed"
    assert shown["name"] == "wrapped"
    assert "wrapped 42 as" in client.logs(job_id)
    assert "not this" not in client.logs(job_id)

    other = submitted(run_in(tmp_path, cluster, command, "sbatch", "--wrap=echo plain", "--json"))
    assert client.wait(other, timeout=30)["name"] == "wrap"  # sbatch's name for such a job
    assert "plain" in client.logs(other)


def test_wrap_with_a_script_is_refused(
    cluster: LocalCluster, tmp_path: Path, command: list[str]
) -> None:
    (tmp_path / "job.sh").write_text("#!/bin/sh\necho script\n")
    result = run_in(tmp_path, cluster, command, "sbatch", "--wrap=echo hi", "job.sh")
    assert result.returncode == 2
    assert "give a batch script or --wrap, not both" in result.stderr
    empty = run_in(tmp_path, cluster, command, "sbatch", "--wrap=")
    assert empty.returncode == 2 and "--wrap needs a command line" in empty.stderr
    missing = run_in(tmp_path, cluster, command, "sbatch", "--exclusive")
    assert missing.returncode == 2 and '--wrap="COMMAND"' in missing.stderr
    assert Client(cluster.url).jobs() == []


@pytest.mark.parametrize("refused", [False, True])
def test_wrap_through_the_full_command_table(
    cluster: LocalCluster, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, refused: bool
) -> None:
    """The ``sbatch`` command of the full table parses on the client side (same rules)."""
    monkeypatch.chdir(tmp_path)
    (tmp_path / "job.sh").write_text("#!/bin/sh\necho script\n")
    args = ["sbatch", "--controller", cluster.url, "--json", "--wrap", "echo full table"]
    result = CliRunner().invoke(app, [*args, "job.sh"] if refused else args)
    if refused:
        assert result.exit_code == 2
        assert "not both" in result.output
        return
    assert result.exit_code == 0, result.output
    job_id = json.loads(result.stdout)["id"]
    client = Client(cluster.url)
    assert client.wait(job_id, timeout=30)["state"] == "Completed"
    assert "full table" in client.logs(job_id)


def test_nodelist_and_begin_on_real_agents(cluster: LocalCluster, tmp_path: Path) -> None:
    """``-w`` puts the job on the listed node, ``--begin`` holds it back until then."""
    client = Client(cluster.url)
    args = ["sbatch", "-w", "node-[b-b]", "--wrap=echo ran", "--json"]
    refused = run_in(tmp_path, cluster, PYTHON, *args)
    assert refused.returncode == 2 and "cannot read [b-b]" in refused.stderr
    job_id = submitted(
        run_in(
            tmp_path,
            cluster,
            PYTHON,
            "sbatch",
            "-w",
            "node-b",
            "-x",
            "node-a",
            "--begin=now+3",
            "--wrap=echo ran",
            "--json",
        )
    )
    shown = client.show(job_id)
    assert shown["state"] == "Pending" and shown["reason"].startswith("begin time ")
    assert "reason: begin time " in run_in(tmp_path, cluster, PYTHON, "show", job_id).stdout
    shown = client.wait(job_id, timeout=30)
    assert shown["state"] == "Completed" and shown["nodes"] == ["node-b"]
    assert shown["start_time"] - shown["submit_time"] >= 2.5


#: Prints how many arguments the script got, then each in brackets.
ECHO_ARGS = '#!/bin/bash\nprintf "[%s]" "$#" "$@"; echo\n'


def _sbatch_from(
    cwd: Path, cluster: LocalCluster, cmd: list[str], stdin: Any, *args: str
) -> subprocess.CompletedProcess[str]:
    env = {"FUSESCHED_CONTROLLER": cluster.url, "PATH": "/usr/bin:/bin"}
    return subprocess.run(
        [*cmd, "sbatch", *args],
        capture_output=True,
        text=True,
        timeout=60,
        cwd=cwd,
        env=env,
        stdin=stdin,
    )


def test_the_script_its_arguments_and_standard_input(
    cluster: LocalCluster, scratch: Path, command: list[str]
) -> None:
    """As Slurm's sbatch: an option's value is never the script (``-o out.txt job.sh`` once
    out.txt exists), the words after the script are its ``$1 $2 …`` exactly (arrays and
    heterogeneous jobs too), and with no script named it is read from standard input (the
    job named "sbatch"), or from ``/dev/stdin`` on a pipe (Snakemake's way)."""
    client = Client(cluster.url)
    (scratch / "job.sh").write_text(ECHO_ARGS)
    (scratch / "out.txt").write_text("an earlier run's output\n")
    (scratch / "out.txt").chmod(0o666)  # (the job's unprivileged uid writes it again)
    words = ["in put.csv", "", "q\"u'ote", "日本 🚀", "-o", "--parsable", "$HOME"]
    job_id = submitted(
        run_in(scratch, cluster, command, "sbatch", "--json", "-o", "out.txt", "job.sh", *words)
    )
    assert client.wait(job_id, timeout=30)["state"] == "Completed"
    expected = "[7][in put.csv][][q\"u'ote][日本 🚀][-o][--parsable][$HOME]\n"
    assert (scratch / "out.txt").read_text() == expected

    array = submitted(
        run_in(scratch, cluster, command, "sbatch", "--json", "-a", "0-1", "-o", "a-%a.txt",
               "job.sh", "x y", "")
    )  # fmt: skip
    het = submitted(
        run_in(scratch, cluster, command, "sbatch", "--json", "-o", "het.txt", "-n1", ":", "-n1",
               "job.sh", "z")
    )  # fmt: skip
    for member in (f"{array}_0", f"{array}_1", het):
        assert client.wait(member, timeout=30)["state"] == "Completed", member
    assert [(scratch / f"a-{i}.txt").read_text() for i in (0, 1)] == ["[2][x y][]\n"] * 2
    assert (scratch / "het.txt").read_text() == "[1][z]\n"

    with (scratch / "job.sh").open() as script:  # sbatch -o piped.txt < job.sh
        piped = _sbatch_from(scratch, cluster, command, script, "--json", "-o", "piped.txt")
    with (scratch / "job.sh").open() as script:  # cat job.sh | sbatch … /dev/stdin
        cat = subprocess.Popen(["cat"], stdin=script, stdout=subprocess.PIPE)
        named = _sbatch_from(
            scratch, cluster, command, cat.stdout, "--json", "-o", "named.txt", "/dev/stdin"
        )
        cat.wait()
    for done, name, output in ((piped, "sbatch", "piped.txt"), (named, "stdin", "named.txt")):
        shown = client.wait(submitted(done), timeout=30)
        assert (shown["state"], shown["name"]) == ("Completed", name)
        assert (scratch / output).read_text() == "[0]\n"

    alone = _sbatch_from(scratch, cluster, command, subprocess.DEVNULL, "-N", "1")
    assert alone.returncode == 2 and "no batch script given" in alone.stderr
