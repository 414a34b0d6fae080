"""``sbatch --deadline`` against a live cluster of real agents: a job that waits behind a long
job until it can no longer end by its deadline is removed, cancelled with the reason
``DeadLine``; one that can still start in time runs; ``fusesched show`` says the deadline."""

from __future__ import annotations

import time
from pathlib import Path

from tests.live.test_cli import PYTHON
from tests.live.test_cli_sbatch_options import run_in, submitted

from fusesched.cli.local import LocalCluster
from fusesched.sdk import Client


def sbatch(cluster: LocalCluster, cwd: Path, *options: str) -> str:
    return submitted(run_in(cwd, cluster, PYTHON, "sbatch", "--json", *options))


def test_a_job_past_its_deadline_is_removed_and_one_in_time_runs(
    cluster: LocalCluster, tmp_path: Path
) -> None:
    client = Client(cluster.url)
    on_a = ("-w", "node-a", "-c", "2")  # node-a has 2 CPUs: one such job at a time
    blocker = sbatch(cluster, tmp_path, *on_a, "--wrap=sleep 8")
    deadline = time.monotonic() + 30
    while client.show(blocker)["state"] != "Running":
        assert time.monotonic() < deadline, client.show(blocker)
        time.sleep(0.1)
    # 2 s of work due in 4 s: it must start within 2 s, while the blocker runs for 8
    late = sbatch(cluster, tmp_path, *on_a, "-t", "0:02", "--deadline=now+4", "--wrap=true")
    # due in 40 s: it starts when the blocker ends
    in_time = sbatch(cluster, tmp_path, *on_a, "-t", "0:02", "--deadline=now+40", "--wrap=true")

    shown = run_in(tmp_path, cluster, PYTHON, "show", late)
    assert shown.returncode == 0 and "deadline: " in shown.stdout, shown
    ended = client.wait(late, timeout=20)
    assert (ended["state"], ended["phase"]) == ("Cancelled", "cancelled"), ended
    assert ended["reason"].startswith("DeadLine"), ended
    assert ended["start_time"] is None and client.show(blocker)["state"] == "Running"

    done = client.wait(in_time, timeout=40)
    assert done["state"] == "Completed", done
    assert done["start_time"] >= client.show(blocker)["end_time"]
