"""A real Prometheus server (Debian's ``prometheus``) scrapes a live controller's /metrics
every second with a bearer token, and PromQL queries over its HTTP API return the series the
cluster should show: capacity by pool, nodes up, a running job's queue and energy, the
finished job's state, the scheduling-cycle histogram.

Skipped only where the binary is missing outside CI (``scripts/system_deps.sh`` installs it;
in CI, ``CI=true``, a missing binary fails the test)."""

from __future__ import annotations

import json
import os
import shutil
import socket
import subprocess
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
import pytest

from fusesched.cli.local import LocalCluster
from fusesched.sdk import Client

from .conftest import local_cluster

PROMETHEUS = shutil.which("prometheus")
DASHBOARD = Path(__file__).parents[2] / "deploy" / "grafana" / "fusesched.json"
#: Grafana's variables in the dashboard's queries, as Grafana would fill them in.
GRAFANA_VARIABLES = {
    "$__rate_interval": "1m",
    "$__range_s": "300",
    "$__range": "5m",
    "$pool": ".*",
    "$job": ".*",
}


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@dataclass
class Prometheus:
    url: str
    log: Path

    def query(self, promql: str) -> list[dict[str, Any]]:
        answer = httpx.get(f"{self.url}/api/v1/query", params={"query": promql}, timeout=10)
        answer.raise_for_status()
        body = answer.json()
        assert body["status"] == "success", body
        return list(body["data"]["result"])

    def values(self, promql: str) -> dict[frozenset[tuple[str, str]], float]:
        """The query's instant vector: labels -> value."""
        return {frozenset(r["metric"].items()): float(r["value"][1]) for r in self.query(promql)}

    def wait_for(
        self, promql: str, timeout: float = 30.0
    ) -> dict[frozenset[tuple[str, str]], float]:
        """Poll until the query returns something (scrapes come every second)."""
        deadline = time.monotonic() + timeout
        while True:
            found = self.values(promql)
            if found:
                return found
            if time.monotonic() > deadline:
                tail = self.log.read_text(errors="replace")[-3000:]
                raise AssertionError(f"no result for {promql!r} after {timeout} s; log:\n{tail}")
            time.sleep(0.25)

    def one(self, promql: str, timeout: float = 30.0) -> float:
        found = self.wait_for(promql, timeout)
        assert len(found) == 1, (promql, found)
        return next(iter(found.values()))


@pytest.fixture
def secured(tmp_path: Path) -> Iterator[LocalCluster]:
    """The live cluster of conftest (three agents, pools cpu and gpu), authentication on."""
    with local_cluster(tmp_path / "data", auth=True) as cluster:
        yield cluster


def start_prometheus(
    tmp_path: Path, target: str, token: str
) -> tuple[subprocess.Popen[bytes], Prometheus]:
    assert PROMETHEUS is not None
    token_file = tmp_path / "prometheus.token"
    token_file.write_text(token + "\n")
    token_file.chmod(0o600)
    config = tmp_path / "prometheus.yml"
    config.write_text(
        f"""global:
  scrape_interval: 1s
  evaluation_interval: 1s
scrape_configs:
  - job_name: fusesched
    scrape_interval: 1s
    scrape_timeout: 1s
    metrics_path: /metrics
    authorization:
      type: Bearer
      credentials_file: {token_file}
    static_configs:
      - targets: ["{target}"]
"""
    )
    port = free_port()
    log = tmp_path / "prometheus.log"
    with log.open("wb") as out:
        process = subprocess.Popen(
            [
                PROMETHEUS,
                f"--config.file={config}",
                f"--storage.tsdb.path={tmp_path / 'tsdb'}",
                f"--web.listen-address=127.0.0.1:{port}",
                "--storage.tsdb.retention.time=1h",
                "--log.level=warn",
            ],
            stdout=out,
            stderr=subprocess.STDOUT,
            stdin=subprocess.DEVNULL,
        )
    server = Prometheus(f"http://127.0.0.1:{port}", log)
    deadline = time.monotonic() + 30
    while True:
        if process.poll() is not None:
            raise AssertionError(f"prometheus exited {process.returncode}:\n{log.read_text()}")
        try:
            if httpx.get(f"{server.url}/-/ready", timeout=1).status_code == 200:
                return process, server
        except httpx.TransportError:
            pass
        if time.monotonic() > deadline:
            process.kill()
            raise AssertionError(f"prometheus did not get ready:\n{log.read_text()}")
        time.sleep(0.1)


def stop(process: subprocess.Popen[bytes]) -> None:
    process.terminate()
    try:
        process.wait(timeout=15)
    except subprocess.TimeoutExpired:
        process.kill()
        process.wait(timeout=5)


def test_prometheus_scrapes_the_controller(secured: LocalCluster, tmp_path: Path) -> None:
    if PROMETHEUS is None:
        if os.environ.get("CI"):
            pytest.fail("the prometheus binary is missing (scripts/system_deps.sh installs it)")
        pytest.skip("the prometheus binary is missing: run scripts/system_deps.sh")
    admin = Client(secured.url, token=secured.admin_token)
    scraper = admin.create_token("prometheus", tenant="ops")["token"]  # role user is enough
    node_credential = secured.agents[0].client._http.headers["authorization"]
    assert httpx.get(f"{secured.url}/metrics").status_code == 401
    machine = httpx.get(f"{secured.url}/metrics", headers={"authorization": node_credential})
    assert machine.status_code == 403  # a node's credential is no person's
    target = secured.url.removeprefix("http://")
    process, prom = start_prometheus(tmp_path, target, scraper)
    try:
        assert prom.one('up{job="fusesched"} == 1') == 1  # scraped, with the token
        assert prom.one('sum(fusesched_pool_capacity{resource="cpu"})') == 8
        assert prom.one('fusesched_pool_capacity{pool="gpu",resource="nvidia.com/gpu"}') == 2
        assert prom.one('fusesched_pool_capacity{pool="cpu",resource="cpu"}') == 4
        assert prom.one("count(fusesched_node_up == 1)") == 3
        by_pool = prom.values("count by (pool) (fusesched_node_up)")
        assert {dict(k)["pool"]: v for k, v in by_pool.items()} == {"cpu": 2, "gpu": 1}

        user = Client(secured.url, token=admin.create_token("ann", tenant="ops")["token"])
        job = {
            "name": "metered",
            "queue": "batch",
            "walltime_s": 120,
            "groups": [{"resources": {"cpu": "1", "memory": "64Mi"}, "argv": ["sleep", "5"]}],
        }
        job_id = user.submit(job)
        # while it runs (over-time queries: the job may be over by the time one is asked)
        running = 'max_over_time(fusesched_queue_jobs{queue="batch",state="Running"}[5m]) == 1'
        assert prom.one(running) == 1
        held = 'max_over_time(sum(fusesched_pool_allocated{resource="cpu"})[5m:1s]) == 1'
        assert prom.one(held) == 1
        energy = f'max_over_time(fusesched_job_energy_joules{{job_id="{job_id}"}}[5m]) > 0'
        assert {dict(k)["source"] for k in prom.wait_for(energy)} == {"estimated"}
        assert user.wait(job_id, timeout=60)["state"] == "Completed"

        assert prom.one('fusesched_jobs{state="Completed"} == 1') == 1
        assert prom.one('fusesched_jobs{state="Running"} == 0') == 0
        assert prom.one('sum(fusesched_pool_allocated{resource="cpu"}) == 0') == 0
        # the job's energy was seen over time: its series holds several samples
        assert (
            prom.one(f'count_over_time(fusesched_job_energy_joules{{job_id="{job_id}"}}[5m])') >= 2
        )
        assert prom.one("fusesched_cycles_total > 0") > 0
        assert prom.one("fusesched_cycle_seconds_count") > 0  # cycles are timed
        assert prom.one('fusesched_node_heartbeat_age_seconds{node="node-c"} < 30') < 30
        # every query of the Grafana dashboard is valid PromQL that Prometheus answers
        board = json.loads(DASHBOARD.read_text())
        for panel in board["panels"]:
            for target in panel.get("targets", ()):
                expr = target["expr"]
                for name, filled in GRAFANA_VARIABLES.items():
                    expr = expr.replace(name, filled)
                prom.query(expr)  # a parse or evaluation error fails here
        capacity = 'fusesched_pool_allocated{pool=~".*"} / fusesched_pool_capacity{pool=~".*"}'
        assert len(prom.values(capacity)) >= 4  # cpu and memory in both pools, GPUs in one
    finally:
        stop(process)
    assert process.returncode is not None
