"""``restart.always`` end to end: a real controller, a real agent and real processes. A service
submitted as fusesched YAML with ``fusesched submit`` whose replica exits 0 is restarted in
place after every exit, ``max_restarts`` times, then completes; ``fusesched cancel`` of a
running one ends it (its replica exits 0 on SIGTERM and is not restarted)."""

from __future__ import annotations

import json
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from tests.controller.test_running_limit import fusesched  # (the command, as typed)

from fusesched.cli.local import LocalCluster
from fusesched.sdk import Client

from .conftest import local_cluster

SERVICE = """\
name: {name}
type: service
walltime_s: 120
restart: {{mode: restart-in-place, backoff_s: 0, max_restarts: 2, always: true}}
groups:
  - resources: {{cpu: 100m, memory: 64Mi}}
    argv: [sh, -c, '{script}']
"""
ONCE = 'echo "run $FUSESCHED_RESTART_COUNT"'
#: Runs until stopped, and exits 0 on SIGTERM (a server's graceful shutdown).
SERVE = 'trap "exit 0" TERM; echo serving; while :; do sleep 0.2; done'


@pytest.fixture
def cluster(tmp_path: Path) -> Iterator[LocalCluster]:
    with local_cluster(tmp_path / "data", lambda agents: agents[:1]) as made:
        yield made


def submit(cluster: LocalCluster, path: Path, name: str, script: str) -> str:
    path.write_text(SERVICE.format(name=name, script=script), encoding="utf-8")
    done = fusesched(cluster, "submit", str(path), "--json")
    assert done.returncode == 0, done.stderr
    return str(json.loads(done.stdout)["id"])


def test_a_service_exiting_0_is_restarted_until_its_budget_is_spent(
    cluster: LocalCluster, tmp_path: Path
) -> None:
    job_id = submit(cluster, tmp_path / "once.yaml", "once", ONCE)
    client = Client(cluster.url)
    done = client.wait(job_id, timeout=40)
    assert done["state"] == "Completed", done
    assert [t["task_id"] for t in done["tasks"]] == [
        f"{job_id}.main.0",
        f"{job_id}-r1.main.0",
        f"{job_id}-r2.main.0",
    ]
    log = client.logs(job_id)
    assert all(f"run {n}" in log for n in range(3)), log


def test_cancel_ends_a_service_whose_replica_exits_0_on_sigterm(
    cluster: LocalCluster, tmp_path: Path
) -> None:
    job_id = submit(cluster, tmp_path / "serve.yaml", "serve", SERVE)
    client = Client(cluster.url)
    running = _running(client, job_id)
    assert running["state"] == "Running", running
    cancelled = fusesched(cluster, "cancel", job_id)
    assert cancelled.returncode == 0, cancelled.stderr
    done = client.wait(job_id, timeout=30)
    assert done["state"] == "Cancelled", done
    assert [t["task_id"] for t in done["tasks"]] == [f"{job_id}.main.0"]  # not restarted


def _running(client: Client, job_id: str) -> dict[str, object]:
    """``job_id`` once its replica serves (its trap set: it said so after setting it)."""
    deadline = time.monotonic() + 30
    while True:
        shown = client.show(job_id)
        if shown["state"] == "Running" and "serving" in client.logs(job_id):
            return dict(shown)
        assert time.monotonic() < deadline, shown
        time.sleep(0.2)
