"""``Controller.priority`` waits for the cycle only for a job just submitted; a job recovered
after a restart that waits for its nodes gets a clear answer at once."""

from __future__ import annotations

import time
from pathlib import Path

import pytest
from tests.builders import Clock, one_queue_tenancy

from fusesched.api.wire import NodeInventory
from fusesched.controller.logs import LogStore
from fusesched.controller.persist import Persistence
from fusesched.controller.records import ControllerConfig
from fusesched.controller.service import Controller
from fusesched.model.tenancy import TenancyConfig
from fusesched.policies.registry import CoreConfig
from fusesched.policies.tenancy_policy import TenancyPolicy
from fusesched.submit.request import JobRequest

TENANCY = one_queue_tenancy({"cpu": 2})


def controller(tmp_path: Path, clock: Clock) -> tuple[Controller, Persistence]:
    persist = Persistence(f"sqlite:///{tmp_path / 'db.sqlite'}")
    policy = TenancyPolicy(TenancyConfig.from_dict(TENANCY))
    config = ControllerConfig(core=CoreConfig(placement="best-fit", tenancy=policy))
    return Controller(persist, LogStore(tmp_path / "logs"), config, clock=clock), persist


def job(name: str) -> JobRequest:
    return JobRequest.model_validate(
        {
            "name": name,
            "tenant": "ml",
            "queue": "train",
            # over its queue's quota (2 CPUs): it stays queued
            "groups": [{"resources": {"cpu": "4"}, "argv": ["true"]}],
        }
    )


def test_a_job_just_submitted_gets_its_priority(tmp_path: Path, clock: Clock) -> None:
    ctl, persist = controller(tmp_path, clock)
    try:
        ctl.register(NodeInventory(name="n0", resources={"cpu": "8", "memory": "4Gi"}))
        ctl.run_cycle()
        # no scheduling loop runs here: the cycle priority() asks for is run by hand
        (job_id,) = ctl.submit([job("a")])
        assert job_id not in ctl.core.jobs
        ctl.run_cycle()
        assert ctl.priority(job_id).total > 0
    finally:
        persist.close()


def test_a_recovered_job_waiting_for_its_nodes_answers_at_once(
    tmp_path: Path, clock: Clock
) -> None:
    ctl, persist = controller(tmp_path, clock)
    ctl.register(NodeInventory(name="n0", resources={"cpu": "8", "memory": "4Gi"}))
    ctl.run_cycle()
    (job_id,) = ctl.submit([job("a")])
    ctl.run_cycle()
    persist.close()
    # restart: the job is held until node n0's agent registers again
    ctl, persist = controller(tmp_path, clock)
    try:
        assert job_id in ctl.jobs and job_id not in ctl.core.jobs
        t0 = time.monotonic()
        with pytest.raises(ValueError, match="not in the scheduler's queue yet"):
            ctl.priority(job_id)
        assert time.monotonic() - t0 < 0.5  # no wait for a cycle that cannot bring it
        ctl.register(NodeInventory(name="n0", resources={"cpu": "8", "memory": "4Gi"}))
        ctl.run_cycle()
        assert ctl.priority(job_id).total > 0
    finally:
        persist.close()
