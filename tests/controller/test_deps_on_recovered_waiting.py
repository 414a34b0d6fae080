"""Dependencies on recovered jobs the core does not hold yet, and on those it does.

Past the node timeout a recovered job the nodes back so far cannot hold (a gang while n1 is
still away) waits, pending, outside the core (controller/recovery.py). A new job that
depends on it must be accepted and wait on it as on any other job: run once it succeeded,
be cancelled when it failed. In the window before, a new job whose dependencies name only
jobs the core holds need not wait for the window to close. Two nodes, n0 and n1; the agents
are played by hand."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
from tests.builders import Clock
from tests.controller.test_array_dependencies import QUARTER, array
from tests.controller.test_array_deps_restart_window import CONFIG, Cluster
from tests.controller.test_dependency_kinds import on, submit

from fusesched.api.wire import Heartbeat
from fusesched.model.events import JobSubmitted

#: a gang of two whole nodes: only n0 and n1 together hold it
BOTH = {"resources": {"cpu": "4"}, "argv": ["true"], "replicas": 2}


@pytest.fixture
def cluster(tmp_path: Path, clock: Clock) -> Iterator[Cluster]:
    made = Cluster(tmp_path, clock)
    yield made
    made.ctl.persist.close()


def _past_the_window(cluster: Cluster) -> None:
    """The node timeout passes with n1 still away: the window closes."""
    cluster.clock.now += CONFIG.node_timeout_s + 1
    cluster.ctl.heartbeat(Heartbeat(node="n0", running=[]), wait_s=0)
    cluster.ctl._check_nodes()


def _waiting_gang(cluster: Cluster) -> str:
    """A gang submitted held, recovered after a restart with n1 away: past the node timeout
    it waits outside the core for n1 (its id)."""
    gang = submit(cluster.client, BOTH, hold=True)
    cluster.restart()
    _past_the_window(cluster)
    return gang


def _all_exit(cluster: Cluster, code: int = 0) -> None:
    """Every task the nodes run exits with ``code``."""
    for task in {t.task_id for node in cluster.running.values() for t in node.values()}:
        cluster.exit(task, code)


def _waiting(cluster: Cluster) -> list[str]:
    return [e.job.id for e in cluster.ctl.waiting if isinstance(e, JobSubmitted)]


def test_a_dependent_of_a_recovered_job_waiting_for_nodes(cluster: Cluster) -> None:
    """It shows why it waits, as in the core (``Dependency``), and cannot be changed until
    it is queued: the refusal says for which job it waits."""
    gang = _waiting_gang(cluster)
    assert _waiting(cluster) == [gang]
    after = submit(cluster.client, QUARTER, dependencies=on("afterok", gang))
    assert cluster.launched() == {}
    assert cluster.state(after) == ("Pending", f"Dependency: job {gang}")
    refused = cluster.client.post(f"/v1/jobs/{after}/update", json={"priority": 1})
    assert refused.status_code == 409
    assert f"waits after a restart for job {gang}, which it depends on" in refused.text
    assert cluster.client.post(f"/v1/jobs/{gang}/release").status_code == 200
    cluster.back("n1")
    tasks = cluster.launched()
    assert list(tasks) == [gang]
    assert cluster.state(after)[0] == "Pending", cluster.state(after)
    _all_exit(cluster)
    assert list(cluster.launched()) == [after]


def test_a_dependent_of_a_waiting_job_is_cancelled_when_it_is(cluster: Cluster) -> None:
    """The gang is cancelled while it waits (it ends outside the core): ``afterok`` on it
    can never be met; ``afterany``, ``afternotok`` and ``after`` (it ended without starting)
    are, at once."""
    gang = _waiting_gang(cluster)
    after_ok = submit(cluster.client, QUARTER, dependencies=on("afterok", gang))
    after_any = submit(cluster.client, QUARTER, dependencies=on("afterany", gang))
    after_not_ok = submit(cluster.client, QUARTER, dependencies=on("afternotok", gang))
    after = submit(cluster.client, QUARTER, dependencies=on("after", gang))
    then = submit(cluster.client, QUARTER, dependencies=on("afterok", after_ok))
    assert cluster.launched() == {}
    cluster.ctl.cancel(gang)
    assert set(cluster.launched()) == {after_any, after_not_ok, after}
    assert cluster.state(after_ok) == ("Cancelled", f"dependency {gang} ended cancelled")
    assert cluster.state(then) == ("Cancelled", f"dependency {after_ok} ended cancelled")


def test_a_recovered_dependent_of_a_recovered_gang_waits_for_it(cluster: Cluster) -> None:
    """Both waited before the restart: the gang is handed back but still waits to fit past
    the node timeout; its dependent, recovered after it, must wait on it, not be cancelled
    as depending on an unknown job."""
    gang = submit(cluster.client, BOTH, hold=True)
    after = submit(cluster.client, QUARTER, dependencies=on("afterok", gang))
    cluster.restart()
    _past_the_window(cluster)
    assert cluster.launched() == {}
    assert cluster.state(after)[0] == "Pending", cluster.state(after)
    cluster.back("n1")
    assert cluster.client.post(f"/v1/jobs/{gang}/release").status_code == 200
    assert list(cluster.launched()) == [gang]
    _all_exit(cluster, 1)
    assert cluster.launched() == {}
    assert cluster.state(after) == ("Cancelled", f"dependency {gang} ended failed")


def test_a_dependent_submitted_in_the_window_of_a_gang_that_then_waits(
    cluster: Cluster,
) -> None:
    """Submitted while the gang is held with the recovered jobs, the dependent is behind it
    when the node timeout hands the gang back and the gang still waits to fit."""
    gang = submit(cluster.client, BOTH, hold=True)
    cluster.restart()
    assert cluster.ctl.held
    after = submit(cluster.client, QUARTER, dependencies=on("afterany", gang))
    _past_the_window(cluster)
    assert set(_waiting(cluster)) == {gang, after}
    assert cluster.launched() == {}
    assert cluster.state(after)[0] == "Pending", cluster.state(after)
    cluster.ctl.cancel(gang)
    assert list(cluster.launched()) == [after]


def test_an_array_waiting_behind_a_gang_is_cancelled_whole(cluster: Cluster) -> None:
    """An array submitted as one behind the waiting gang: cancelling it ends its members
    at once; cancelling one member ends it at once too, and leaves the others to run after
    the gang."""
    gang = _waiting_gang(cluster)
    whole, whole_members = array(cluster.client, dependencies=on("afterany", gang))
    part, part_members = array(cluster.client, dependencies=on("afterany", gang))
    cluster.ctl.cancel(part_members[0])
    assert cluster.state(part_members[0]) == ("Cancelled", "cancelled by user")
    cluster.ctl.cancel(whole)
    assert [cluster.state(m)[0] for m in whole_members] == ["Cancelled", "Cancelled"]
    cluster.ctl.cancel(gang)
    assert list(cluster.launched()) == [part_members[1]]
    assert cluster.state(part_members[0]) == ("Cancelled", "cancelled by user")
    assert whole not in cluster.ctl.jobs and part == part_members[0].split("_")[0]


def test_a_member_cancelled_in_a_waiting_array_stays_so_over_a_restart(cluster: Cluster) -> None:
    """The member's cancel is stored at once: the controller restarting again before the
    array reaches the core does not run it after all."""
    gang = _waiting_gang(cluster)
    _, members = array(cluster.client, dependencies=on("afterany", gang))
    cluster.ctl.cancel(members[0])
    cluster.restart()
    _past_the_window(cluster)
    cluster.ctl.cancel(gang)
    assert list(cluster.launched()) == [members[1]]
    assert cluster.state(members[0]) == ("Cancelled", "cancelled by user")


def test_a_dependent_of_a_whole_array_cancelled_while_it_waited(cluster: Cluster) -> None:
    """The array (submitted as one behind the gang) is cancelled outside the core after its
    dependents were submitted: the core, told of the array then with no member ended, is
    told of the cancelled members, and does not wait for them for ever."""
    gang = _waiting_gang(cluster)
    arr, members = array(cluster.client, dependencies=on("afterany", gang))
    after_ok = submit(cluster.client, QUARTER, dependencies=on("afterok", arr))
    after_any = submit(cluster.client, QUARTER, dependencies=on("afterany", arr))
    cluster.ctl.cancel(arr)
    assert list(cluster.launched()) == [after_any]
    assert cluster.state(after_ok) == (
        "Cancelled",
        f"dependency {arr} (array): {members[0]} cancelled",
    )


def test_aftercorr_on_a_member_cancelled_while_its_array_waited(cluster: Cluster) -> None:
    """One member of an array waiting as one is cancelled: the others wait on one by one,
    and the core, told of the cancelled one, cancels its ``aftercorr`` partner only."""
    gang = _waiting_gang(cluster)
    arr, members = array(cluster.client, dependencies=on("afterany", gang))
    _, partners = array(cluster.client, dependencies=on("aftercorr", arr))
    cluster.ctl.cancel(members[0])
    cluster.ctl.cancel(gang)
    tasks = cluster.launched()
    assert list(tasks) == [members[1]]
    assert cluster.state(partners[0]) == ("Cancelled", f"dependency {members[0]} did not succeed")
    cluster.exit(tasks[members[1]])
    assert list(cluster.launched()) == [partners[1]]


def test_a_recovered_singleton_array_runs_one_member_at_a_time(cluster: Cluster) -> None:
    """Its members, submitted together, are namesakes of one another: each waits only on
    those before it, not every one behind the others for ever."""
    arr, members = array(cluster.client, name="only", hold=True, dependencies=on("singleton", ""))
    cluster.restart()
    cluster.back("n1")
    assert cluster.client.post(f"/v1/jobs/{arr}/release").status_code == 200
    tasks = cluster.launched()
    assert list(tasks) == [members[0]]
    cluster.exit(tasks[members[0]])
    assert list(cluster.launched()) == [members[1]]


# ================================== in the window: only what names a job outside the core waits


def test_a_dependent_on_a_job_the_core_holds_runs_in_the_window(cluster: Cluster) -> None:
    """The window is open (a job waits, held, for n1), but the job the new one depends on
    was adopted on n0's return: it need not wait for the window to close."""
    first = submit(cluster.client, QUARTER)
    task = cluster.launched()[first]
    submit(cluster.client, BOTH, hold=True)  # (waits for n1: the window stays open)
    cluster.restart()
    assert cluster.ctl.held and first in cluster.ctl.core.jobs
    second = submit(cluster.client, QUARTER, dependencies=on("afterok", first))
    cluster.exit(task)
    assert list(cluster.launched()) == [second]
    assert cluster.ctl.held  # (n1 is still away)
