"""``fusesched queues`` (each queue's jobs and quota) and ``fusesched share`` (the fair-share
tree, as sshare) against a live controller with a tenancy configuration, and without one."""

from __future__ import annotations

import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from fusesched.cli.local import LocalCluster
from fusesched.model.tenancy import TenancyConfig
from fusesched.policies.registry import CoreConfig
from fusesched.policies.tenancy_policy import TenancyPolicy
from fusesched.sdk import Client

from .conftest import local_cluster
from .test_cli import as_json, fusesched
from .test_tenancy_live import QUOTAS


@pytest.fixture
def tenant_cluster(tmp_path: Path) -> Iterator[LocalCluster]:
    policy = TenancyPolicy(TenancyConfig.from_dict(QUOTAS))
    core = CoreConfig(placement="best-fit", tenancy=policy)
    with local_cluster(tmp_path / "data", core=core) as cluster:
        yield cluster


def job(queue: str, cpu: int) -> dict[str, object]:
    return {
        "name": f"{queue}-{cpu}",
        "queue": queue,
        "groups": [{"resources": {"cpu": str(cpu)}, "argv": ["sleep", "60"]}],
    }


def test_queues_show_idle_configured_queues_and_quota_in_use(
    tenant_cluster: LocalCluster,
) -> None:
    idle = {q["name"]: q for q in as_json(fusesched(tenant_cluster, "queues", "--json"))}
    # configured queues are listed before any job arrives (sinfo lists idle partitions)
    assert set(idle) == {"small", "big"}
    small = idle["small"]
    assert (small["tenant"], small["cohort"], small["pending"], small["running"]) == (
        "physics",
        "shared",
        0,
        0,
    )
    assert [(c["resource"], c["used"], c["nominal"]) for c in small["quota"]] == [("cpu", "0", "2")]
    client = Client(tenant_cluster.url)
    job_id = client.submit(job("small", 3))  # 1 core over its quota: borrowed from "big"
    try:
        deadline = time.monotonic() + 30
        while client.show(job_id)["state"] != "Running":
            assert time.monotonic() < deadline, client.show(job_id)
            time.sleep(0.1)
        table = fusesched(tenant_cluster, "queues")
        assert table.returncode == 0, table.stderr
        row = next(line for line in table.stdout.splitlines() if line.strip().startswith("small"))
        assert "physics" in row and "shared" in row
        assert "cpu 3/2 (+1 borrowed)" in row, table.stdout
        running = {q["name"]: q for q in as_json(fusesched(tenant_cluster, "queues", "--json"))}
        assert running["small"]["running"] == 1 and running["small"]["borrowing"] is True
        assert running["big"]["running"] == 0 and running["big"]["borrowing"] is False
    finally:
        client.cancel(job_id)


def test_share_prints_the_fair_share_tree(tenant_cluster: LocalCluster) -> None:
    rows = as_json(fusesched(tenant_cluster, "share", "--json"))
    accounts = [r["account"] for r in rows]
    assert accounts[0] == "lab" and "lab/physics/small" in accounts
    by_name = {r["account"]: r for r in rows}
    assert by_name["lab/physics"]["depth"] == 2
    assert by_name["lab/physics"]["norm_shares"] == pytest.approx(0.5)
    table = fusesched(tenant_cluster, "share")
    assert table.returncode == 0, table.stderr
    lines = table.stdout.splitlines()
    assert any(line.strip().startswith("biology") for line in lines), table.stdout
    assert "fair share" in lines[0] + lines[1]


def test_without_tenancy_queues_are_those_with_jobs_and_share_says_why(
    cluster: LocalCluster,
) -> None:
    empty = fusesched(cluster, "queues")
    assert empty.returncode == 0 and "no queues" in empty.stdout, empty
    assert as_json(fusesched(cluster, "share", "--json")) == []
    share = fusesched(cluster, "share")
    assert share.returncode == 0 and "without a tenancy configuration" in share.stdout
