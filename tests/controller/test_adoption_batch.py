"""A batch job over several nodes left running by a controller that restarts: the new one
adopts it only once all its nodes are back, with its nodes and task slots rebuilt from the
hostfile its agent reports (the script's task runs on the first node only), booked in the
core so that nothing else lands there; a node that does not come back in time gets the job
requeued. The agents are played by hand."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
from tests.builders import Clock
from tests.controller.conftest import ONE_NODE

from fusesched.api.wire import Heartbeat, NodeInventory, TaskLaunch, TaskReport, TaskState
from fusesched.controller.logs import LogStore
from fusesched.controller.persist import Persistence
from fusesched.controller.remote_tasks import check_remote_node
from fusesched.controller.service import Controller
from fusesched.model.node import NodeState
from fusesched.model.phases import JobPhase
from fusesched.submit.errors import SubmitError
from fusesched.submit.sbatch import parse_sbatch

SCRIPT = "#!/bin/sh\nsleep 100\n"


def inventory(name: str, running: list[TaskLaunch] | None = None) -> NodeInventory:
    return NodeInventory.model_validate({**ONE_NODE, "name": name, "running": running or []})


def controller(path: Path, clock: Clock) -> Controller:
    return Controller(
        Persistence(f"sqlite:///{path / 'db.sqlite'}"), LogStore(path / "logs"), clock=clock
    )


@pytest.fixture
def left_running(tmp_path: Path, clock: Clock) -> Iterator[tuple[str, TaskLaunch]]:
    """``sbatch -N 2 --ntasks-per-node=4`` (both nodes' 4 CPUs) running its script on n0,
    and a controller that stopped without a word."""
    ctl = controller(tmp_path, clock)
    ctl.register(inventory("n0"))
    ctl.register(inventory("n1"))
    request = parse_sbatch(SCRIPT, args=["-N", "2", "--ntasks-per-node=4"]).request
    (job,) = ctl.submit([request])
    ctl.run_cycle()
    (launch,) = ctl.heartbeat(Heartbeat(node="n0", running=[]), wait_s=0).launch
    assert not ctl.heartbeat(Heartbeat(node="n1", running=[]), wait_s=0).launch
    report = TaskReport(task_id=launch.task_id, state=TaskState.RUNNING, pid=7)
    ctl.heartbeat(Heartbeat(node="n0", running=[launch.task_id], reports=[report]), wait_s=0)
    ctl.persist.close()
    yield job, launch


def test_the_job_waits_for_all_its_nodes_then_holds_them_all(
    tmp_path: Path, clock: Clock, left_running: tuple[str, TaskLaunch]
) -> None:
    job, launch = left_running
    assert "fusesched.hostfile" in launch.files
    again = controller(tmp_path, clock)
    try:
        again.register(inventory("n0", [launch]))  # the script's node is back first
        again.run_cycle()
        assert again.nodes["n0"].state is NodeState.DRAINING
        live = again.jobs[job]
        assert live.adopting  # n1 is not back: no size check against half a cluster
        assert again.core.jobs.get(job) is None
        with pytest.raises(SubmitError, match="waits to be adopted after a controller restart"):
            check_remote_node(again, live, "n1")  # (a step of it: not yet)
        again.register(inventory("n1"))
        assert not live.adopting and live.nodes == ("n0", "n1")
        again.run_cycle()
        assert again.core.jobs[job].phase is JobPhase.RUNNING
        assert {n.state for n in again.nodes.values()} == {NodeState.UP}
        # both nodes' CPUs are the job's: a one-CPU job waits
        (other,) = again.submit([parse_sbatch(SCRIPT, args=["-n", "1"]).request])
        again.run_cycle()
        assert again.core.jobs[other].phase is JobPhase.QUEUED
        check_remote_node(again, live, "n1")  # a step of it may run there now (srun)
    finally:
        again.persist.close()


def test_a_node_not_back_in_time_gets_the_job_requeued(
    tmp_path: Path, clock: Clock, left_running: tuple[str, TaskLaunch]
) -> None:
    job, launch = left_running
    again = controller(tmp_path, clock)
    try:
        again.register(inventory("n0", [launch]))
        assert again.nodes["n0"].state is NodeState.DRAINING
        clock.now += again.config.node_timeout_s + 1
        again.heartbeat(Heartbeat(node="n0", running=[launch.task_id]), wait_s=0)
        again._check_nodes()
        live = again.jobs[job]
        assert not live.adopting and not live.tasks and live.nodes == ()
        assert again.tasks.get(launch.task_id) is None
        kills = again.heartbeat(Heartbeat(node="n0", running=[launch.task_id]), wait_s=0).kill
        assert launch.task_id in {k.task_id for k in kills}
        assert again.nodes["n0"].state is NodeState.DRAINING  # (until it is gone)
        again.heartbeat(Heartbeat(node="n0", running=[]), wait_s=0)
        again.run_cycle()
        assert again.nodes["n0"].state is NodeState.UP
    finally:
        again.persist.close()


HET = "#!/bin/sh\n#SBATCH -n 1\n#SBATCH hetjob\n#SBATCH -n 4\nsleep 100\n"


def test_a_heterogeneous_job_holds_every_component_s_slots(tmp_path: Path, clock: Clock) -> None:
    ctl = controller(tmp_path, clock)
    for name in ("n0", "n1"):
        ctl.register(inventory(name))
    (job,) = ctl.submit([parse_sbatch(HET).request])
    ctl.run_cycle()
    nodes = ctl.jobs[job].nodes
    launches = {n: ctl.heartbeat(Heartbeat(node=n, running=[]), wait_s=0).launch for n in nodes}
    ((node, (launch,)),) = [(n, got) for n, got in launches.items() if got]
    assert "fusesched.het1.hostfile" in launch.files
    ctl.persist.close()
    again = controller(tmp_path, clock)
    try:
        again.register(inventory(node, [launch]))
        for other in {"n0", "n1"} - {node}:
            again.register(inventory(other))
        again.run_cycle()
        live = again.jobs[job]
        assert not live.adopting and set(live.nodes) == set(nodes)
        free = again.core.cluster.free[:, again.core.cluster.columns["cpu"]]
        assert int(free.sum()) == 3000  # 8 CPUs less component 0's one and component 1's four
    finally:
        again.persist.close()
