"""A gang restarting in place gets CPU ids no other task holds (controller/in_place.py):
those it held are given back at its exits, and a job started on the node during its
back-off may have taken them."""

from __future__ import annotations

from pathlib import Path

from fastapi.testclient import TestClient
from tests.builders import Clock
from tests.controller.conftest import one_node_controller
from tests.controller.test_restart_always import exits, launched, relaunch

from fusesched.api.app import create_app

RESTART = {"mode": "restart-in-place", "backoff_s": 30, "retry_application_failures": True}


def test_a_gang_restarted_in_place_takes_no_cpu_a_job_started_meanwhile_holds(
    tmp_path: Path, clock: Clock
) -> None:
    ctl = one_node_controller(tmp_path, clock)  # (n0: 4 CPUs)
    client = TestClient(create_app(ctl))
    gang = {"groups": [{"name": "main", "resources": {"cpu": "1"}, "replicas": 2, "argv": ["x"]}]}
    answer = client.post("/v1/jobs", json={**gang, "restart": RESTART})
    assert answer.status_code == 201, answer.text
    first, second = (t.task_id for t in launched(ctl, []))
    exits(ctl, first, 3, [second])
    exits(ctl, second, -15, [])
    other = client.post(
        "/v1/jobs", json={"groups": [{"name": "main", "resources": {"cpu": "2"}, "argv": ["y"]}]}
    )
    assert other.status_code == 201, other.text
    (meanwhile,) = launched(ctl, [])
    clock.now += 31
    again = relaunch(ctl, clock, [meanwhile.task_id])
    assert len(again) == 2
    held = [c for t in again for c in t.cpu_ids] + list(meanwhile.cpu_ids)
    assert len(held) == len(set(held)) == 4, (meanwhile.cpu_ids, [t.cpu_ids for t in again])
