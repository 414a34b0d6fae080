"""``sbatch -N 2 -n 4`` through the controller: the job runs on exactly two nodes of a partly
busy cluster (the cap of 2 a node alone took three), bad node counts are a 4xx with a reason,
and the count is stored with the job and read back after a restart."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from fastapi.testclient import TestClient
from tests.controller.test_no_requeue import node, sbatch, show

from fusesched.controller.logs import LogStore
from fusesched.controller.persist import Persistence
from fusesched.controller.service import Controller

GROUP = {"resources": {"cpu": "1"}, "argv": ["true"]}


def test_two_nodes_on_a_busy_cluster_and_after_a_restart(ctl: Controller, tmp_path: Path) -> None:
    for name in ("n1", "n2", "n3"):
        ctl.register(node(name))
    sbatch(ctl, "-c", "3")  # n0: 1 CPU left
    sbatch(ctl, "-c", "3")  # n1: 1 CPU left
    ctl.run_cycle()
    job = sbatch(ctl, "-N", "2", "-n", "4")
    ctl.run_cycle()
    assert sorted(show(ctl, job)["nodes"]) == ["n2", "n3"]
    waiting = sbatch(ctl, "-N", "3", "-n", "6")  # no three nodes hold 2 + 2 + 2 now
    ctl.run_cycle()
    assert show(ctl, waiting)["state"] == "Pending"
    ctl.persist.close()
    again = Controller(
        Persistence(f"sqlite:///{tmp_path / 'db.sqlite'}"), LogStore(tmp_path / "logs")
    )
    try:
        assert again.jobs[waiting].spec.placement.nodes == 3
        assert again.jobs[job].spec.placement.nodes == 2
    finally:
        again.persist.close()


def post(client: TestClient, placement: dict[str, Any], replicas: int = 4) -> tuple[int, str]:
    body = {"groups": [{**GROUP, "replicas": replicas}], "placement": placement}
    answer = client.post("/v1/jobs", json=body)
    return answer.status_code, answer.text


def test_bad_node_counts_are_a_4xx_with_a_reason(client: TestClient, ctl: Controller) -> None:
    for placement, reason in (
        ({"nodes": 0}, "greater than or equal to 1"),
        ({"nodes": 5}, "placement nodes (5) exceeds the number of tasks (4)"),
        ({"nodes": 2, "max_tasks_per_node": 1}, "need 4 nodes, but placement nodes is 2"),
        ({"nodes": "many"}, "nodes"),
    ):
        status, text = post(client, placement)
        assert 400 <= status < 500 and reason in text, (placement, status, text)
    # one node registered: two can never be had
    status, text = post(client, {"nodes": 2})
    assert 400 <= status < 500, text
    assert "must run on 2 nodes (-N 2) but only 1 node could hold one of its tasks" in text
    assert not ctl.jobs
    assert post(client, {"nodes": 1})[0] == 201
