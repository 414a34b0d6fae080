"""A job step whose task ignores SIGTERM (``trap '' TERM``, as an interactive bash under
``srun --pty`` does), against a live controller and a real agent: the job is cancelled and
ends as soon as its batch script has exited, the step's task is SIGKILLed once the grace
time is over, and its end is then written (sacct shows the step ended, the task API
``exited``), not left running for ever (controller/late_exits.py)."""

from __future__ import annotations

from pathlib import Path

from fusesched.sdk import Client

from .conftest import local_cluster
from .test_sacct_stopped_live import rows, until

SCRIPT = "#!/bin/sh\n#SBATCH -n 1 -t 5 --mem=64M\nsrun sh -c \"trap '' TERM; sleep 100\"\n"


def test_a_step_task_ignoring_sigterm_ends_after_its_cancelled_job(tmp_path: Path) -> None:
    with local_cluster(tmp_path / "data", lambda a: a[:1]) as cluster:
        client = Client(cluster.url)
        (job,) = client.submit_files([{"name": "stubborn.sh", "text": SCRIPT}])["ids"]
        until("the step runs", lambda: f"{job}.0" in rows(cluster, job))
        (task,) = [t["task_id"] for t in client.show(job)["tasks"] if t["step_id"] == 0]
        client.cancel(job)
        until("the job ends", lambda: client.show(job)["phase"] == "cancelled")
        until("its step ends", lambda: "Unknown" not in str(rows(cluster, job)), timeout=30.0)
        shown = rows(cluster, job)
        status = client.task(task)
    assert shown[f"{job}.0"][:2] == ["CANCELLED", "0:9"], shown  # (SIGKILLed after the grace)
    assert status["state"] == "exited" and status["exit_code"] in (-9, 137), status
