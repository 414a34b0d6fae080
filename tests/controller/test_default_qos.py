"""A job that names no QoS gets the tenancy file's ``default_qos`` (silver without a file)."""

from __future__ import annotations

from pathlib import Path

from fastapi.testclient import TestClient
from tests.builders import Clock, one_queue_tenancy
from tests.controller.conftest import ONE_NODE
from tests.controller.test_job_holds import WHOLE, submit, view

from fusesched.api.app import create_app
from fusesched.api.wire import NodeInventory
from fusesched.controller.logs import LogStore
from fusesched.controller.persist import Persistence
from fusesched.controller.records import ControllerConfig
from fusesched.controller.service import Controller
from fusesched.model.tenancy import TenancyConfig
from fusesched.policies.registry import CoreConfig
from fusesched.policies.tenancy_policy import TenancyPolicy

# no silver tier: a job given silver behind its back would be refused as "unknown qos"
TIERS = {"gold": {"priority": 2}, "bronze": {"priority": 1}}


def controller(tmp_path: Path, clock: Clock, tenancy: dict[str, object] | None) -> Controller:
    persist = Persistence(f"sqlite:///{tmp_path / 'db.sqlite'}")
    policy = None if tenancy is None else TenancyPolicy(TenancyConfig.from_dict(tenancy))
    config = ControllerConfig(core=CoreConfig(placement="best-fit", tenancy=policy))
    ctl = Controller(persist, LogStore(tmp_path / "logs"), config, clock=clock)
    ctl.register(NodeInventory.model_validate(ONE_NODE))
    return ctl


def test_a_job_without_qos_gets_the_files_default(tmp_path: Path, clock: Clock) -> None:
    tenancy = one_queue_tenancy({"cpu": 8}, qos=TIERS, default_qos="gold")
    ctl = controller(tmp_path, clock, tenancy)
    client = TestClient(create_app(ctl), raise_server_exceptions=False)
    plain = submit(client, tenant="ml", queue="train")["id"]
    named = submit(client, tenant="ml", queue="train", qos="bronze")["id"]
    ctl.run_cycle()
    assert view(client, plain)["qos"] == "gold"  # stored as it was applied
    assert view(client, named)["qos"] == "bronze"
    assert ctl.core.jobs[plain].spec.qos == "gold"
    assert view(client, plain)["state"] != "Rejected"
    # a trial is read the same way: the default tier, not a refusal for "silver"
    tried = client.post(
        "/v1/starts/test", json=[{"groups": [WHOLE], "tenant": "ml", "queue": "train"}]
    )
    assert tried.status_code == 200, tried.text


def test_without_a_tenancy_file_it_is_silver(tmp_path: Path, clock: Clock) -> None:
    ctl = controller(tmp_path, clock, None)
    client = TestClient(create_app(ctl), raise_server_exceptions=False)
    job = submit(client, walltime_s=90061, priority=-3)["id"]
    ctl.run_cycle()
    shown = view(client, job)
    assert (shown["qos"], shown["priority"], shown["time_limit_s"]) == ("silver", -3, 90061)
    assert ctl.core.jobs[job].spec.qos == "silver"


def test_show_prints_the_terms_as_slurm_writes_a_limit() -> None:
    from fusesched.cli.live import slurm_duration

    assert slurm_duration(90061) == "1-01:01:01"
    assert slurm_duration(59.2) == "00:01:00"
    assert slurm_duration(3600) == "01:00:00"
