"""``Resources`` or ``Priority`` partition by partition (core/contention.py): the first job
of each pool, of each GPU model and of GPU and CPU work waits for room, the jobs behind one
that competes with them for priority — as Slurm gives them per partition — and only where
the cycle tries the jobs behind a blocked one."""

from __future__ import annotations

import pytest

from builders import job, make_core, node
from fusesched.core.pending_reasons import waiting_reasons
from fusesched.core.scheduler import SchedulerCore
from fusesched.model.events import JobSubmitted, NodeStateChanged
from fusesched.model.job import JobSpec
from fusesched.model.node import LABEL_GPU_MODEL, LABEL_POOL, NodeState


def _in_pool(job_id: str, pool: str | None, tasks: int = 1, at: float = 0.0) -> JobSpec:
    spec = job(job_id).tasks(tasks, cpu=4).walltime(100).at(at)
    return (spec.selector({LABEL_POOL: pool}) if pool else spec).build()


def _two_pools_full(backfill: str, **settings: object) -> SchedulerCore:
    """Pools ``a`` and ``b`` of two 4-CPU nodes each, both taken; then, in this order, two
    jobs of pool a, two of pool b, and one that may go anywhere."""
    cluster = [node(f"{p}{i}").cpu(4).label(LABEL_POOL, p).build() for p in "ab" for i in "01"]
    core = make_core(cluster, queue_order="fcfs", backfill=backfill, **settings)
    core.step(
        0, [JobSubmitted(_in_pool("fill_a", "a", 2)), JobSubmitted(_in_pool("fill_b", "b", 2))]
    )
    waiting = [("a1", "a"), ("a2", "a"), ("b1", "b"), ("b2", "b"), ("any", None)]
    core.step(1, [JobSubmitted(_in_pool(j, pool, at=1)) for j, pool in waiting])
    assert [r.id for r in core.queue.records] == [j for j, _ in waiting]  # (none started)
    return core


@pytest.mark.parametrize("backfill", ["easy", "conservative"])
def test_the_first_job_of_each_pool_waits_for_resources(backfill: str) -> None:
    assert waiting_reasons(_two_pools_full(backfill)) == {
        "a1": "Resources",
        "a2": "Priority",
        "b1": "Resources",  # (nothing ahead of it wants pool b's nodes)
        "b2": "Priority",
        "any": "Priority",  # (behind the jobs of both pools)
    }


def test_without_backfilling_every_job_behind_the_first_waits_for_priority() -> None:
    """The cycle stops at the first job that does not fit: a job of another pool is not
    even tried, free nodes or not."""
    reasons = waiting_reasons(_two_pools_full("none"))
    assert reasons == {"a1": "Resources"} | dict.fromkeys(["a2", "b1", "b2", "any"], "Priority")


def test_jobs_past_the_conservative_depth_wait_for_priority() -> None:
    """Conservative backfilling tries only the first ``conservative_depth`` jobs."""
    reasons = waiting_reasons(_two_pools_full("conservative", conservative_depth=2))
    assert reasons["a1"] == "Resources" and reasons["b1"] == "Priority"


def _gpu_job(job_id: str, model: str | None = None) -> JobSpec:
    spec = job(job_id).tasks(1, cpu=1, gpu=1).walltime(100).at(1)
    return (spec.selector({LABEL_GPU_MODEL: model}) if model else spec).build()


def test_gpu_models_and_cpu_work_are_partitions_of_their_own() -> None:
    """A GPU job does not wait behind CPU jobs, nor an H100 job behind A100 jobs; a job
    that takes any GPU waits behind both models' jobs, a CPU job behind CPU jobs."""
    cluster = [
        node("c0").cpu(4).build(),
        node("g0").cpu(2).gpu(2).label(LABEL_GPU_MODEL, "A100").build(),
        node("h0").cpu(2).gpu(2).label(LABEL_GPU_MODEL, "H100").build(),
    ]
    core = make_core(cluster, queue_order="fcfs", backfill="easy")
    fill = [job(f"f{i}").tasks(1, cpu=2, gpu=2).walltime(100).build() for i in range(2)]
    core.step(0, [JobSubmitted(s) for s in [*fill, job("fc").tasks(1, cpu=4).build()]])
    assert not core.queue.records  # every node full
    cpu_a, cpu_b = (job(j).tasks(1, cpu=2).walltime(100).at(1).build() for j in ("cpu_a", "cpu_b"))
    waiting = [_gpu_job("a100", "A100"), cpu_a, _gpu_job("h100", "H100"), _gpu_job("gpu"), cpu_b]
    core.step(1, [JobSubmitted(s) for s in waiting])
    assert waiting_reasons(core) == {
        "a100": "Resources",
        "cpu_a": "Resources",  # (the A100 job ahead of it waits for a GPU)
        "h100": "Resources",
        "gpu": "Priority",
        "cpu_b": "Priority",
    }


def test_a_job_no_node_can_hold_now_competes_with_nobody() -> None:
    """A pool whose nodes are all down: its jobs wait for room (``Resources``), and hold no
    one back."""
    core = _two_pools_full("easy")
    for name in ("b0", "b1"):
        core.step(2, [NodeStateChanged(name, NodeState.DOWN)])
    reasons = waiting_reasons(core)
    assert reasons["b1"] == reasons["b2"] == "Resources"
    assert reasons["any"] == "Priority"  # (behind pool a's jobs still)
