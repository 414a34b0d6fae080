"""Dependencies on a whole job array in the window right after a controller restart: before
all the nodes are back the recovered waiting jobs are held (controller/recovery.py), and so,
until then, is what the core is told of the array's members that ended before the restart
(:class:`~fusesched.model.events.ArrayRecalled`). A dependent submitted in that window, and
members that end in it, must still be decided as without the restart: the dependent runs
once every member completed (``afterok``), or is cancelled when one failed. Two nodes: n0
runs the array (first fit) and comes back first; n1 is still away. The agents are played
by hand."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
from fastapi.testclient import TestClient
from tests.builders import Clock
from tests.controller.conftest import ONE_NODE
from tests.controller.test_array_dependencies import QUARTER, array, shown
from tests.controller.test_dependency_kinds import on, submit

from fusesched.api.app import create_app
from fusesched.api.wire import Heartbeat, NodeInventory, TaskLaunch, TaskReport, TaskState
from fusesched.controller.logs import LogStore
from fusesched.controller.persist import Persistence
from fusesched.controller.records import ControllerConfig
from fusesched.controller.service import Controller
from fusesched.model.events import JobSubmitted
from fusesched.policies.registry import CoreConfig

#: First fit: the array's members go to n0 (registered first) while it has room.
CONFIG = ControllerConfig(core=CoreConfig(placement="first-fit"), node_timeout_s=30.0)


def _inventory(name: str, running: list[TaskLaunch] | None = None) -> NodeInventory:
    return NodeInventory.model_validate({**ONE_NODE, "name": name, "running": running or []})


class Cluster:
    """A controller on one store with nodes n0 and n1, their agents played by hand."""

    def __init__(self, path: Path, clock: Clock) -> None:
        self.path, self.clock = path, clock
        self.ctl = self._start()
        self.ctl.register(_inventory("n0"))
        self.ctl.register(_inventory("n1"))
        self.client = TestClient(create_app(self.ctl), raise_server_exceptions=False)
        self.running: dict[str, dict[str, TaskLaunch]] = {"n0": {}, "n1": {}}  # node's tasks

    def _start(self) -> Controller:
        persist = Persistence(f"sqlite:///{self.path / 'db.sqlite'}")
        return Controller(persist, LogStore(self.path / "logs"), CONFIG, clock=self.clock)

    def launched(self) -> dict[str, str]:
        """A cycle; what the nodes back are told to start (job id → task id)."""
        self.ctl.run_cycle()
        started: dict[str, str] = {}
        for node in self.ctl.nodes:
            beat = Heartbeat(node=node, running=list(self.running[node]))
            for launch in self.ctl.heartbeat(beat, wait_s=0).launch:
                self.running[node][launch.task_id] = launch
                started[launch.job_id] = launch.task_id
        return started

    def exit(self, task: str, code: int = 0) -> None:
        """``task`` exits with ``code``; a cycle runs."""
        node = next(n for n, tasks in self.running.items() if task in tasks)
        del self.running[node][task]
        report = TaskReport(task_id=task, state=TaskState.EXITED, exit_code=code)
        beat = Heartbeat(node=node, reports=[report], running=list(self.running[node]))
        self.ctl.heartbeat(beat, wait_s=0)
        self.ctl.run_cycle()

    def restart(self, back: str = "n0") -> None:
        """The controller restarts; only ``back`` comes back (with the tasks it still
        runs): the waiting jobs recovered stay held until the other is back or the node
        timeout has passed, the running ones wait for their node."""
        self.ctl.persist.close()
        self.ctl = self._start()
        self.back(back)
        self.client = TestClient(create_app(self.ctl), raise_server_exceptions=False)
        self.ctl.run_cycle()

    def back(self, node: str) -> None:
        """``node``'s agent registers, listing the tasks it still runs."""
        self.ctl.register(_inventory(node, list(self.running[node].values())))

    def state(self, job: str) -> tuple[str, str]:
        return shown(self.client, job)


@pytest.fixture
def cluster(tmp_path: Path, clock: Clock) -> Iterator[Cluster]:
    made = Cluster(tmp_path, clock)
    yield made
    made.ctl.persist.close()


def _half_done(cluster: Cluster) -> tuple[str, list[str], dict[str, str]]:
    """An array of three members on n0, the first completed, two still running. (array id,
    members, member → task id)"""
    arr, members = array(cluster.client, stop=2)
    tasks = cluster.launched()
    assert set(tasks) == set(members)
    cluster.exit(tasks[members[0]])
    return arr, members, tasks


def test_a_recovered_reducer_runs_once_the_members_end_in_the_window(cluster: Cluster) -> None:
    arr, members = array(cluster.client, stop=2)
    reducer = submit(cluster.client, QUARTER, dependencies=on("afterok", arr))
    tasks = cluster.launched()
    assert set(tasks) == set(members)
    cluster.exit(tasks[members[0]])
    cluster.restart()
    assert cluster.ctl.held  # (the reducer waits for n1)
    cluster.exit(tasks[members[1]])  # (adopted on n0's return: its end is the core's)
    cluster.exit(tasks[members[2]])
    assert cluster.state(reducer)[0] == "Pending"
    cluster.back("n1")  # the held jobs go to the core
    assert list(cluster.launched()) == [reducer]


def test_a_recovered_reducer_is_cancelled_by_a_member_failing_in_the_window(
    cluster: Cluster,
) -> None:
    arr, members = array(cluster.client, stop=2)
    reducer = submit(cluster.client, QUARTER, dependencies=on("afterok", arr))
    fallback = submit(cluster.client, QUARTER, dependencies=on("afternotok", arr))
    tasks = cluster.launched()
    cluster.exit(tasks[members[0]])
    cluster.restart()
    cluster.exit(tasks[members[1]], 3)
    cluster.back("n1")
    cluster.ctl.run_cycle()
    assert cluster.state(reducer) == ("Cancelled", f"dependency {arr} (array): {members[1]} failed")
    assert cluster.state(fallback)[0] == "Pending"  # until every member ended
    cluster.exit(tasks[members[2]])
    assert list(cluster.launched()) == [fallback]


def test_a_dependent_submitted_in_the_window_waits_for_the_array(cluster: Cluster) -> None:
    """No job waiting before the restart depends on the array: the dependent submitted
    right after it, before any member's event, is the first to recall the array."""
    arr, members, tasks = _half_done(cluster)
    cluster.restart()
    reducer = submit(cluster.client, QUARTER, dependencies=on("afterok", arr))
    assert cluster.launched() == {}
    assert cluster.state(reducer)[0] == "Pending"
    cluster.exit(tasks[members[1]])
    assert cluster.launched() == {}
    cluster.exit(tasks[members[2]])
    assert list(cluster.launched()) == [reducer]


def test_a_dependent_submitted_in_the_window_beside_a_recovered_one(cluster: Cluster) -> None:
    """A job waiting before the restart recalled the array already (held with it): one
    submitted in the window must not find the array unknown."""
    arr, members = array(cluster.client, stop=2)
    recovered = submit(cluster.client, QUARTER, dependencies=on("afterok", arr))
    tasks = cluster.launched()
    cluster.exit(tasks[members[0]])
    cluster.restart()
    answer = cluster.client.post(
        "/v1/jobs", json={"groups": [QUARTER], "dependencies": on("afternotok", arr)}
    )
    assert answer.status_code == 201, answer.text
    fallback = str(answer.json()["id"])
    cluster.ctl.run_cycle()
    assert cluster.state(fallback)[0] == "Pending", cluster.state(fallback)
    cluster.exit(tasks[members[1]])
    cluster.exit(tasks[members[2]], 1)
    cluster.back("n1")
    cluster.ctl.run_cycle()
    assert cluster.state(recovered) == (
        "Cancelled",
        f"dependency {arr} (array): {members[2]} failed",
    )
    assert list(cluster.launched()) == [fallback]


def test_a_dependent_submitted_in_the_window_of_a_finished_array(cluster: Cluster) -> None:
    """Every member ended before the restart, one failed: a dependent submitted in the
    window is decided at once (``afterok`` cancelled, ``afterany`` run)."""
    arr, members, tasks = _half_done(cluster)
    cluster.exit(tasks[members[1]], 2)
    cluster.exit(tasks[members[2]])
    cluster.restart()
    reducer = submit(cluster.client, QUARTER, dependencies=on("afterok", arr))
    after_all = submit(cluster.client, QUARTER, dependencies=on("afterany", arr))
    assert after_all in cluster.launched()
    assert cluster.state(reducer) == ("Cancelled", f"dependency {arr} (array): {members[1]} failed")


def test_a_dependent_submitted_in_the_window_while_no_member_is_back(cluster: Cluster) -> None:
    """Member 0 completed before the restart, the others wait, held (so the core holds no
    member of the array until the held jobs go to it): a dependent submitted in the window,
    beside one recovered, must wait for the array, not find it unknown."""
    arr, members = array(cluster.client, stop=2, hold=True)
    recovered = submit(cluster.client, QUARTER, dependencies=on("afterok", arr))
    assert cluster.client.post(f"/v1/jobs/{members[0]}/release").status_code == 200
    tasks = cluster.launched()
    assert list(tasks) == [members[0]]
    cluster.exit(tasks[members[0]])
    cluster.restart()
    assert cluster.ctl.held  # (the waiting jobs wait for n1)
    reducer = submit(cluster.client, QUARTER, dependencies=on("afterok", arr))
    cluster.ctl.run_cycle()
    assert cluster.state(reducer)[0] == "Pending", cluster.state(reducer)
    cluster.back("n1")
    cluster.ctl.run_cycle()
    for member in members[1:]:
        assert cluster.client.post(f"/v1/jobs/{member}/release").status_code == 200
    tasks = cluster.launched()
    assert set(tasks) == set(members[1:])
    cluster.exit(tasks[members[1]])
    cluster.exit(tasks[members[2]])
    assert set(cluster.launched()) == {recovered, reducer}


# ============================================================ not only arrays: any dependency


def test_a_dependent_on_a_recovered_waiting_job_submitted_in_the_window(cluster: Cluster) -> None:
    first = submit(cluster.client, QUARTER, hold=True)
    cluster.restart()
    assert cluster.ctl.held
    second = submit(cluster.client, QUARTER, dependencies=on("afterok", first))
    cluster.ctl.run_cycle()
    assert cluster.state(second)[0] == "Pending", cluster.state(second)
    cluster.back("n1")
    assert cluster.client.post(f"/v1/jobs/{first}/release").status_code == 200
    task = cluster.launched()[first]
    cluster.exit(task)
    assert list(cluster.launched()) == [second]


def test_a_dependent_on_a_job_still_waiting_for_adoption(cluster: Cluster) -> None:
    """The job runs on n0, which is not back yet (n1 is): the core does not hold it until
    it is adopted; a job submitted meanwhile that depends on it waits for it."""
    first = submit(cluster.client, QUARTER)
    task = cluster.launched()[first]
    cluster.restart(back="n1")
    second = submit(cluster.client, QUARTER, dependencies=on("afterok", first))
    cluster.ctl.run_cycle()
    assert cluster.state(second)[0] == "Pending", cluster.state(second)
    cluster.back("n0")
    cluster.ctl.run_cycle()
    assert cluster.state(first)[0] == "Running"
    cluster.exit(task)
    assert list(cluster.launched()) == [second]


def test_a_singleton_submitted_in_the_window_waits_for_its_namesake(cluster: Cluster) -> None:
    """Only for it: a singleton of another name need not wait for the window to close."""
    first = submit(cluster.client, QUARTER, name="only", hold=True)
    cluster.restart()
    other = submit(cluster.client, QUARTER, name="other", dependencies=on("singleton", ""))
    second = submit(cluster.client, QUARTER, name="only", dependencies=on("singleton", ""))
    assert list(cluster.launched()) == [other]
    cluster.back("n1")
    assert cluster.client.post(f"/v1/jobs/{first}/release").status_code == 200
    tasks = cluster.launched()
    assert list(tasks) == [first]
    cluster.exit(tasks[first])
    assert list(cluster.launched()) == [second]


def test_a_cancel_in_the_window_is_not_lost(cluster: Cluster) -> None:
    """The core does not hold the jobs held in the window yet: their cancel waits with them
    (it was refused by the core, and the jobs ran after all)."""
    first = submit(cluster.client, QUARTER, hold=True)
    cluster.restart()
    second = submit(cluster.client, QUARTER, dependencies=on("afterany", first))
    cluster.ctl.cancel(first)
    cluster.ctl.run_cycle()
    cluster.back("n1")
    assert list(cluster.launched()) == [second]  # (afterany: its dependency's end)
    assert cluster.state(first) == ("Cancelled", "cancelled by user")
    third = submit(cluster.client, QUARTER, hold=True)
    cluster.restart()
    fourth = submit(cluster.client, QUARTER, dependencies=on("afterok", third))
    cluster.ctl.cancel(fourth)
    cluster.back("n1")
    cluster.ctl.run_cycle()
    assert cluster.state(fourth) == ("Cancelled", "cancelled by user")


def test_a_cancel_of_a_job_waiting_for_nodes_ends_it(cluster: Cluster) -> None:
    """Held past the node timeout, a recovered job the nodes back so far cannot hold (n1 is
    still away) waits for them; cancelled meanwhile, it ends cancelled, not refused."""
    both = {"resources": {"cpu": "4"}, "argv": ["true"], "replicas": 2}
    first = submit(cluster.client, both, hold=True)
    cluster.restart()
    cluster.clock.now += CONFIG.node_timeout_s + 1
    cluster.ctl.heartbeat(Heartbeat(node="n0", running=[]), wait_s=0)
    cluster.ctl._check_nodes()
    waiting = cluster.ctl.waiting
    assert [e.job.id for e in waiting if isinstance(e, JobSubmitted)] == [first]
    cluster.ctl.cancel(first)
    cluster.ctl.run_cycle()
    assert cluster.state(first) == ("Cancelled", "cancelled by user")
    assert not cluster.ctl.waiting and first not in cluster.ctl.jobs


def test_an_array_submitted_held_in_the_window_stays_held(cluster: Cluster) -> None:
    first = submit(cluster.client, QUARTER, hold=True)
    cluster.restart()
    arr, members = array(cluster.client, hold=True, dependencies=on("afterany", first))
    cluster.back("n1")
    cluster.ctl.run_cycle()
    assert all(cluster.state(m) == ("Pending", "held: submitted held") for m in members), arr


def test_a_job_submitted_held_in_the_window_and_released_in_it_is_not_held(
    cluster: Cluster,
) -> None:
    """Its hold goes to the core as it stands when the window closes: released meanwhile,
    none (the hold of its submission must not outlive the release)."""
    first = submit(cluster.client, QUARTER, hold=True)
    cluster.restart()
    second = submit(cluster.client, QUARTER, hold=True, dependencies=on("afterany", first))
    assert cluster.client.post(f"/v1/jobs/{second}/release").status_code == 200
    cluster.ctl.cancel(first)
    cluster.back("n1")
    assert list(cluster.launched()) == [second], cluster.state(second)


def test_a_member_of_an_array_submitted_in_the_window_held_in_it_stays_held(
    cluster: Cluster,
) -> None:
    """The array went to the window as one submission: a member held meanwhile is held once
    the core has the array."""
    first = submit(cluster.client, QUARTER, hold=True)
    cluster.restart()
    _, members = array(cluster.client, dependencies=on("afterany", first))
    held = cluster.client.post(f"/v1/jobs/{members[0]}/hold", json={"reason": "later"})
    assert held.status_code == 200, held.text
    cluster.ctl.cancel(first)
    cluster.back("n1")
    assert list(cluster.launched()) == [members[1]]
    assert cluster.state(members[0]) == ("Pending", "held: later")
