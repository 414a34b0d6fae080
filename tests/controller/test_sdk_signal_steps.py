"""The SDK's ``signal_report(..., steps_only=True)`` against a real controller's route: a
batch script's job steps alone are signalled (Slurm's ``scancel --signal`` without -b/-f),
and the field is sent only when asked, so an older controller still takes the others."""

from __future__ import annotations

from typing import Any

import pytest
from fastapi.testclient import TestClient
from tests.controller.test_oom_exit_zero import sbatch, start
from tests.controller.test_step_warning import _signals, _step

from fusesched.controller.service import Controller
from fusesched.sdk import Client


def _through(client: TestClient, monkeypatch: pytest.MonkeyPatch) -> tuple[Client, list[Any]]:
    """An SDK client whose requests go to ``client`` (the controller's app), and the bodies."""
    sdk = Client("http://controller")
    sent: list[Any] = []

    def call(method: str, path: str, body: Any = None, **_: Any) -> Any:
        sent.append(body)
        answer = client.request(method, path, json=body)
        assert answer.status_code < 300, answer.text
        return answer.json()

    monkeypatch.setattr(sdk, "_call", call)
    return sdk, sent


def test_steps_only_reaches_the_steps_alone(
    ctl: Controller, client: TestClient, monkeypatch: pytest.MonkeyPatch
) -> None:
    sdk, sent = _through(client, monkeypatch)
    job = sbatch(ctl, "-t", "10")
    (batch,) = start(ctl)
    step = _step(client, job)
    start(ctl, [batch.task_id])
    answer = sdk.signal_report(job, "TERM", steps_only=True)
    assert answer == {"signalled": [job], "signal": "TERM", "skipped": {}}
    assert _signals(ctl, [batch.task_id, step]) == [(step, "TERM", False)]
    sdk.signal_report(job, "USR1")
    assert sent == [
        {"signal": "TERM", "main_only": False, "steps_only": True},
        {"signal": "USR1", "main_only": False},  # (no steps_only: an older controller's)
    ]
