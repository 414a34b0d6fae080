"""``retry_exits: signals`` end to end (what a Kubeflow replica's ``restartPolicy: ExitCode``
becomes): a real controller, a real agent, real processes. The task is killed by a signal on
its first run, which restarts the job; it exits 1 on its second, a permanent error: the job
fails at once, though restarts remain."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path

import pytest
from tests.controller.test_running_limit import fusesched  # (the command, as typed)

from fusesched.cli.local import LocalCluster
from fusesched.sdk import Client

from .conftest import local_cluster

JOB = """\
name: exitcode
walltime_s: 60
restart: {mode: restart-in-place, backoff_s: 0, max_restarts: 3, retry_application_failures: true}
groups:
  - resources: {cpu: 100m, memory: 64Mi}
    retry_exits: signals
    argv:
      - sh
      - -c
      - 'echo "run $FUSESCHED_RESTART_COUNT"; [ "$FUSESCHED_RESTART_COUNT" = 0 ] && kill -KILL $$
        ; exit 1'
"""


@pytest.fixture
def cluster(tmp_path: Path) -> Iterator[LocalCluster]:
    with local_cluster(tmp_path / "data", lambda agents: agents[:1]) as made:
        yield made


def test_a_signal_restarts_the_job_and_exit_1_fails_it(
    cluster: LocalCluster, tmp_path: Path
) -> None:
    path = tmp_path / "job.yaml"
    path.write_text(JOB, encoding="utf-8")
    submitted = fusesched(cluster, "submit", str(path), "--json")
    assert submitted.returncode == 0, submitted.stderr
    job_id = str(json.loads(submitted.stdout)["id"])
    client = Client(cluster.url)
    done = client.wait(job_id, timeout=40)
    ends = [(t["task_id"], t["exit_code"]) for t in done["tasks"]]
    assert ends == [(f"{job_id}.main.0", -9), (f"{job_id}-r1.main.0", 1)], (done, ends)
    assert (done["state"], done["exit_code"]) == ("Failed", 1), done
    assert "run 1" in client.logs(job_id)
