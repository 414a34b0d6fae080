"""``#SBATCH --get-user-env=L`` (batchspawner's and pysqa's job templates) through the sbatch
command: submitted without a word on stderr, as Slurm's sbatch takes it."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

from tests.cli.conftest import FULL_COMMAND, Script

TEMPLATE = """#!/bin/bash
#SBATCH --output=spawner.log
#SBATCH --job-name=spawner-jupyterhub
#SBATCH --chdir={home}
#SBATCH --export=ALL
#SBATCH --get-user-env=L
#SBATCH --get-user-env
set -euo pipefail
echo started
"""


def test_a_spawners_template_is_submitted_without_warnings(
    server: tuple[str, Script], tmp_path: Path
) -> None:
    url, script = server
    script.body = b'{"id": "7", "ids": ["7"], "warnings": []}'
    (tmp_path / "job.sh").write_text(TEMPLATE.format(home=tmp_path))
    # (an argument to the script: the full command, which reads the script here)
    done = subprocess.run(
        [*FULL_COMMAND, "sbatch", "job.sh", "arg"],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=60,
        env={**os.environ, "FUSESCHED_CONTROLLER": url},
        check=False,
    )
    assert (done.returncode, done.stdout, done.stderr) == (0, "Submitted batch job 7\n", "")
    (request,) = script.received
    assert request["body"]["name"] == "spawner-jupyterhub"
