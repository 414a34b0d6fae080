"""What a review of hold / requeue / update / drain found (each failed before its fix):
a QoS the tenancy refuses, a requeue during a pending restart in place, a drained sleeping
node woken for work, an array changed in part, a requeue's backoff skipped, an update lost to
a flavour re-pin."""

from __future__ import annotations

import time
from pathlib import Path

from fastapi.testclient import TestClient
from tests.builders import Clock, one_queue_tenancy
from tests.controller.conftest import ONE_NODE
from tests.controller.test_job_holds import finish, launched, stop, submit, view

from fusesched.api.app import create_app
from fusesched.api.wire import Heartbeat, NodeInventory
from fusesched.controller import updates
from fusesched.controller.logs import LogStore
from fusesched.controller.persist import Persistence
from fusesched.controller.power import PowerConfig
from fusesched.controller.records import ControllerConfig
from fusesched.controller.service import Controller
from fusesched.core.admission import pin_flavours
from fusesched.model.events import JobExited, JobUpdateRequested
from fusesched.model.tenancy import TenancyConfig
from fusesched.policies.registry import CoreConfig
from fusesched.policies.tenancy_policy import TenancyPolicy

TENANCY = one_queue_tenancy(
    {"cpu": 8}, qos={"silver": {"priority": 1}, "gold": {"priority": 2}}, default_qos="silver"
)


def tenancy_controller(tmp_path: Path, clock: Clock) -> Controller:
    persist = Persistence(f"sqlite:///{tmp_path / 'db.sqlite'}")
    policy = TenancyPolicy(TenancyConfig.from_dict(TENANCY))
    config = ControllerConfig(core=CoreConfig(placement="best-fit", tenancy=policy))
    controller = Controller(persist, LogStore(tmp_path / "logs"), config, clock=clock)
    controller.register(NodeInventory.model_validate(ONE_NODE))
    return controller


def test_a_qos_the_tenancy_refuses_is_refused_and_the_job_survives_a_restart(
    tmp_path: Path, clock: Clock
) -> None:
    ctl = tenancy_controller(tmp_path, clock)
    client = TestClient(create_app(ctl), raise_server_exceptions=False)
    submit(client, tenant="ml", queue="train")
    launched(ctl)
    job = submit(client, tenant="ml", queue="train")["id"]
    ctl.run_cycle()
    answer = client.post(f"/v1/jobs/{job}/update", json={"qos": "bronze"})
    assert answer.status_code == 409 and "unknown qos bronze" in answer.text
    ctl.persist.close()
    again = tenancy_controller(tmp_path, clock)
    try:
        again.run_cycle()
        client = TestClient(create_app(again), raise_server_exceptions=False)
        assert view(client, job)["state"] == "Pending"  # not cancelled as refused
    finally:
        again.persist.close()


def test_no_requeue_while_a_restart_in_place_is_pending(ctl: Controller, clock: Clock) -> None:
    client = TestClient(create_app(ctl), raise_server_exceptions=False)
    job = submit(client)["id"]
    task = launched(ctl)[job]
    with ctl.work:  # as failures.job_failed sets it for a restart in place
        ctl.jobs[job].relaunch = (clock.now + 5, "hang: restart in place")
    stop(ctl, task)
    answer = client.post(f"/v1/jobs/{job}/requeue", json={})
    assert answer.status_code == 409 and "already stopping" in answer.text
    clock.now += 10
    ctl._check_health()
    reply = ctl.heartbeat(Heartbeat(node="n0", running=[]), wait_s=0)
    finish(ctl, reply.launch[0].task_id)  # the relaunched run succeeds
    ctl.run_cycle()
    assert view(client, job)["state"] == "Completed"  # not queued to run again


def test_a_drained_sleeping_node_is_not_woken_for_work(tmp_path: Path, clock: Clock) -> None:
    persist = Persistence(f"sqlite:///{tmp_path / 'db.sqlite'}")
    settings = {"suspend": ["true"], "resume": ["true"], "idle_threshold_s": 60, "interval_s": 1}
    config = ControllerConfig(power=PowerConfig.parse(settings))
    ctl = Controller(persist, LogStore(tmp_path / "logs"), config, clock=clock)
    try:
        ctl.register(NodeInventory.model_validate(ONE_NODE))
        client = TestClient(create_app(ctl), raise_server_exceptions=False)
        assert ctl.power is not None
        deadline = time.monotonic() + 10
        while ctl.power.state_of("n0").value != "suspended" and time.monotonic() < deadline:
            clock.now += 100
            ctl.heartbeat(Heartbeat(node="n0", running=[]), wait_s=0)
            ctl._check_power()
            time.sleep(0.2)
        assert ctl.power.state_of("n0").value == "suspended"
        drained = client.post("/v1/nodes/n0/drain", json={"reason": "PSU swap, keep off"})
        assert drained.status_code == 200
        submit(client)
        ctl.run_cycle()
        clock.now += 5
        ctl._check_power()
        time.sleep(0.3)
        assert ctl.power.state_of("n0").value == "suspended"  # not resumed for the job
    finally:
        persist.close()


def test_a_refused_array_update_changes_no_member(ctl: Controller, client: TestClient) -> None:
    launched(ctl)
    submit(client)
    launched(ctl)
    made = submit(client, array={"start": 0, "stop": 2})
    ctl.run_cycle()
    members = made["ids"]
    assert client.post(f"/v1/jobs/{members[0]}/update", json={"priority": 10}).status_code == 200
    try:
        updates.update(ctl, made["id"], priority=5, only_lower=True)  # member 1: a raise
    except updates.UpdateForbidden:
        pass
    else:
        raise AssertionError("a user's raise was let through")
    ctl.persist.flush()
    assert [ctl.core.jobs[m].spec.priority for m in members] == [10, 0, 0]


def test_an_update_keeps_a_requeues_backoff(ctl: Controller, client: TestClient) -> None:
    job = submit(client)["id"]
    launched(ctl)
    core, now = ctl.core, ctl.clock()
    core.handle(JobExited(job, -1, "node failure", requeue=True, not_before=now + 600), now)
    core.handle(JobUpdateRequested(job, priority=1), now)
    assert job in core._delayed and core.jobs[job] not in core.queue.records
    assert core.cycle(now) == []  # 600 s of backoff left: nothing starts


def test_an_update_outlives_a_flavour_re_pin(tmp_path: Path, clock: Clock) -> None:
    ctl = tenancy_controller(tmp_path, clock)
    try:
        client = TestClient(create_app(ctl), raise_server_exceptions=False)
        submit(client, tenant="ml", queue="train")
        launched(ctl)
        job = submit(client, tenant="ml", queue="train", priority=1)["id"]
        ctl.run_cycle()
        rec = ctl.core.jobs[job]
        rec.flavour_key, rec.base_spec = (("=", "pool", "a"),), rec.spec  # as admission pins
        ctl.core.handle(JobUpdateRequested(job, priority=0), clock.now)
        pin_flavours(ctl.core, rec, None)  # admitted under another flavour later
        assert rec.spec.priority == 0
    finally:
        ctl.persist.close()
