"""A job left running by a controller that died, whose node does not come back within the node
timeout after the restart: its restart policy decides, as for a node lost while the job ran
(controller/failures.py). It was requeued whatever its policy said (``notify``, its budget
spent), with adoption's own reason and event. Now: the same ``JobNode`` event and reason,
requeued within its budget (the restart counted once), or failed as a node failure
(``NODE_FAIL``). The agents are played by hand, the clock moved by hand."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from tests.builders import Clock
from tests.controller.test_no_requeue import NOT_REQUEUED, node, show, start

from fusesched.api.wire import Heartbeat
from fusesched.controller.logs import LogStore
from fusesched.controller.persist import Persistence
from fusesched.controller.records import ControllerConfig
from fusesched.controller.service import Controller
from fusesched.policies.registry import CoreConfig
from fusesched.submit.request import JobRequest

CONFIG = ControllerConfig(core=CoreConfig(placement="best-fit"), node_timeout_s=30.0)
GONE = "a node of it did not come back after a controller restart"


def left_running(tmp_path: Path, clock: Clock, **extra: Any) -> tuple[Controller, str]:
    """A job (its request's ``extra`` fields) started on n0; the controller dies, a new one
    starts on the same store, n1 registers and n0 never does: past the node timeout."""
    url, logs = f"sqlite:///{tmp_path / 'db.sqlite'}", LogStore(tmp_path / "logs")
    ctl = Controller(Persistence(url), logs, CONFIG, clock=clock)
    for name in ("n0", "n1"):
        ctl.register(node(name))
    group = {"resources": {"cpu": 4}, "argv": ["sleep", "600"]}
    (job,) = ctl.submit([JobRequest.model_validate({"groups": [group], **extra})])
    (task,) = start(ctl, "n0")
    assert task.startswith(f"{job}.")
    ctl.persist.close()
    again = Controller(Persistence(url), logs, CONFIG, clock=clock)
    again.register(node("n1"))
    clock.now += 31
    again.heartbeat(Heartbeat(node="n1", running=[]), wait_s=0)
    again._check_nodes()
    again.run_cycle()
    return again, job


def events(ctl: Controller, job: str) -> list[tuple[str, str]]:
    return [
        (row.event.kind, str(row.event.data.get("reason")))
        for row in ctl.persist.store.events_for_job(job)
    ]


@pytest.mark.parametrize(
    ("extra", "why"),
    [
        ({"requeue": False}, f"; {NOT_REQUEUED}"),
        ({"restart": {"mode": "notify"}}, ": restart policy is notify"),
        ({"restart": {"max_restarts": 0}}, ": retry budget of 0 restarts exhausted"),
    ],
)
def test_a_job_its_policy_does_not_requeue_fails_as_a_node_failure(
    tmp_path: Path, clock: Clock, extra: dict[str, Any], why: str
) -> None:
    ctl, job = left_running(tmp_path, clock, **extra)
    try:
        ended = show(ctl, job)
        said = f"NodeDown: {GONE}{why}"
        assert (ended["state"], ended["reason"], ended["restarts"]) == ("Failed", said, 0), ended
        assert job not in ctl.jobs
        assert ("JobNode", said) in events(ctl, job)  # (as when its node is lost live)
    finally:
        ctl.persist.close()


@pytest.mark.parametrize("budget", [1, 2])
def test_a_job_its_policy_requeues_counts_the_restart_once(
    tmp_path: Path, clock: Clock, budget: int
) -> None:
    """Requeued as after a node lost live (the same event and reason), run again on n1 as
    its run 1; n1 lost in turn: with a budget of one restart the job fails, of two it is
    requeued again, to n2 (the adoption's restart counted once)."""
    policy = {"max_restarts": budget, "backoff_s": 0}
    ctl, job = left_running(tmp_path, clock, restart=policy)
    try:
        assert ("JobNode", f"{GONE}: requeued") in events(ctl, job)
        (task,) = start(ctl, "n1")  # (run again on the node left)
        assert task.startswith(f"{job}-r1."), task
        shown = show(ctl, job)
        assert (shown["state"], shown["restarts"]) == ("Running", 1), shown
        clock.now += 31  # n1 falls silent in turn; n2 joins (room for a third run)
        ctl.register(node("n2"))
        ctl._check_nodes()
        ctl.run_cycle()
        shown = show(ctl, job)
        if budget == 1:
            said = "NodeDown: node n1 stopped heartbeating: retry budget of 1 restarts exhausted"
            assert (shown["state"], shown["reason"], shown["restarts"]) == ("Failed", said, 1)
        else:
            assert shown["restarts"] == 2, shown
            assert ("JobNode", "node n1 stopped heartbeating: requeued") in events(ctl, job)
    finally:
        ctl.persist.close()
