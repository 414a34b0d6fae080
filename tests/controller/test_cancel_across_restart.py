"""A running job cancelled just before the controller died (its tasks still being killed):
the cancel was kept only in memory, so the restarted controller adopted the job and it ran
on. The cancel is stored when it is asked for, and a restarted controller carries it out
on the job it adopts. The agent is played by hand."""

from __future__ import annotations

from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest
from fastapi.testclient import TestClient
from tests.builders import Clock
from tests.controller.conftest import ONE_NODE, one_node_controller
from tests.controller.test_restart_always import exits, launched, state
from tests.controller.test_running_limit import beat, submit

from fusesched.api.app import create_app
from fusesched.api.wire import NodeInventory, TaskLaunch
from fusesched.controller import adoption
from fusesched.controller.adoption import CANCEL_ASKED
from fusesched.controller.logs import LogStore
from fusesched.controller.persist import Persistence
from fusesched.controller.service import Controller
from fusesched.store import EventRow, JobRow, JobState, Store, job_history

ONE = {"resources": {"cpu": "2"}, "argv": ["train"], "replicas": 1}


@pytest.mark.parametrize("start_moved", [False, True])
def test_a_cancel_asked_before_a_restart_is_carried_out_after_it(
    tmp_path: Path, clock: Clock, start_moved: bool
) -> None:
    """``start_moved``: the run's stored start moves past the cancel, as an external pool's
    job gets the start its cluster reports (federation.py), after a cancel asked while it
    waited in that cluster's queue: the cancel is of that run all the same (it was dropped,
    read against the job's start time)."""
    ctl = one_node_controller(tmp_path, clock)
    client = TestClient(create_app(ctl))
    job: str = submit(client, ONE)["id"]
    (task,) = (t.task_id for t in launched(ctl, []))
    assert client.post(f"/v1/jobs/{job}/cancel").status_code == 202
    ctl.run_cycle()
    assert [k.task_id for k in beat(ctl, [task]).kill] == [task]  # (the kill is sent)
    if start_moved:
        clock.now += 5
        ctl.persist.job_start_time(job, clock.now)  # (as a pool reports its start: later)
        ctl.persist.flush()
    ctl.persist.close()  # the controller dies before the task has exited
    _restarted_cancels(tmp_path, clock, job, task)


def test_a_job_cancelled_while_it_waits_for_adoption_ends_cancelled(
    tmp_path: Path, clock: Clock
) -> None:
    """Cancelled after the restart, before its node came back: the core did not hold it
    yet, so the cancel went nowhere and the job ran on once adopted (or, its node gone, was
    requeued and ran again). It is carried out at adoption, or ends the job if it never is."""
    ctl = one_node_controller(tmp_path, clock)
    job: str = submit(TestClient(create_app(ctl)), ONE)["id"]
    (task,) = (t.task_id for t in launched(ctl, []))
    ctl.persist.close()
    store = Persistence(f"sqlite:///{tmp_path / 'db.sqlite'}")
    again = Controller(store, LogStore(tmp_path / "logs"), clock=clock)
    client = TestClient(create_app(again))
    assert client.post(f"/v1/jobs/{job}/cancel").status_code == 202  # (not adopted yet)
    again.run_cycle()
    running = [TaskLaunch(task_id=task, job_id=job)]
    again.register(NodeInventory.model_validate({**ONE_NODE, "running": running}))
    kills = beat(again, [task]).kill
    again.run_cycle()  # (adopted, then cancelled)
    kills += beat(again, [task]).kill
    assert task in [k.task_id for k in kills]
    exits(again, task, -15, [])
    again.run_cycle()
    assert state(client, job) == "Cancelled"
    again.persist.close()


def test_one_cancelled_whose_node_never_returns_ends_cancelled(
    tmp_path: Path, clock: Clock
) -> None:
    ctl = one_node_controller(tmp_path, clock)
    job: str = submit(TestClient(create_app(ctl)), ONE)["id"]
    launched(ctl, [])
    ctl.persist.close()
    store = Persistence(f"sqlite:///{tmp_path / 'db.sqlite'}")
    again = Controller(store, LogStore(tmp_path / "logs"), clock=clock)
    client = TestClient(create_app(again))
    assert client.post(f"/v1/jobs/{job}/cancel").status_code == 202
    clock.now += again.config.node_timeout_s + 1  # its node never comes back
    again._check_nodes()  # (the controller's node check: the adoption deadline passed)
    again.run_cycle()
    assert state(client, job) == "Cancelled"  # (not requeued to run again)
    again.persist.close()


def _restarted_cancels(tmp_path: Path, clock: Clock, job: str, task: str) -> None:
    """A restarted controller adopts ``job`` (its ``task`` still running) and cancels it."""
    store = Persistence(f"sqlite:///{tmp_path / 'db.sqlite'}")
    again = Controller(store, LogStore(tmp_path / "logs"), clock=clock)
    running = [TaskLaunch(task_id=task, job_id=job)]
    again.register(NodeInventory.model_validate({**ONE_NODE, "running": running}))
    kills = beat(again, [task]).kill
    again.run_cycle()  # (adopted)
    kills += beat(again, [task]).kill
    assert task in [k.task_id for k in kills]  # killed again
    exits(again, task, -15, [])
    again.run_cycle()
    assert state(TestClient(create_app(again)), job) == "Cancelled"
    again.persist.close()


def test_the_cancels_stored_are_read_for_all_recovered_jobs_at_once(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A recovered job is cancelled when its last ``CancelAsked`` comes after its last
    ``JobStarted`` (a cancel before a later start was an earlier run's), with that cancel's
    reason; the events of all the jobs are read together (in chunks), not job by job."""
    monkeypatch.setattr(job_history, "CHUNK", 2)  # (several chunks)
    store = Store("sqlite://")
    store.add_events(
        [
            EventRow(1.0, "JobStarted", job_id="1"),
            EventRow(2.0, CANCEL_ASKED, job_id="1", data={"reason": "scancel 1"}),
            EventRow(3.0, "JobNotice", job_id="1"),  # (other kinds do not count)
            EventRow(1.0, CANCEL_ASKED, job_id="2", data={"reason": "an earlier run's"}),
            EventRow(2.0, "JobStarted", job_id="2"),
            EventRow(1.0, "JobStarted", job_id="3"),
            EventRow(2.0, CANCEL_ASKED, job_id="3", data={"reason": "first"}),
            EventRow(3.0, CANCEL_ASKED, job_id="3"),  # (no reason: the default one)
            EventRow(1.0, CANCEL_ASKED, job_id="5", data={"reason": "another job's"}),
        ]
    )

    def one_by_one(job_id: str) -> None:
        raise AssertionError(f"read the events of {job_id} alone")

    monkeypatch.setattr(store, "events_for_job", one_by_one)
    ctl: Any = SimpleNamespace(persist=SimpleNamespace(store=store))
    rows = [
        JobRow(id=i, seq=int(i), user="u", state=JobState.RUNNING, phase="running", submit_time=0.0)
        for i in ("1", "2", "3", "4")
    ]
    assert adoption._cancels_stored(ctl, rows) == {"1": "scancel 1", "3": "cancelled by user"}
    store.close()
