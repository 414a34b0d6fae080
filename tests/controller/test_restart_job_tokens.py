"""Job tokens after a controller restart: a job left running that is requeued (or, with
``--no-requeue``, fails) because its node did not come back has its run's token revoked, as
when the core ends or requeues a job (controller/endings.py); a gang adopted after the restart
that restarts in place with a rebuilt launch runs under a new token, given to all its tasks,
and the old one is revoked. A request with a revoked token gets 401. The agents are played
by hand, the clock moved by hand."""

from __future__ import annotations

from pathlib import Path

import pytest
from fastapi.testclient import TestClient
from tests.builders import Clock
from tests.controller.conftest import ONE_NODE
from tests.controller.test_adoption_relaunch import GROUPS, RESTART
from tests.controller.test_no_requeue import node, sbatch
from tests.controller.test_restart_always import exits, launched, relaunch
from tests.controller.test_running_limit import beat

from fusesched.api.app import create_app
from fusesched.api.wire import Heartbeat, NodeInventory, TaskLaunch, TaskReport, TaskState
from fusesched.controller.auth import Authenticator, Role
from fusesched.controller.logs import LogStore
from fusesched.controller.persist import Persistence
from fusesched.controller.records import ControllerConfig
from fusesched.controller.run_launches import JOB_TOKEN_ENV
from fusesched.controller.service import Controller
from fusesched.core.requeue import NOT_REQUEUED
from fusesched.policies.registry import CoreConfig
from fusesched.store import TokenKind


def controller(tmp_path: Path, clock: Clock) -> Controller:
    """A controller with authentication on, on the store in ``tmp_path`` (a second one on
    the same store is the first restarted)."""
    persist = Persistence(f"sqlite:///{tmp_path / 'db.sqlite'}")
    config = ControllerConfig(core=CoreConfig(placement="best-fit"), node_timeout_s=30.0)
    auth = Authenticator(persist.store, enabled=True, clock=clock)
    return Controller(persist, LogStore(tmp_path / "logs"), config, clock=clock, auth=auth)


def logs_status(ctl: Controller, job: str, token: str) -> int:
    """What ``GET /v1/jobs/{job}/logs`` (``srun`` following its steps) answers ``token``."""
    assert ctl.auth is not None
    headers = {"authorization": f"Bearer {token}"}
    client = TestClient(create_app(ctl, ctl.auth))
    return int(client.get(f"/v1/jobs/{job}/logs", headers=headers).status_code)


@pytest.mark.parametrize("no_requeue", [False, True])
def test_a_job_whose_node_did_not_come_back_loses_its_token(
    tmp_path: Path, clock: Clock, no_requeue: bool
) -> None:
    ctl = controller(tmp_path, clock)
    for name in ("n0", "n1"):
        ctl.register(node(name))
    job = sbatch(ctl, "-c", "4", "-w", "n0", *(["--no-requeue"] if no_requeue else []))
    ctl.run_cycle()
    (launch,) = ctl.heartbeat(Heartbeat(node="n0", running=[]), wait_s=0).launch
    running = TaskReport(task_id=launch.task_id, state=TaskState.RUNNING, pid=1)
    ctl.heartbeat(Heartbeat(node="n0", reports=[running], running=[launch.task_id]), wait_s=0)
    token = launch.env[JOB_TOKEN_ENV]
    assert logs_status(ctl, job, token) == 200
    ctl.persist.close()
    again = controller(tmp_path, clock)  # n0 never comes back
    try:
        again.register(node("n1"))
        assert logs_status(again, job, token) == 200  # (waiting for adoption: kept)
        clock.now += 31
        again.heartbeat(Heartbeat(node="n1", running=[]), wait_s=0)
        again._check_nodes()
        again.run_cycle()
        assert again.auth is not None
        admin = again.auth.issue(TokenKind.USER, user="root", role=Role.CLUSTER_ADMIN.value)[0]
        headers = {"authorization": f"Bearer {admin}"}
        shown = TestClient(create_app(again, again.auth)).get(f"/v1/jobs/{job}", headers=headers)
        if no_requeue:
            assert shown.json()["phase"] == "failed" and NOT_REQUEUED in shown.json()["reason"]
        else:
            assert shown.json()["phase"] == "queued", shown.json()
        assert logs_status(again, job, token) == 401
    finally:
        again.persist.close()


def test_a_rebuilt_run_gets_a_new_token_and_the_old_one_is_revoked(
    tmp_path: Path, clock: Clock
) -> None:
    """Its master exited during the restart (no launch of it came back): its launch is
    rebuilt, under a new token, which the workers given back get too."""
    ctl = controller(tmp_path, clock)
    ctl.register(NodeInventory.model_validate(ONE_NODE))
    assert ctl.auth is not None
    alice = ctl.auth.issue(TokenKind.USER, user="alice", tenant="lab", role="user")[0]
    body = {"groups": GROUPS, "restart": RESTART}
    headers = {"authorization": f"Bearer {alice}"}
    answer = TestClient(create_app(ctl, ctl.auth)).post("/v1/jobs", json=body, headers=headers)
    assert answer.status_code == 201, answer.text
    first = launched(ctl, [])
    job = first[0].job_id
    old = first[0].env[JOB_TOKEN_ENV]
    ctl.persist.close()
    ids = [t.task_id for t in first]
    ctl = controller(tmp_path, clock)
    try:
        ctl.register(NodeInventory.model_validate({**ONE_NODE, "running": [first[0], first[2]]}))
        ctl.run_cycle()  # (adopted)
        assert logs_status(ctl, job, old) == 200
        ended = TaskReport(task_id=ids[1], state=TaskState.EXITED, exit_code=1)
        beat(ctl, [ids[0], ids[1], ids[2]], reports=[ended])
        exits(ctl, ids[0], -15, [ids[2]])
        exits(ctl, ids[2], -15, [])
        again: list[TaskLaunch] = relaunch(ctl, clock, [])
        assert len(again) == 3
        (new,) = {t.env[JOB_TOKEN_ENV] for t in again}  # one token, the whole gang's
        assert new != old
        assert logs_status(ctl, job, old) == 401
        assert logs_status(ctl, job, new) == 200
    finally:
        ctl.persist.close()
