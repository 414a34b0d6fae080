"""The submitting shell's environment in a real job whose user is not root (the agent runs as
root and starts the task as that user): what a shell cannot export itself (bash's exported
functions, ``BASH_FUNC_module%%``), values with quotes, newlines and ``$``, a large value,
and the root shell's ``HOME`` and ``TMPDIR``, which the task must not get. Both ways the agent
starts such a task: with the environment in a file the shim sources (``setpriv``), and
through ``subprocess`` (a name a shell cannot export)."""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest
from tests.live.test_cli import PYTHON
from tests.live.test_cli_sbatch_options import submitted

from fusesched.cli.local import LocalCluster
from fusesched.sdk import Client

SCRIPT = """#!/bin/bash
#SBATCH -n 1
echo "home=$HOME"
echo "tmp=$TMPDIR"
echo "uid=$(id -u)"
printf 'quoted=%s|\\n' "$QUOTED"
echo "big=${#BIG}"
echo "model=$MODEL"
type module >/dev/null 2>&1 && module || echo "no module"
"""
QUOTED = 'it\'s "q" $HOME `id` \\ end\nsecond line'


@pytest.mark.parametrize("function", [False, True], ids=["setpriv-file", "subprocess"])
def test_a_users_job_inherits_what_the_shell_holds(
    cluster: LocalCluster, scratch: Path, function: bool
) -> None:
    (scratch / "job.sh").write_text(SCRIPT)
    env = {
        "FUSESCHED_CONTROLLER": cluster.url,
        "PATH": "/usr/bin:/bin",
        "USER": "nobody",
        "HOME": "/root",
        "TMPDIR": "/root/tmp",
        "MODEL": "llama",
        "QUOTED": QUOTED,
        "BIG": "x" * 100_000,
    }
    if function:
        env["BASH_FUNC_module%%"] = "() {  echo module ran\n}"
    done = subprocess.run(
        [*PYTHON, "sbatch", "--json", "job.sh"],
        capture_output=True,
        text=True,
        timeout=60,
        cwd=scratch,
        env=env,
    )
    job_id = submitted(done)
    client = Client(cluster.url)
    assert client.wait(job_id, timeout=30)["state"] == "Completed", client.logs(job_id)
    output = (scratch / f"slurm-{job_id}.out").read_text()
    assert "uid=0" not in output and "model=llama" in output, output  # (not root)
    assert "home=/root" not in output and "tmp=/root/tmp" not in output, output
    assert f"quoted={QUOTED}|" in output and "big=100000" in output, output
    assert ("module ran" if function else "no module") in output, output
