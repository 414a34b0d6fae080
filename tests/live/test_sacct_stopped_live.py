"""``fusesched sacct`` of batch jobs the controller ended, against a live controller and a real
agent, as Slurm's sacct shows them: while their ``srun`` runs, the job, its ``.batch`` and its
step ``RUNNING`` with no End; then a timed-out job ``TIMEOUT 0:0`` and a cancelled one
``CANCELLED 0:0``, the signal on their ``.batch`` and step rows, both ``CANCELLED``."""

from __future__ import annotations

import time
from collections.abc import Callable
from pathlib import Path

from fusesched.cli.local import LocalCluster
from fusesched.sdk import Client

from .conftest import local_cluster
from .test_cli import fusesched

SCRIPT = "#!/bin/sh\n#SBATCH -n 1 -t 5 --mem=64M\nsrun sleep 60\n"
STOPPED = ("0:15", "0:9")  # (SIGTERM, or SIGKILL once the grace time is over)


def rows(cluster: LocalCluster, *jobs: str) -> dict[str, list[str]]:
    fields = "JobID,State,ExitCode,End"
    result = fusesched(cluster, "sacct", "-P", "-n", "-j", ",".join(jobs), "-o", fields)
    assert result.returncode == 0, result.stderr
    return {line.split("|")[0]: line.split("|")[1:] for line in result.stdout.splitlines()}


def until(what: str, check: Callable[[], bool], timeout: float = 60.0) -> None:
    deadline = time.monotonic() + timeout
    while not check():
        assert time.monotonic() < deadline, what
        time.sleep(0.3)


def test_a_timed_out_and_a_cancelled_batch_job_and_their_steps(tmp_path: Path) -> None:
    with local_cluster(tmp_path / "data", lambda a: a[:1]) as cluster:
        client = Client(cluster.url)
        script = {"name": "stop.sh", "text": SCRIPT}
        slow, stop = client.submit_files([script, script])["ids"]
        steps = {f"{slow}.0", f"{stop}.0"}
        until("both steps run", lambda: steps <= set(rows(cluster, slow, stop)))
        running = rows(cluster, slow)
        assert running == {
            slow: ["RUNNING", "0:0", "Unknown"],
            f"{slow}.batch": ["RUNNING", "0:0", "Unknown"],
            f"{slow}.0": ["RUNNING", "0:0", "Unknown"],
        }
        client.update(slow, walltime_s=1)  # (already over it: it times out now)
        client.cancel(stop)
        ended = {"timeout", "cancelled"}
        until("both end", lambda: {client.show(j)["phase"] for j in (slow, stop)} == ended)
        until("their steps end", lambda: "Unknown" not in str(rows(cluster, slow, stop)))
        shown = rows(cluster, slow, stop)
    assert [shown[slow][:2], shown[stop][:2]] == [["TIMEOUT", "0:0"], ["CANCELLED", "0:0"]]
    for job in (slow, stop):
        for step in (f"{job}.batch", f"{job}.0"):
            assert shown[step][0] == "CANCELLED" and shown[step][1] in STOPPED, shown
