"""The controller's side of probes, with the agent's side played by hand (the live tests run
real ones): launches carry a group's probes to agents that say ``probes=true`` and go without
them to older agents (whose reply model refuses the fields); ready states a node reports of
its own running tasks show in ``GET /v1/jobs/{id}`` with since when, unknown until said; a
task its agent stopped for a failed liveness probe is a failure its restart policy answers."""

from __future__ import annotations

from typing import Any

import pytest
from fastapi.testclient import TestClient
from pydantic import BaseModel, Field, create_model
from tests.builders import Clock
from tests.controller.test_running_limit import beat, submit

from fusesched.api.wire import (
    Heartbeat,
    HeartbeatReply,
    NodeInventory,
    TaskLaunch,
    TaskReport,
    TaskState,
)
from fusesched.controller.service import Controller

PROBED = {
    "resources": {"cpu": "2"},
    "argv": ["sleep", "1000"],
    "liveness": {"http": {"port": 8080, "path": "/healthz"}},
    "readiness": {"tcp": {"port": 8080}, "period_s": 1},
}


def _without(model: type[BaseModel], names: set[str], **changed: Any) -> type[BaseModel]:
    """``model`` as an agent older than probes has it: without ``names``, refusing unknown
    fields (as every wire model does)."""
    fields: dict[str, Any] = {
        name: (info.annotation, info)
        for name, info in model.model_fields.items()
        if name not in names
    }
    fields.update(changed)
    return create_model(f"Old{model.__name__}", __config__=model.model_config, **fields)


OldLaunch = _without(TaskLaunch, {"liveness", "readiness"})
OldReply = _without(
    HeartbeatReply,
    set(),
    launch=(list[OldLaunch], Field(default_factory=list)),  # type: ignore[valid-type]
)


def test_an_old_agent_gets_launches_without_probes(
    ctl: Controller, client: TestClient, caplog: pytest.LogCaptureFixture
) -> None:
    with pytest.raises(ValueError, match="liveness"):  # what an old agent would do with them
        OldLaunch.model_validate(
            {"task_id": "1.main.0", "job_id": "1", "liveness": {"tcp": {"port": 1}}}
        )
    submit(client, PROBED)
    ctl.run_cycle()
    answer = client.post(
        "/v1/agents/heartbeat?wait=0&signals=true", json={"node": "n0", "running": []}
    )
    assert answer.status_code == 200, answer.text
    (launch,) = OldReply.model_validate_json(answer.text).launch  # type: ignore[attr-defined]
    assert "liveness" not in answer.json()["launch"][0]
    assert "too old to run probes" in caplog.text
    assert launch.task_id == "1.main.0"


def test_a_new_agent_gets_the_probes(ctl: Controller, client: TestClient) -> None:
    submit(client, PROBED)
    ctl.run_cycle()
    answer = client.post(
        "/v1/agents/heartbeat?wait=0&signals=true&probes=true", json={"node": "n0", "running": []}
    )
    (launch,) = HeartbeatReply.model_validate_json(answer.text).launch
    assert launch.liveness is not None and launch.liveness.http is not None
    assert launch.liveness.http.path == "/healthz"
    assert launch.readiness is not None and launch.readiness.period_s == 1


def test_ready_states_show_with_since_when(
    ctl: Controller, client: TestClient, clock: Clock
) -> None:
    job = submit(client, PROBED)["id"]
    plain = submit(client, {"resources": {"cpu": "2"}, "argv": ["sleep", "1000"]})["id"]
    ctl.run_cycle()
    launches = {t.job_id: t.task_id for t in beat(ctl, []).launch}
    task, other = launches[job], launches[plain]
    shown = client.get(f"/v1/jobs/{job}").json()
    assert shown["ready"] is False and shown["tasks"][0]["ready"] is False  # not started yet
    running = [task, other]
    reports = [TaskReport(task_id=t, state=TaskState.RUNNING, pid=1) for t in running]
    beat(ctl, running, reports=reports)
    shown = client.get(f"/v1/jobs/{job}").json()
    assert shown["ready"] is None and shown["tasks"][0]["ready"] is None  # not said yet
    clock.now += 5
    beat(ctl, running, ready={task: False, other: True})
    shown = client.get(f"/v1/jobs/{job}").json()
    assert (shown["ready"], shown["tasks"][0]["ready"]) == (False, False)
    since = shown["tasks"][0]["ready_since"]
    assert since == clock.now
    clock.now += 5
    ctl.heartbeat(Heartbeat(node="n0", ready={task: True}), wait_s=0)  # a quick report
    shown = client.get(f"/v1/jobs/{job}").json()
    assert shown["ready"] is True and shown["tasks"][0]["ready_since"] == since + 5
    beat(ctl, running, ready={task: True})  # said again: since is kept
    assert client.get(f"/v1/jobs/{job}").json()["tasks"][0]["ready_since"] == since + 5
    unprobed = client.get(f"/v1/jobs/{plain}").json()  # no readiness probe: no say
    assert unprobed["ready"] is None and unprobed["tasks"][0]["ready"] is None


def test_another_node_cannot_say_a_task_is_ready(ctl: Controller, client: TestClient) -> None:
    job = submit(client, PROBED)["id"]
    ctl.run_cycle()
    (launch,) = beat(ctl, []).launch
    report = TaskReport(task_id=launch.task_id, state=TaskState.RUNNING, pid=1)
    beat(ctl, [launch.task_id], reports=[report])
    ctl.register(NodeInventory(name="n1", resources={"cpu": "4", "memory": "8Gi"}))
    ctl.heartbeat(Heartbeat(node="n1", running=[], ready={launch.task_id: True}), wait_s=0)
    assert client.get(f"/v1/jobs/{job}").json()["tasks"][0]["ready"] is None


def test_a_liveness_failure_is_restarted_by_the_restart_policy(
    ctl: Controller, client: TestClient
) -> None:
    restart = {"mode": "requeue-excluding-node", "max_restarts": 2, "backoff_s": 0}
    job = submit(client, PROBED, restart=restart)["id"]
    ctl.run_cycle()
    (launch,) = beat(ctl, []).launch
    why = "liveness probe failed: GET http://127.0.0.1:8080/healthz: HTTP 500 (3 checks in a row)"
    report = TaskReport(
        task_id=launch.task_id,
        state=TaskState.EXITED,
        exit_code=-15,
        reason=why,
        liveness_failed=True,
    )
    beat(ctl, [launch.task_id], reports=[report])
    ctl.run_cycle()
    shown = client.get(f"/v1/jobs/{job}").json()
    assert shown["state"] in ("Pending", "Running"), shown
    assert shown["reason"] == f"{why}: requeued", shown
    assert ctl.core.jobs[job].attempts == 1  # counted against max_restarts
    (again,) = beat(ctl, []).launch  # on the same node: the node is not blamed
    assert again.task_id != launch.task_id and again.liveness is not None


def test_a_plain_non_zero_exit_is_not_restarted(ctl: Controller, client: TestClient) -> None:
    restart = {"max_restarts": 2, "backoff_s": 0}
    job = submit(client, PROBED, restart=restart)["id"]
    ctl.run_cycle()
    (launch,) = beat(ctl, []).launch
    report = TaskReport(task_id=launch.task_id, state=TaskState.EXITED, exit_code=1)
    beat(ctl, [launch.task_id], reports=[report])
    ctl.run_cycle()
    assert client.get(f"/v1/jobs/{job}").json()["state"] == "Failed"
