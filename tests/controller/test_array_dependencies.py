"""Dependencies on a whole job array through the controller and its API (``afterok:<array>``,
``aftercorr``), and what a restarted controller makes of them when some of the array's
members ended before the restart (it recalls them from the store for the core)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from fastapi.testclient import TestClient
from tests.builders import Clock
from tests.controller.conftest import one_node_controller
from tests.controller.test_dependency_kinds import (
    exit_task,
    launched,
    on,
    restarted,
    submit,
    view,
)

from fusesched.api.app import create_app
from fusesched.controller.service import Controller
from fusesched.model.job import JobSpec
from fusesched.model.phases import JobPhase

QUARTER = {"resources": {"cpu": "1"}, "argv": ["true"]}


def array(client: TestClient, stop: int = 1, **extra: Any) -> tuple[str, list[str]]:
    """An array of one-CPU members 0..``stop``: its id and its members' ids."""
    made = client.post(
        "/v1/jobs", json={"groups": [QUARTER], "array": {"start": 0, "stop": stop}, **extra}
    )
    assert made.status_code == 201, made.text
    return str(made.json()["id"]), list(made.json()["ids"])


def shown(client: TestClient, job_id: str) -> tuple[str, str]:
    answer = view(client, job_id)
    return answer["state"], answer["reason"]


def test_afterok_on_a_whole_array(ctl: Controller, client: TestClient) -> None:
    arr, members = array(client)
    reducer = submit(client, QUARTER, dependencies=on("afterok", arr))
    tasks = launched(ctl)
    assert set(tasks) == set(members)  # the reducer waits, though there is room
    assert ctl.core.jobs[reducer].waiting_on == {arr}
    exit_task(ctl, tasks[members[0]])
    assert launched(ctl) == {}
    exit_task(ctl, tasks[members[1]])
    assert list(launched(ctl)) == [reducer]


def test_a_failing_member_cancels_the_reducer(ctl: Controller, client: TestClient) -> None:
    arr, members = array(client)
    reducer = submit(client, QUARTER, dependencies=on("afterok", arr))
    fallback = submit(client, QUARTER, dependencies=on("afternotok", arr))
    tasks = launched(ctl)
    exit_task(ctl, tasks[members[1]], 2)
    assert shown(client, reducer) == ("Cancelled", f"dependency {arr} (array): {members[1]} failed")
    assert shown(client, fallback)[0] == "Pending"  # until every member ended
    exit_task(ctl, tasks[members[0]])
    assert list(launched(ctl)) == [fallback]


def test_aftercorr_pairs_the_members(ctl: Controller, client: TestClient) -> None:
    arr, members = array(client)
    _, posts = array(client, dependencies=on("aftercorr", arr))
    tasks = launched(ctl)
    assert set(tasks) == set(members)
    exit_task(ctl, tasks[members[1]])
    assert list(launched(ctl)) == [posts[1]]
    exit_task(ctl, tasks[members[0]], 1)
    assert shown(client, posts[0]) == ("Cancelled", f"dependency {members[0]} ended failed")


def test_an_unknown_array_is_refused(client: TestClient) -> None:
    answer = client.post(
        "/v1/jobs", json={"groups": [QUARTER], "dependencies": on("afterok", "999")}
    )
    assert answer.status_code == 400
    assert answer.json() == {"detail": "dependency on unknown job '999'"}


# ============================================================================ restarts


def test_a_waiting_reducer_after_a_restart(tmp_path: Path, clock: Clock) -> None:
    """Member 0 completed before the restart, member 1 still runs: the recovered reducer
    waits for member 1 only; a job submitted after the restart sees the array whole."""
    ctl = one_node_controller(tmp_path, clock)
    client = TestClient(create_app(ctl), raise_server_exceptions=False)
    arr, members = array(client)
    reducer = submit(client, QUARTER, dependencies=on("afterok", arr))
    tasks = launched(ctl)
    exit_task(ctl, tasks[members[0]])
    again, client = restarted(tmp_path, clock, ctl)
    try:
        again.run_cycle()
        assert members[0] not in again.core.jobs  # forgotten: recalled from the store
        assert again.core.jobs[reducer].waiting_on == {arr}
        assert again.core.arrays.tallies[arr].unended == {members[1]}
        fallback = submit(client, QUARTER, dependencies=on("afternotok", arr))
        exit_task(again, tasks[members[1]])
        assert list(launched(again)) == [reducer]
        assert shown(client, fallback) == (
            "Cancelled",
            f"dependency {arr} (array): every member completed, afternotok can never be met",
        )
    finally:
        again.persist.close()


def test_a_member_that_failed_before_a_restart(tmp_path: Path, clock: Clock) -> None:
    ctl = one_node_controller(tmp_path, clock)
    client = TestClient(create_app(ctl), raise_server_exceptions=False)
    arr, members = array(client)
    reducer = submit(client, QUARTER, dependencies=on("afterok", arr))
    launched(ctl)
    # the store learned that member 0 failed; the controller stopped before it settled the
    # reducer (as a crash between the two would leave it)
    ctl.persist.job_finished(members[0], JobPhase.FAILED, 1, "exit 1", clock())
    ctl.persist.flush()
    again, client = restarted(tmp_path, clock, ctl)
    try:
        again.run_cycle()
        assert shown(client, reducer) == (
            "Cancelled",
            f"dependency {arr} (array): {members[0]} failed",
        )
    finally:
        again.persist.close()


def test_aftercorr_on_an_array_that_ended_before_a_restart(tmp_path: Path, clock: Clock) -> None:
    ctl = one_node_controller(tmp_path, clock)
    client = TestClient(create_app(ctl), raise_server_exceptions=False)
    arr, members = array(client)
    tasks = launched(ctl)
    exit_task(ctl, tasks[members[0]])
    exit_task(ctl, tasks[members[1]], 3)
    again, client = restarted(tmp_path, clock, ctl)
    try:
        assert not again.core.jobs  # every member forgotten
        _, posts = array(client, dependencies=on("aftercorr", arr))
        after_all = submit(client, QUARTER, dependencies=on("afterany", arr))
        assert set(launched(again)) == {posts[0], after_all}
        assert shown(client, posts[1]) == ("Cancelled", f"dependency {members[1]} did not succeed")
    finally:
        again.persist.close()


def test_a_restart_recovers_each_member_alone(
    tmp_path: Path, clock: Clock, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Each pending member is made from its array's request by its index: expanding the
    whole array for each member cost the square of its size (10,000 members: minutes)."""
    ctl = one_node_controller(tmp_path, clock)
    client = TestClient(create_app(ctl), raise_server_exceptions=False)
    arr, _ = array(client, array={"start": 0, "stop": 18, "step": 2})
    reducer = submit(client, QUARTER, dependencies=on("afterok", arr))
    launched(ctl)  # 4 of the 10 members run on n0's 4 CPUs
    monkeypatch.setattr(JobSpec, "expand_array", lambda spec: pytest.fail("expanded"))
    again, client = restarted(tmp_path, clock, ctl)
    try:
        again.run_cycle()
        pending = {j: r.spec.array_index for j, r in again.core.jobs.items() if j != reducer}
        assert pending == {f"{arr}_{i}": i for i in range(0, 19, 2)}
        assert again.core.jobs[reducer].waiting_on == {arr}
    finally:
        again.persist.close()


def test_an_array_is_read_from_the_store_once(
    tmp_path: Path, clock: Clock, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Jobs submitted after a restart on an array of before it: its ended members are read
    once, though the core takes that account only at its next cycle."""
    ctl = one_node_controller(tmp_path, clock)
    client = TestClient(create_app(ctl), raise_server_exceptions=False)
    arr, members = array(client)
    tasks = launched(ctl)
    exit_task(ctl, tasks[members[0]])
    exit_task(ctl, tasks[members[1]])
    again, client = restarted(tmp_path, clock, ctl)
    try:
        reads: list[str] = []
        store = again.persist.store
        read = store.member_phases
        monkeypatch.setattr(store, "member_phases", lambda *a: reads.append(a[0]) or read(*a))
        waiting = [submit(client, QUARTER, dependencies=on("afterok", arr)) for _ in range(3)]
        assert reads == [arr]
        assert set(launched(again)) == set(waiting)
    finally:
        again.persist.close()
