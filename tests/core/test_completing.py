"""Completing runs (core/completing.py): a run that ends while processes of it still live on
some of its nodes keeps its booking there, resources and GPUs, until the shell says they
are gone; its other nodes are free at its end, and the job has ended at once."""

from __future__ import annotations

from tests.core.test_no_requeue import gpu_job, tenancy_core

from builders import job, node
from fusesched.core.scheduler import SchedulerCore
from fusesched.model.events import (
    CompletingEnded,
    JobExited,
    JobSubmitted,
    NodeAdded,
    PreemptJob,
    StartJob,
)
from fusesched.model.phases import JobPhase
from fusesched.policies.registry import CoreConfig


def cluster() -> SchedulerCore:
    core = SchedulerCore(CoreConfig(backfill="none"))
    core.handle(NodeAdded(node("n0").cpu(8).gpu(2).build()), 0.0)
    core.handle(NodeAdded(node("n1").cpu(8).gpu(2).build()), 0.0)
    return core


def started(out: list[object]) -> dict[str, StartJob]:
    return {d.job_id: d for d in out if isinstance(d, StartJob)}


def test_a_completing_run_holds_its_node_until_its_processes_are_gone() -> None:
    core = cluster()
    out = core.step(1, [JobSubmitted(job("old").tasks(2, cpu=8, gpu=2).at(1).build())])
    assert started(out)["old"].nodes == ("n0", "n1")
    waiting = job("new").tasks(2, cpu=8, gpu=2).at(2).build()
    out = core.step(10, [JobSubmitted(waiting), JobExited("old", completing=("n0",))])
    rec = core.jobs["old"]
    assert (rec.phase, rec.end_time) == (JobPhase.COMPLETED, 10)  # (ended at its end)
    assert "new" not in started(out)
    cpu, gpu = core.cluster.columns["cpu"], core.cluster.columns["nvidia.com/gpu"]
    assert core.cluster.free[:, cpu].tolist() == [0, 8000]  # (n1 is free: nothing left there)
    assert core.cluster.free[:, gpu].tolist() == [0, 2]
    assert core.step(11, [CompletingEnded("old", ("n1",))]) == []  # (holds nothing there)
    out = core.step(12, [CompletingEnded("old", ("n0",))])
    start = started(out)["new"]
    devices = start.groups[0].devices
    assert devices is not None and [t.indices for t in devices.tasks] == [(0, 1), (0, 1)]
    assert not core.completing
    assert core.step(13, [CompletingEnded("old", ("n0",))]) == []  # (said twice: nothing)


def test_a_requeued_run_holds_its_node_and_its_next_run_goes_elsewhere() -> None:
    core = cluster()
    core.step(1, [JobSubmitted(job("again").tasks(1, cpu=8, gpu=1).at(1).build())])
    assert core.jobs["again"].allocation is not None
    exit_ = JobExited("again", 1, "node fault", requeue=True, completing=("n0",))
    out = core.step(10, [exit_])
    assert started(out)["again"].nodes == ("n1",)
    core.step(11, [JobSubmitted(job("small").tasks(1, cpu=8).at(11).build())])
    assert core.jobs["small"].phase is JobPhase.QUEUED  # (n0 held, n1 taken)
    out = core.step(12, [CompletingEnded("again", ("n0",))])
    assert started(out)["small"].nodes == ("n0",)


def test_a_projection_counts_a_completing_hold_as_gone_soon() -> None:
    from fusesched.core.forecast import forecast

    core = cluster()
    core.step(1, [JobSubmitted(job("old").tasks(2, cpu=8).at(1).build())])
    core.step(10, [JobExited("old", completing=("n0", "n1"))])
    core.step(11, [JobSubmitted(job("new").tasks(1, cpu=8).at(11).build())])
    (expected,) = forecast(core, 12).jobs
    assert expected.start == 12
    assert core.completing  # (the live core still holds them)


def test_a_preemptor_waits_for_its_victim_s_hold_instead_of_preempting_again() -> None:
    core = tenancy_core()
    core.handle(NodeAdded(node("n1").cpu(64).gpu(4).build()), 0.0)
    core.step(0, [JobSubmitted(gpu_job("b0", "bronze")), JobSubmitted(gpu_job("b1", "bronze"))])
    out = core.step(10, [JobSubmitted(gpu_job("g", "gold", at=10))])
    (victim,) = [d.job_id for d in out if isinstance(d, PreemptJob)]
    alloc = core.jobs[victim].allocation
    assert alloc is not None
    held = tuple(core.cluster.names[row] for row in alloc.nodes.tolist())
    out = core.step(11, [JobExited(victim, 143, "preempted", completing=held)])
    assert not [d for d in out if isinstance(d, PreemptJob)]  # (its room comes: no other)
    assert core.step(12, []) == []
    out = core.step(13, [CompletingEnded(victim, held)])
    assert started(out)["g"].nodes == held
    assert core.tenants is not None and core.tenants.preempted == 1


def test_nothing_is_backfilled_into_the_room_a_hold_keeps_for_the_head() -> None:
    for backfill in ("easy", "conservative"):
        for ask, tasks in (({"cpu": 8, "mem": "1Gi"}, 2), ({"cpu": 1}, 16)):  # (by node; sums)
            core = SchedulerCore(CoreConfig(backfill=backfill, queue_order="fcfs"))
            for name in ("n0", "n1", "n2"):
                core.handle(NodeAdded(node(name).cpu(8).mem("8Gi").build()), 0.0)
            old = job("old").tasks(tasks, **ask).walltime(100).build()
            other = job("other").tasks(tasks // 2, **ask).walltime(5000).build()  # (on n2)
            core.step(1, [JobSubmitted(old), JobSubmitted(other)])
            head = job("head").tasks(tasks, **ask).walltime(100).at(2).build()
            long = job("long").tasks(tasks // 2, **ask).walltime(1000).at(3).build()
            core.step(5, [JobSubmitted(head), JobSubmitted(long)])
            out = core.step(10, [JobExited("old", completing=("n0",))])
            assert "long" not in started(out), (backfill, ask)
            out = core.step(11, [CompletingEnded("old", ("n0",))])
            assert "head" in started(out), (backfill, ask)


def test_a_later_run_held_on_the_same_node_is_held_from_its_own_end() -> None:
    core = cluster()
    core.step(1, [JobSubmitted(job("again").tasks(1, cpu=2).at(1).build())])
    out = core.step(10, [JobExited("again", 1, "fault", requeue=True, completing=("n0",))])
    assert started(out)["again"].nodes == ("n0",)  # (room beside its old run's hold)
    core.step(50, [JobExited("again", completing=("n0",))])
    (held,) = core.completing["again"].values()
    assert held.since == 50 and held.amounts[core.cluster.columns["cpu"]] == 4000
