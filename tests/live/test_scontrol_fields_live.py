"""``scontrol show job``'s ``WorkDir``, ``StdOut``/``StdErr``, ``Command`` and ``Dependency``
against a live controller, for jobs ``fusesched sbatch`` submitted: the ``StdOut`` shown is
the file the job wrote; an array member's is its own; a job waiting on a held one shows
``afterok:<id>(unfulfilled)``, then ``(failed)`` once that one is cancelled."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

import pytest

from fusesched.sdk import Client

from .conftest import local_cluster

TIMEOUT_S = 60


def _fields(text: str) -> dict[str, str]:
    """A one-record ``show job -o``'s keys and values (a value may hold spaces: Command's)."""
    out: dict[str, str] = {}
    key = ""
    for word in text.split(" "):
        name, eq, value = word.partition("=")
        if eq and name and " " not in name and (name[0].isupper() or name == "CPUs/Task"):
            key = name
            out[key] = value
        elif key:
            out[key] += " " + word
    return {k: v.strip() for k, v in out.items()}


def test_show_job_says_where_its_files_are(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    from fusesched.cli.scontrol import run

    folder = Path(tempfile.mkdtemp(prefix="fusesched-scontrol-fields-"))
    folder.chmod(0o1777)  # (the jobs run under an unprivileged uid)
    try:
        with local_cluster(tmp_path / "data", lambda agents: agents[:1]) as cluster:
            client = Client(cluster.url)
            env = {**os.environ, "FUSESCHED_CONTROLLER": cluster.url}

            def sbatch(*args: str) -> str:
                command = [sys.executable, "-m", "fusesched", "sbatch", "--parsable", "--mem=64M"]
                ran = subprocess.run(
                    [*command, *args],
                    capture_output=True,
                    text=True,
                    timeout=TIMEOUT_S,
                    env=env,
                    cwd=folder,
                    check=False,
                )
                assert ran.returncode == 0, ran.stderr
                return ran.stdout.strip()

            def show(job_id: str) -> dict[str, str]:
                assert run(["-o", "show", "job", job_id], cluster.url, None, None) == 0
                return _fields(capsys.readouterr().out.strip())

            done = sbatch("-W", "-J", "named", "-o", "o-%x-%j.txt", "--wrap", "echo hi there")
            shown = show(done)
            assert shown["WorkDir"] == str(folder) and shown["Command"] == "(null)"
            assert shown["StdOut"] == shown["StdErr"] == str(folder / f"o-named-{done}.txt")
            assert Path(shown["StdOut"]).read_text() == "hi there\n"  # (the file it wrote)
            assert shown["StdIn"] == "/dev/null" and shown["Dependency"] == "(null)"

            held = sbatch("--hold", "--wrap", "true")
            waiter = sbatch(f"--dependency=afterok:{held}", "-e", "err-%j", "--wrap", "true")
            shown = show(waiter)
            assert shown["JobState"] == "PENDING" and shown["Reason"] == "Dependency"
            assert shown["Dependency"] == f"afterok:{held}(unfulfilled)"
            assert shown["StdOut"] == str(folder / f"slurm-{waiter}.out")
            assert shown["StdErr"] == str(folder / f"err-{waiter}")
            client.cancel(held)
            ended = _until(lambda: client.show(waiter)["state"] != "Pending")
            assert ended, client.show(waiter)
            assert show(waiter)["Dependency"] == f"afterok:{held}(failed)"

            array = sbatch("--hold", "--array=1-2", "--wrap", "true")
            shown = show(f"{array}_2")
            assert (shown["JobId"], shown["ArrayJobId"], shown["ArrayTaskId"]) == (
                f"{array}_2",
                array,
                "2",
            )
            assert shown["StdOut"] == str(folder / f"slurm-{array}_2.out")
            # on a whole array, read with the others in one listing (GET /v1/jobs?id=…)
            after = sbatch(f"--dependency=afterok:{array},afterany:{held}", "--wrap", "true")
            assert show(after)["Dependency"] == f"afterok:{array}_*(unfulfilled)"
            assert run(["-o", "show", "job"], cluster.url, None, None) == 0
            listed = capsys.readouterr().out.splitlines()
            (line,) = [x for x in listed if x.startswith(f"JobId={after} ")]
            assert _fields(line)["Dependency"] == f"afterok:{array}_*(unfulfilled)"
            client.cancel(array)
            client.cancel(after)

            # a long command: whole in the job's own view, cut in a listing (squeue's)
            words = ["/bin/echo", *(f"/data/part-{k:05d}.parquet" for k in range(200))]
            group = {"name": "main", "resources": {"cpu": "1", "memory": "64Mi"}, "argv": words}
            long = client.submit({"groups": [group], "hold": True})
            assert client.show(long)["command"] == " ".join(words)
            (view,) = client.jobs(ids=[long])
            assert len(view["command"]) == 1024 and view["command"].endswith("...")
            client.cancel(long)
    finally:
        shutil.rmtree(folder, ignore_errors=True)


def _until(check: Callable[[], bool]) -> bool:
    deadline = time.monotonic() + TIMEOUT_S
    while time.monotonic() < deadline:
        if check():
            return True
        time.sleep(0.2)
    return False
