"""Adoption: a restarted controller's running jobs booked where their tasks run."""

from __future__ import annotations

from builders import job, node
from fusesched.core.scheduler import SchedulerCore
from fusesched.model.events import (
    AdoptedTask,
    JobAdopted,
    JobExited,
    JobSubmitted,
    NodeAdded,
    StartJob,
    StopJob,
)
from fusesched.model.phases import JobPhase
from fusesched.policies.registry import CoreConfig


def cluster() -> SchedulerCore:
    core = SchedulerCore(CoreConfig(backfill="none"))
    core.handle(NodeAdded(node("n0").cpu(8).gpu(4).build()), 0.0)
    core.handle(NodeAdded(node("n1").cpu(8).build()), 0.0)
    return core


def test_an_adopted_job_keeps_its_exact_gpus_and_resources() -> None:
    core = cluster()
    spec = job("old").tasks(1, cpu=4, gpu=2).at(0).build()
    out = core.step(100, [JobAdopted(spec, (AdoptedTask("main", "n0", (1, 3)),), 50.0)])
    assert out == []
    rec = core.jobs["old"]
    assert rec.phase is JobPhase.RUNNING and rec.start_time == 50.0
    # a new 2-GPU job gets the two GPUs the adopted one does not hold
    out = core.step(101, [JobSubmitted(job("new").tasks(1, cpu=4, gpu=2).at(101).build())])
    start = next(d for d in out if isinstance(d, StartJob))
    devices = start.groups[0].devices
    assert devices is not None
    assert devices.tasks[0].indices == (0, 2)
    # nothing else fits on n0 now: its CPUs are taken too
    out = core.step(102, [JobSubmitted(job("more").tasks(1, cpu=1, gpu=1).at(102).build())])
    assert not [d for d in out if isinstance(d, StartJob)]
    # the adopted job exits like any other and gives everything back
    out = core.step(103, [JobExited("old")])
    assert core.jobs["old"].phase is JobPhase.COMPLETED
    assert [d.job_id for d in out if isinstance(d, StartJob)] == ["more"]


def test_a_multi_node_job_is_adopted_across_its_nodes() -> None:
    core = cluster()
    spec = job("mpi").tasks(3, cpu=4).at(0).build()
    tasks = (AdoptedTask("main", "n0"), AdoptedTask("main", "n1"), AdoptedTask("main", "n1"))
    assert core.step(10, [JobAdopted(spec, tasks, 5.0)]) == []
    free = core.cluster.free[:, core.cluster.columns["cpu"]]
    assert free.tolist() == [4000, 0]


def test_a_job_that_no_longer_fits_is_stopped() -> None:
    core = cluster()
    first = job("first").tasks(1, cpu=6).at(0).build()
    assert core.step(10, [JobAdopted(first, (AdoptedTask("main", "n1"),), 5.0)]) == []
    spec = job("big").tasks(1, cpu=4).at(0).build()
    out = core.step(10, [JobAdopted(spec, (AdoptedTask("main", "n1"),), 5.0)])
    assert isinstance(out[0], StopJob)
    assert "no longer fit" in out[0].reason
    assert core.jobs["big"].phase is JobPhase.CANCELLED
    assert core.cluster.free[:, core.cluster.columns["cpu"]].tolist() == [8000, 2000]


def test_gpus_it_does_not_hold_are_not_adoptable() -> None:
    core = cluster()
    core.step(0, [JobSubmitted(job("first").tasks(1, cpu=1, gpu=1).at(0).build())])
    spec = job("clash").tasks(1, cpu=1, gpu=1).at(0).build()
    out = core.step(10, [JobAdopted(spec, (AdoptedTask("main", "n0", (0,)),), 5.0)])
    assert isinstance(out[0], StopJob)  # GPU 0 went to "first"
    assert core.cluster.free[:, core.cluster.columns["cpu"]].tolist() == [7000, 8000]


def test_a_slot_held_where_nothing_was_launched_takes_gpus_the_launched_task_leaves() -> None:
    core = cluster()
    spec = job("batch").tasks(2, cpu=2, gpu=2).at(0).build()
    held = AdoptedTask("main", "n0", launched=False)  # (listed first: still booked second)
    tasks = (held, AdoptedTask("main", "n0", (1, 3)))
    assert core.step(10, [JobAdopted(spec, tasks, 5.0)]) == []
    assert core.cluster.free[:, core.cluster.columns["cpu"]].tolist() == [4000, 8000]
    # all four GPUs are the job's: a one-GPU job waits
    out = core.step(11, [JobSubmitted(job("new").tasks(1, cpu=1, gpu=1).at(11).build())])
    assert not [d for d in out if isinstance(d, StartJob)]
    out = core.step(12, [JobExited("batch")])
    assert [d.job_id for d in out if isinstance(d, StartJob)] == ["new"]
