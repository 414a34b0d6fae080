"""A job that may not be requeued (``JobSpec.requeue`` False: ``sbatch --no-requeue``): when
preempted it is cancelled (``running → preempted → cancelled``) instead of queued again, a
requeue the shell asks for fails it, and the jobs that wait on it settle accordingly."""

from __future__ import annotations

from dataclasses import replace

from tests.builders import job, node

from fusesched.core.requeue import NOT_REQUEUED
from fusesched.core.scheduler import SchedulerCore
from fusesched.model.events import (
    Decision,
    JobExited,
    JobSubmitted,
    NodeAdded,
    PreemptJob,
    RejectJob,
    StartJob,
)
from fusesched.model.job import Dependency, DependencyKind, JobSpec
from fusesched.model.phases import JobPhase
from fusesched.model.tenancy import TenancyConfig
from fusesched.policies.registry import CoreConfig
from fusesched.policies.tenancy_policy import TenancyPolicy

PREEMPTED = 143  # what a job stopped by SIGTERM exits with


def tenancy_core() -> SchedulerCore:
    """One 4-GPU node, one queue ``a``; gold may preempt bronze (the default tiers)."""
    config = TenancyConfig.from_dict(
        {
            "flavors": [{"name": "gpu", "resources": ["nvidia.com/gpu"]}],
            "organisations": [
                {
                    "name": "o",
                    "tenants": [
                        {
                            "name": "t",
                            "queues": [
                                {
                                    "name": "a",
                                    "flavors": [
                                        {"name": "gpu", "resources": {"nvidia.com/gpu": 16}}
                                    ],
                                }
                            ],
                        }
                    ],
                }
            ],
        }
    )
    core = SchedulerCore(
        CoreConfig(queue_order="fcfs", backfill="none", tenancy=TenancyPolicy(config))
    )
    core.handle(NodeAdded(node("n0").cpu(64).gpu(4).build()), 0.0)
    return core


def gpu_job(job_id: str, qos: str, at: float = 0.0, requeue: bool = True) -> JobSpec:
    spec = job(job_id).tasks(1, cpu=1, gpu=4).queue("a").qos(qos).at(at).build()
    return replace(spec, requeue=requeue)


def started(out: list[Decision]) -> list[str]:
    return [d.job_id for d in out if isinstance(d, StartJob)]


def waits_on(spec: JobSpec, kind: DependencyKind, other: str) -> JobSpec:
    return replace(spec, dependencies=(Dependency(kind, other),))


def preempt_bronze(requeue: bool) -> tuple[SchedulerCore, list[Decision]]:
    """Bronze ``b`` runs; gold ``g`` preempts it; ``b`` exits on its notice."""
    core = tenancy_core()
    assert started(core.step(0, [JobSubmitted(gpu_job("b", "bronze", requeue=requeue))])) == ["b"]
    out = core.step(10, [JobSubmitted(gpu_job("g", "gold", at=10))])
    assert [d.job_id for d in out if isinstance(d, PreemptJob)] == ["b"]
    return core, core.step(11, [JobExited("b", PREEMPTED)])


def test_a_preempted_no_requeue_job_is_cancelled_not_queued_again() -> None:
    core, out = preempt_bronze(requeue=False)
    b = core.jobs["b"]
    assert [t.new for t in b.history] == [
        JobPhase.QUEUED,
        JobPhase.RUNNING,
        JobPhase.PREEMPTED,
        JobPhase.CANCELLED,
    ]
    assert b.history[-1].reason == f"preempted for job g (a, gold); {NOT_REQUEUED}"
    assert started(out) == ["g"]  # the room it freed
    assert core.queue.position(b) is None and b.attempts == 1
    core.step(50, [JobExited("g")])
    assert b.phase is JobPhase.CANCELLED  # never runs again


def test_without_the_flag_the_preempted_job_is_queued_again() -> None:
    core, out = preempt_bronze(requeue=True)
    assert started(out) == ["g"]
    assert core.jobs["b"].phase is JobPhase.QUEUED
    assert started(core.step(50, [JobExited("g")])) == ["b"]


def test_dependents_of_a_cancelled_no_requeue_job_settle() -> None:
    core = tenancy_core()
    core.step(0, [JobSubmitted(gpu_job("b", "bronze", requeue=False))])
    ok = waits_on(gpu_job("ok", "silver"), DependencyKind.AFTER_OK, "b")
    notok = waits_on(gpu_job("notok", "silver"), DependencyKind.AFTER_NOT_OK, "b")
    core.step(1, [JobSubmitted(ok), JobSubmitted(notok)])
    core.step(10, [JobSubmitted(gpu_job("g", "gold", at=10))])
    out = core.step(11, [JobExited("b", PREEMPTED)])
    rejected = {d.job_id: d.reason for d in out if isinstance(d, RejectJob)}
    assert rejected == {"ok": "dependency b ended cancelled"}
    assert core.jobs["notok"].phase is JobPhase.QUEUED  # afternotok: met
    assert started(core.step(50, [JobExited("g")])) == ["notok"]


def test_a_requeue_the_shell_asks_for_fails_the_job() -> None:
    core = SchedulerCore(CoreConfig(backfill="none"))
    core.handle(NodeAdded(node("n0").cpu(4).build()), 0.0)
    spec = replace(job("j").tasks(1, cpu=4).build(), requeue=False)
    core.step(0, [JobSubmitted(spec)])
    core.step(5, [JobExited("j", -1, "node n0 stopped heartbeating", requeue=True)])
    rec = core.jobs["j"]
    assert rec.phase is JobPhase.FAILED
    assert rec.history[-1].reason == f"node n0 stopped heartbeating; {NOT_REQUEUED}"
