"""Cluster licenses with a real controller and agents: with one license, two jobs asking for
it run one after the other; the waiting one says why; ``fusesched licenses``, the job's view
and the Prometheus gauges show the use; a job asking for an unknown license, or more than
exist, is refused at submission (docs/LICENSES.md)."""

from __future__ import annotations

import subprocess
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from fusesched.cli.local import LocalCluster
from fusesched.policies.registry import CoreConfig
from fusesched.sdk import Client, ControllerError

from .conftest import local_cluster
from .test_cli import as_json, fusesched
from .test_recovery import FUSESCHED, Crashable, wait_for

SCRIPT = """#!/bin/bash
#SBATCH --job-name={name}
#SBATCH --cpus-per-task=1
#SBATCH --mem=64M
#SBATCH --time=2:00
#SBATCH -L matlab
while [ ! -e {gate} ]; do sleep 0.1; done
echo "{name} ran"
"""


@pytest.fixture
def licensed_cluster(tmp_path: Path) -> Iterator[LocalCluster]:
    core = CoreConfig(placement="best-fit", licenses=(("matlab", 1),))
    with local_cluster(tmp_path / "data", core=core) as cluster:
        yield cluster


def sbatch(cluster: LocalCluster, scratch: Path, name: str) -> str:
    script = scratch / f"{name}.sh"
    script.write_text(SCRIPT.format(name=name, gate=scratch / f"{name}.go"))
    result = fusesched(cluster, "sbatch", "--parsable", str(script))
    assert result.returncode == 0, result.stderr
    return result.stdout.strip()


def test_one_license_runs_two_jobs_one_after_the_other(
    licensed_cluster: LocalCluster, scratch: Path
) -> None:
    client = Client(licensed_cluster.url)
    first = sbatch(licensed_cluster, scratch, "first")
    wait_for("the first job to start", lambda: client.show(first)["state"] == "Running")
    second = sbatch(licensed_cluster, scratch, "second")
    # the second waits for the license, and says so; CPUs are free for it
    wait_for(
        "the second job's reason",
        lambda: client.show(second)["reason"] == "waiting for licenses: matlab 1 (0 of 1 free)",
    )
    assert client.show(second)["state"] == "Pending"
    assert client.show(first)["licenses"] == {"matlab": 1}
    rows = as_json(fusesched(licensed_cluster, "licenses", "--json"))
    assert rows == [
        {
            "name": "matlab",
            "total": 1,
            "in_use": 1,
            "free": 0,
            "waiting_demand": 1,
            "waiting_jobs": 1,
        }
    ]
    table = fusesched(licensed_cluster, "licenses")
    assert table.returncode == 0, table.stderr
    assert "matlab" in table.stdout and "1 (1)" in table.stdout
    shown = fusesched(licensed_cluster, "show", second)
    assert "licenses: matlab:1" in shown.stdout
    assert "waiting for licenses: matlab 1 (0 of 1 free)" in shown.stdout
    text = httpx.get(f"{licensed_cluster.url}/metrics").text
    assert 'fusesched_license_in_use{license="matlab"} 1.0' in text
    assert 'fusesched_license_total{license="matlab"} 1.0' in text
    # the first ends: the second gets the license
    (scratch / "first.go").touch()
    assert client.wait(first, timeout=60)["state"] == "Completed"
    wait_for("the second job to start", lambda: client.show(second)["state"] == "Running")
    (scratch / "second.go").touch()
    assert client.wait(second, timeout=60)["state"] == "Completed"
    start_second = client.show(second)["start_time"]
    assert start_second >= client.show(first)["end_time"]
    rows = as_json(fusesched(licensed_cluster, "licenses", "--json"))
    assert rows[0]["in_use"] == 0 and rows[0]["waiting_demand"] == 0


def test_unknown_or_too_many_licenses_are_refused(
    licensed_cluster: LocalCluster, scratch: Path
) -> None:
    client = Client(licensed_cluster.url)
    job = {"groups": [{"resources": {"cpu": "1"}, "argv": ["true"]}]}
    with pytest.raises(ControllerError) as caught:
        client.submit({**job, "licenses": {"ansys": 1}})
    assert caught.value.status == 400
    assert "license 'ansys' is not configured" in str(caught.value)
    with pytest.raises(ControllerError) as caught:
        client.submit({**job, "licenses": {"matlab": 2}})
    assert caught.value.status == 400
    assert "the cluster has 1 in all" in str(caught.value)
    script = scratch / "bad.sh"
    script.write_text("#!/bin/bash\n#SBATCH -L matlab:1|ansys:1\ntrue\n")
    result = fusesched(licensed_cluster, "sbatch", str(script))
    assert result.returncode == 2
    assert "'|' (any one of several licenses) is not supported" in result.stderr


class LicensedCrashable(Crashable):
    """test_recovery's SIGKILL-able controller process, started with ``--licenses``."""

    def start_controller(self) -> None:
        self.proc = subprocess.Popen(
            [
                *(FUSESCHED, "controller", "--data-dir", str(self.data)),
                *("--port", str(self.port), "--no-auth", "--licenses", "matlab:1"),
            ],
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )
        wait_for("the controller", lambda: self.client.health() or True)


def test_a_restarted_controller_counts_running_jobs_licenses_again(
    tmp_path: Path, scratch: Path
) -> None:
    root = scratch / "agents"
    root.mkdir(mode=0o755)
    cluster = LicensedCrashable(tmp_path / "data", root)
    cluster.start_controller()
    cluster.start_agents()
    try:
        client = cluster.client

        def gated(name: str) -> dict[str, Any]:
            gate = scratch / f"{name}.go"
            loop = f"while [ ! -e {gate} ]; do sleep 0.1; done"
            group = {"argv": ["sh", "-c", loop], "resources": {"cpu": "1", "memory": "32Mi"}}
            return {"name": name, "walltime_s": 300, "licenses": {"matlab": 1}, "groups": [group]}

        first = client.submit(gated("first"))
        wait_for("the first job to run", lambda: client.show(first)["state"] == "Running")
        second = client.submit(gated("second"))
        cluster.kill_controller()
        cluster.start_controller()
        # the first job is adopted with its license: the second still waits for it
        wait_for("the adoption", lambda: client.licenses()[0]["in_use"] == 1)
        time.sleep(2.0)
        assert client.show(second)["state"] == "Pending"
        assert client.show(second)["reason"] == "waiting for licenses: matlab 1 (0 of 1 free)"
        (scratch / "first.go").touch()
        assert client.wait(first, timeout=60)["state"] == "Completed"
        wait_for("the second job to run", lambda: client.show(second)["state"] == "Running")
        (scratch / "second.go").touch()
        assert client.wait(second, timeout=60)["state"] == "Completed"
    finally:
        cluster.stop()


def test_a_malformed_licenses_option_stops_the_controller(tmp_path: Path) -> None:
    result = subprocess.run(
        [FUSESCHED, "controller", "--data-dir", str(tmp_path), "--licenses", "matlab"],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert result.returncode == 2
    assert "--licenses: 'matlab': give a count, as matlab:COUNT" in result.stderr
