"""Jobs left running or waiting by a previous controller, and the jobs that depend on them,
once more (see tests/controller/test_deps_on_recovered_waiting.py): a ``--no-requeue`` job
whose node does not come back fails as not requeued, whatever its own dependencies were;
``after`` on a job waiting to be adopted (it had started) is met at once; a dependent
released from a hold while it still waits outside the core says for which job it waits;
holding or releasing an array reads the jobs held back once. Two nodes, n0 and n1; the
agents are played by hand."""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import replace
from pathlib import Path

from tests.builders import Clock
from tests.controller import test_deps_on_recovered_waiting as waiting_tests
from tests.controller.test_array_dependencies import QUARTER, array
from tests.controller.test_array_deps_restart_window import CONFIG, Cluster
from tests.controller.test_array_deps_restart_window import _inventory as inventory
from tests.controller.test_dependency_kinds import on, submit
from tests.controller.test_deps_on_recovered_waiting import _waiting, _waiting_gang

from fusesched.api.wire import Heartbeat
from fusesched.backends.base import RemoteNode, RemoteState, RemoteStatus
from fusesched.backends.federation_config import parse_federation
from fusesched.controller.logs import LogStore
from fusesched.controller.persist import Persistence
from fusesched.controller.remote import Update
from fusesched.controller.service import Controller
from fusesched.model.events import Event, JobSubmitted
from fusesched.model.resources import CPU, Resources
from fusesched.submit.request import JobRequest

NOT_REQUEUED = "not requeued (--no-requeue)"
cluster = waiting_tests.cluster  # (the fixture)


def _timeout(cluster: Cluster, back: str) -> None:
    """The node timeout passes with only ``back`` heard from."""
    cluster.clock.now += CONFIG.node_timeout_s + 1
    cluster.ctl.heartbeat(Heartbeat(node=back, running=[]), wait_s=0)
    cluster.ctl._check_nodes()
    cluster.ctl.run_cycle()


def test_a_no_requeue_job_whose_node_is_gone_fails_despite_its_dependencies(
    cluster: Cluster,
) -> None:
    """It depended on a job that ended before the restart (which the restarted core never
    had): it fails as not requeued, as Slurm's NODE_FAIL, not cancelled as depending on an
    unknown job; what waits on it settles from that."""
    first = submit(cluster.client, QUARTER)
    cluster.exit(cluster.launched()[first])
    job = submit(cluster.client, QUARTER, requeue=False, dependencies=on("afterok", first))
    assert list(cluster.launched()) == [job]  # (on n0: first fit)
    ok = submit(cluster.client, QUARTER, dependencies=on("afterok", job))
    not_ok = submit(cluster.client, QUARTER, dependencies=on("afternotok", job))
    cluster.restart(back="n1")  # n0 never comes back
    assert cluster.ctl.jobs[job].adopting
    _timeout(cluster, "n1")
    why = f"NodeDown: a node of it did not come back after a controller restart; {NOT_REQUEUED}"
    assert cluster.state(job) == ("Failed", why)
    assert list(cluster.launched()) == [not_ok]
    assert cluster.state(ok) == ("Cancelled", f"dependency {job} ended failed")


def test_after_on_a_job_waiting_to_be_adopted_is_met_at_once(cluster: Cluster) -> None:
    """The job ran before the restart and waits for its node (n0) to be adopted: ``after``
    on it (start) is met, the new job runs on n1 now; ``afterok`` on it waits."""
    job = submit(cluster.client, QUARTER)
    assert list(cluster.launched()) == [job]
    cluster.restart(back="n1")
    assert cluster.ctl.jobs[job].adopting
    after = submit(cluster.client, QUARTER, dependencies=on("after", job))
    after_ok = submit(cluster.client, QUARTER, dependencies=on("afterok", job))
    assert _waiting(cluster) == [after_ok]
    assert list(cluster.launched()) == [after]


def test_a_dependent_released_while_it_waits_says_for_which_job(cluster: Cluster) -> None:
    """Submitted held behind the waiting gang, then released: it still waits outside the
    core, and says so as the others there do, not ``released``."""
    gang = _waiting_gang(cluster)
    after = submit(cluster.client, QUARTER, hold=True, dependencies=on("afterok", gang))
    _, members = array(cluster.client, hold=True, dependencies=on("afterany", gang))
    assert cluster.state(after)[0] == "Pending"
    assert cluster.client.post(f"/v1/jobs/{after}/release").status_code == 200
    assert cluster.client.post(f"/v1/jobs/{members[0].split('_')[0]}/release").status_code == 200
    for job in (after, *members):
        assert cluster.state(job) == ("Pending", f"Dependency: job {gang}"), job
    cluster.ctl.cancel(gang)
    assert set(cluster.launched()) == set(members)
    assert cluster.state(after) == ("Cancelled", f"dependency {gang} ended cancelled")


class _Reads(list[Event]):
    """A list that counts how often it is read whole."""

    reads = 0

    def __iter__(self) -> Iterator[Event]:
        self.reads += 1
        return super().__iter__()


def test_holding_and_releasing_an_array_reads_the_held_back_jobs_once(cluster: Cluster) -> None:
    """An array of four members waits behind the gang: holding it, and releasing it, reads
    the jobs waiting outside the core once, not once per member."""
    gang = _waiting_gang(cluster)
    arr, members = array(cluster.client, stop=3, dependencies=on("afterany", gang))
    assert len(members) == 4 and set(_waiting(cluster)) == {gang, arr}
    for verb in ("hold", "release"):
        cluster.ctl.waiting = reads = _Reads(cluster.ctl.waiting)
        answer = cluster.client.post(f"/v1/jobs/{arr}/{verb}", json={"reason": "wait"})
        assert answer.status_code == 200, answer.text
        assert reads.reads <= 2, verb  # (release: what they wait for, read once too)
    assert cluster.state(members[3]) == ("Pending", f"Dependency: job {gang}")
    cluster.ctl.cancel(gang)
    assert set(cluster.launched()) == set(members)


def test_a_dependent_of_a_job_an_external_cluster_runs_goes_once_it_is_adopted(
    tmp_path: Path, clock: Clock
) -> None:
    """Pool ``p``'s cluster runs the job (on c1, the only node then); after a restart the
    job waits for the pool's nodes to be listed, and a new ``afterok`` dependent waits
    behind it. The listing that adopts the job lets the dependent go to the core too, not
    one listing later."""
    fed = parse_federation({"pools": [{"name": "p", "kind": "slurm"}], "default": ["p", "local"]})
    config = replace(CONFIG, federation=fed, pools_dir=tmp_path / "pools")
    logs, url = LogStore(tmp_path / "logs"), f"sqlite:///{tmp_path / 'db.sqlite'}"
    listed = Update("nodes", "p", nodes=(RemoteNode("c1", Resources({CPU: 4000})),))
    ctl = Controller(Persistence(url), logs, config, clock=clock)
    ctl.remote_update([listed])
    (job,) = ctl.submit([JobRequest.model_validate({"groups": [QUARTER]})])
    ctl.run_cycle()
    (task,) = ctl.jobs[job].tasks
    running = RemoteStatus("100", RemoteState.RUNNING, start_time=clock.now)
    ctl.remote_update([Update("submitted", "p", task_id=task, external_id="100")])
    ctl.remote_update([Update("status", "p", task_id=task, status=running)])
    ctl.persist.close()
    again = Controller(Persistence(url), logs, config, clock=clock)
    try:
        assert again.jobs[job].adopting
        again.register(inventory("n0"))  # (a local node: the dependent may go there)
        request = JobRequest.model_validate(
            {"groups": [QUARTER], "dependencies": on("afterok", job)}
        )
        (after,) = again.submit([request])
        assert [e.job.id for e in again.waiting if isinstance(e, JobSubmitted)] == [after]
        again.remote_update([listed])
        assert not again.jobs[job].adopting and again.waiting == []
        again.run_cycle()
        assert after in again.core.jobs and job in again.core.jobs
    finally:
        again.persist.close()
