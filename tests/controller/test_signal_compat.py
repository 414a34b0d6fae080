"""Signals and older agents, arrays and bad input (controller/signals.py,
``POST /v1/jobs/{id}/signal``).

An agent says it understands signals (``signals=true`` on its heartbeat URL); an older one,
whose reply model refuses fields it does not know, never gets them: its launches go without
their time-limit warning and a signal on demand for its tasks is refused (409). An array
signals the members that can be signalled and says which it left out; a signal waiting for
its agent is not queued twice and a silent node's queue is bounded; a JSON ``true`` is no
signal."""

from __future__ import annotations

from typing import Any

import pytest
from fastapi.testclient import TestClient
from pydantic import BaseModel, Field, create_model
from tests.controller.test_job_signals import HALF, signal
from tests.controller.test_running_limit import beat, started, submit

from fusesched.api.wire import HeartbeatReply, TaskLaunch
from fusesched.cli.job_signals import _said
from fusesched.controller import signals
from fusesched.controller.service import Controller


def _without(model: type[BaseModel], **changed: Any) -> type[BaseModel]:
    """``model`` as an agent older than signals has it: without its ``signal`` field and
    refusing unknown fields (as every wire model does)."""
    fields: dict[str, Any] = {
        name: (info.annotation, info)
        for name, info in model.model_fields.items()
        if name != "signal"
    }
    fields.update(changed)
    return create_model(f"Old{model.__name__}", __config__=model.model_config, **fields)


OldLaunch = _without(TaskLaunch)
OldReply = _without(HeartbeatReply, launch=(list[OldLaunch], Field(default_factory=list)))  # type: ignore[valid-type]


def old_beat(client: TestClient, running: list[str]) -> Any:
    """A beat of an agent older than signals (no ``signals=true``), its reply read as it
    reads it (a ValidationError there would kill its heartbeat thread)."""
    answer = client.post("/v1/agents/heartbeat?wait=0", json={"node": "n0", "running": running})
    assert answer.status_code == 200, answer.text
    return OldReply.model_validate_json(answer.text)


def test_an_old_agent_gets_no_signal_fields(
    ctl: Controller, client: TestClient, caplog: pytest.LogCaptureFixture
) -> None:
    with pytest.raises(ValueError, match="signal"):  # what the old agent did before the fix
        OldReply.model_validate_json(
            HeartbeatReply(signal=[{"task_id": "1.main.0", "signal": "USR1"}]).model_dump_json()  # type: ignore[list-item]
        )
    job = submit(client, HALF, walltime_s=600, signal={"name": "USR1", "before_s": 90})["id"]
    ctl.run_cycle()
    reply = old_beat(client, [])  # the launch parses: its warning is left out
    (launch,) = reply.launch  # type: ignore[attr-defined]
    assert launch.job_id == job
    assert "too old for the time-limit warning" in caplog.text
    running = [launch.task_id]
    client.post(
        "/v1/agents/heartbeat?wait=0",
        json={
            "node": "n0",
            "running": running,
            "reports": [{"task_id": launch.task_id, "state": "running", "pid": 7}],
        },
    )
    answer = signal(client, job, signal="USR1")
    assert answer.status_code == 409
    assert "node n0's agent is too old to deliver signals" in answer.json()["detail"]
    assert old_beat(client, running).kill == []  # type: ignore[attr-defined]

    # the agent is upgraded: its beats say so, and signals flow
    up = client.post(
        "/v1/agents/heartbeat?wait=0&signals=true", json={"node": "n0", "running": running}
    )
    assert up.status_code == 200
    assert signal(client, job, signal="USR1").status_code == 202
    # ... and it goes back to an old one before collecting it: nothing it cannot read
    assert old_beat(client, running).kill == []  # type: ignore[attr-defined]
    assert ctl.nodes["n0"].signals == [] and "too old to deliver signals" in caplog.text


def test_a_current_agent_gets_them_through_the_route(ctl: Controller, client: TestClient) -> None:
    job = submit(client, HALF, walltime_s=600, signal={"name": "USR1", "before_s": 90})["id"]
    ctl.run_cycle()
    answer = client.post(
        "/v1/agents/heartbeat?wait=0&signals=true", json={"node": "n0", "running": []}
    )
    (launch,) = HeartbeatReply.model_validate_json(answer.text).launch
    assert launch.signal is not None and launch.signal.before_s == 90
    client.post(
        "/v1/agents/heartbeat?wait=0&signals=true",
        json={
            "node": "n0",
            "running": [launch.task_id],
            "reports": [{"task_id": launch.task_id, "state": "running", "pid": 7}],
        },
    )
    assert signal(client, job, signal="HUP").status_code == 202
    answer = client.post(
        "/v1/agents/heartbeat?wait=0&signals=true",
        json={"node": "n0", "running": [launch.task_id]},
    )
    sent = HeartbeatReply.model_validate_json(answer.text).signal
    assert [(s.task_id, s.signal) for s in sent] == [(launch.task_id, "HUP")]


def test_an_array_signals_the_members_it_can(ctl: Controller, client: TestClient) -> None:
    made = submit(client, HALF, array={"start": 0, "stop": 1})
    tasks = started(ctl)
    first, second = made["ids"]
    assert client.post(f"/v1/jobs/{second}/cancel").status_code == 202
    ctl.run_cycle()  # the second is being stopped
    answer = signal(client, made["id"], signal="USR1")
    assert answer.status_code == 202, answer.text
    assert answer.json()["signalled"] == [first]
    assert "being stopped" in answer.json()["skipped"][second]
    # what `fusesched cancel --signal` prints of it
    said = _said(made["id"], answer.json())
    assert said.startswith(f"Sent SIGUSR1 to {first}; skipped {second} (") and "stopped" in said
    sent = beat(ctl, list(tasks.values())).signal
    assert [s.task_id for s in sent] == [tasks[first]]
    # by its own id, the member being stopped is refused as a job alone is
    answer = signal(client, second, signal="USR1")
    assert answer.status_code == 409 and "being stopped" in answer.text
    assert client.post(f"/v1/jobs/{first}/cancel").status_code == 202
    ctl.run_cycle()
    answer = signal(client, made["id"], signal="USR1")
    assert answer.status_code == 409
    assert f"no member of array {made['id']} can be signalled" in answer.json()["detail"]


def test_a_queued_signal_is_not_queued_again_and_the_queue_is_bounded(
    ctl: Controller, client: TestClient, monkeypatch: pytest.MonkeyPatch
) -> None:
    job = submit(client, HALF)["id"]
    other = submit(client, HALF)["id"]
    started(ctl)
    for _ in range(3):  # the node is silent meanwhile
        assert signal(client, job, signal="USR1").status_code == 202
    assert len(ctl.nodes["n0"].signals) == 1
    assert signal(client, job, signal="USR2").status_code == 202
    monkeypatch.setattr(signals, "MAX_QUEUED", 2)
    answer = signal(client, other, signal="USR1")
    assert answer.status_code == 409 and "has not collected yet" in answer.text
    assert len(ctl.nodes["n0"].signals) == 2


@pytest.mark.parametrize(
    ("body", "found"),
    [
        ({"signal": True}, "valid string"),
        ({"signal": False}, "valid string"),
        ({"signal": 10.0}, "valid string"),
        ({"signal": "1" * 5000}, "unknown signal number 111111111111… (5000 digits)"),
        ({"signal": 10**30}, "(31 digits)"),
        ({"signal": "x" * 5000}, "(5000 chars)"),
        ({"signal": "¹"}, "unknown signal '¹'"),
    ],
)
def test_strict_signal_values(
    ctl: Controller, client: TestClient, body: dict[str, Any], found: str
) -> None:
    job = submit(client, HALF)["id"]
    started(ctl)
    answer = signal(client, job, **body)
    assert answer.status_code == 422 and found in answer.text, answer.text
    assert ctl.nodes["n0"].signals == []
