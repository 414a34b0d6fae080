"""Probes end to end: a real controller, real agents (over HTTP) and a real HTTP server as a
service job.

* its readiness goes false → true once it listens, visible through ``GET /v1/jobs/{id}`` and
  ``fusesched show``;
* its ``/healthz`` starts failing (a file appears): its liveness probe stops it, the restart
  policy restarts it (counted against ``max_restarts``) with the reason "liveness probe
  failed: …"; when the restart budget is spent it fails, saying so;
* an agent too old for probes gets its launches without them: readiness stays unknown (null),
  never "not ready";
* bad probe values are refused with a clear reason: 422 from the API, a non-zero exit from
  the CLI.
"""

from __future__ import annotations

import json
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
from tests.probe_server import probe_server

from fusesched.agent import failover

from .failure_cluster import FailureCluster, failure_cluster, until


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def service(scratch: Path, port: int, **extra: Any) -> dict[str, Any]:
    group = {
        "resources": {"cpu": "250m", "memory": "64Mi"},
        "ports": [port],
        "argv": probe_server(scratch, port, delay_s=2, per_restart=True),
        "liveness": {
            "http": {"port": port, "path": "/healthz"},
            "initial_delay_s": 4,  # (it listens after 2 s)
            "period_s": 0.5,
            "failure_threshold": 2,
        },
        "readiness": {"tcp": {"port": port}, "period_s": 0.5},
    }
    return {
        "name": "web",
        "type": "service",
        "restart": {"backoff_s": 0, "max_restarts": 1},
        "groups": [group],
        **extra,
    }


@pytest.fixture
def cluster(tmp_path: Path) -> Iterator[FailureCluster]:
    with failure_cluster(tmp_path) as made:
        made.add_agent("node-a")
        yield made


def fusesched(cluster: FailureCluster, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "fusesched", *args],
        capture_output=True,
        text=True,
        timeout=60,
        env={"FUSESCHED_CONTROLLER": cluster.server.url, "PATH": "/usr/bin:/bin", "COLUMNS": "200"},
    )


def running_task(job: dict[str, Any]) -> dict[str, Any] | None:
    running = [t for t in job["tasks"] if t["state"] == "Running"]
    return running[0] if running else None


def test_readiness_and_a_liveness_restart_of_a_service(
    cluster: FailureCluster, scratch: Path
) -> None:
    port = free_port()
    job_id = cluster.client.submit(service(scratch, port))
    shown: dict[str, Any] = {}

    def task_said() -> dict[str, Any] | None:
        shown.update(cluster.client.show(job_id))
        task = running_task(shown)
        # (its agent's first word: until then a task placed but not yet running on its
        # node reads not ready, with no time since: the store says Running at placement)
        return task if task is not None and task["ready_since"] is not None else None

    first = until(task_said, 10, lambda: f"no readiness shown: {shown}")
    assert first["ready"] is False and shown["ready"] is False  # it listens after 2 s
    assert isinstance(first["ready_since"], float)
    text = fusesched(cluster, "show", job_id)
    assert text.returncode == 0, text.stderr
    assert "ready: no (0 of 1 tasks ready)" in text.stdout, text.stdout

    until(lambda: cluster.client.show(job_id)["ready"] is True, 10, "never ready")
    ready = cluster.client.show(job_id)
    (task,) = ready["tasks"]
    assert task["ready"] is True and task["ready_since"] > first["ready_since"]
    text = fusesched(cluster, "show", job_id)
    assert "ready: yes (1 of 1 tasks ready) since" in text.stdout, text.stdout

    time.sleep(2.5)  # past its initial delay: healthy checks leave it running
    assert cluster.client.show(job_id)["tasks"] == ready["tasks"]

    (scratch / "unhealthy.0").touch()  # the first run's /healthz now answers 500
    restarted: dict[str, Any] = {}

    def second_run() -> bool:
        restarted.update(cluster.client.show(job_id))
        return any(t["task_id"] != task["task_id"] for t in restarted["tasks"])

    until(second_run, 15, lambda: f"not restarted: {restarted}")
    what = f"liveness probe failed: GET http://127.0.0.1:{port}/healthz: HTTP 500"
    events = dict(cluster.events(job_id))
    assert events["JobLiveness"]["reason"] == f"{what} (2 checks in a row): requeued", events
    assert restarted["reason"].startswith(what), restarted
    gone = next(t for t in restarted["tasks"] if t["task_id"] == task["task_id"])
    assert gone["state"] == "Failed" and gone["ready"] is None
    until(lambda: cluster.client.show(job_id)["ready"] is True, 15, "the restart never ready")

    (scratch / "unhealthy.1").touch()  # the second run fails too: no restart left
    final: dict[str, Any] = {}

    def failed() -> bool:
        final.update(cluster.client.show(job_id))
        return final["state"] == "Failed"

    until(failed, 20, lambda: f"not failed: {final}")
    assert final["reason"] == f"{what} (2 checks in a row): retry budget of 1 restarts exhausted"
    assert final["ready"] is None  # ended: no say


def test_an_agent_too_old_for_probes_leaves_readiness_unknown(
    tmp_path: Path, scratch: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    beat_url = failover.beat_url

    def old(cache: dict[Any, httpx.URL], url: str, wait_s: float, quick: bool) -> httpx.URL:
        return beat_url(cache, url, wait_s, quick).copy_remove_param("probes")

    monkeypatch.setattr(failover, "beat_url", old)
    port = free_port()
    with failure_cluster(tmp_path) as cluster:
        cluster.add_agent("old")
        (scratch / "unhealthy.0").touch()  # a probe run would stop it at once
        job_id = cluster.client.submit(service(scratch, port, walltime_s=60))
        until(lambda: running_task(cluster.client.show(job_id)), 10, "never running")
        time.sleep(6.0)  # its liveness delay and two checks, had it any
        job = cluster.client.show(job_id)
        (task,) = job["tasks"]
        assert task["state"] == "Running" and task["ready"] is None and job["ready"] is None
        assert cluster.event_kinds(job_id) == ["JobSubmitted", "JobStarted"]
        text = fusesched(cluster, "show", job_id)
        assert "ready:" not in text.stdout, text.stdout


BAD = [
    ({"http": {"port": 8080}, "period_s": 0.1}, "greater than or equal to 0.5"),
    ({"http": {"port": 70000}}, "less than or equal to 65535"),
    ({"http": {"port": 80, "path": "healthz"}}, "must start with /"),
    ({"tcp": {"port": 80}, "exec": ["true"]}, "exactly one check"),
    ({"period_s": 5}, "exactly one check"),
    ({"exec": []}, "at least 1 item"),
    ({"exec": ["true"], "failure_threshold": 0}, "greater than or equal to 1"),
    ({"exec": ["true"], "success_threshold": 2}, "success_threshold must be 1"),
    ({"exec": ["true"], "timeout_s": -1}, "greater than or equal to 0.1"),
    ({"exec": ["true"], "perod_s": 1}, "did you mean 'period_s'"),
]


@pytest.mark.parametrize(("probe", "said"), BAD)
def test_bad_probe_values_are_refused_by_the_api(
    cluster: FailureCluster, probe: dict[str, Any], said: str
) -> None:
    group = {"resources": {"cpu": "250m"}, "argv": ["true"], "liveness": probe}
    response = httpx.post(f"{cluster.server.url}/v1/jobs", json={"groups": [group]})
    assert response.status_code == 422, response.text
    if "did you mean" not in said:  # (the REST model says "Extra inputs are not permitted")
        assert said in response.text, response.text


def test_bad_probe_values_are_refused_by_the_cli(cluster: FailureCluster, tmp_path: Path) -> None:
    job = tmp_path / "web.yaml"
    job.write_text(
        "name: web\nresources: {cpu: 250m}\ncommand: [sleep, '60']\n"
        "readiness:\n  http: {port: 8080, path: /ready}\n  perod_s: 2\n"
    )
    result = fusesched(cluster, "submit", str(job))
    assert result.returncode != 0
    assert "unknown field 'perod_s'; did you mean 'period_s'?" in result.stderr, result.stderr
    assert "web.yaml:6: readiness.perod_s:" in result.stderr, result.stderr
    job.write_text(
        "name: web\nresources: {cpu: 250m}\ncommand: [sleep, '60']\n"
        "liveness:\n  tcp: {port: 8080}\n  success_threshold: 3\n"
    )
    result = fusesched(cluster, "submit", str(job))
    assert result.returncode != 0
    assert "a liveness probe's success_threshold must be 1, not 3" in result.stderr, result.stderr
    assert json.loads(fusesched(cluster, "jobs", "--json").stdout) == []  # nothing submitted
