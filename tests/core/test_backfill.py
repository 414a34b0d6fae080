"""Backfilling: EASY and conservative, by example and by property.

The properties use exact runtime estimates (runtime == walltime), so every reservation the
core announces is a promise it can keep: the reserved job must start no later than announced.
"""

from __future__ import annotations

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from builders import Run, exited, job, node, nodes, run_script, simulate, submit
from fusesched.core import backfill as easy_scan
from fusesched.model.events import ReserveJob, StartJob
from fusesched.model.job import JobSpec
from fusesched.model.node import NodeSpec
from fusesched.model.phases import JobPhase
from fusesched.model.resources import Resources
from fusesched.policies.registry import CoreConfig

ONE = [node("n0").cpu(4).build()]


def blocked_wide(*later: JobSpec, backfill: str = "easy", cluster: list[NodeSpec] = ONE) -> Run:
    """'r' holds 3 of 4 CPUs until t=100; the wide job 'w' (4 CPUs) waits for it."""
    return run_script(
        cluster,
        [
            (0, submit(job("r").tasks(1, cpu=3).walltime(100).build())),
            (1, submit(job("w").tasks(1, cpu=4).walltime(100).build())),
            (2, submit(*later)),
        ],
        backfill=backfill,
    )


# ============================================================================ EASY


@pytest.mark.parametrize("backfill", ["easy", "conservative"])
def test_short_job_backfills_ahead_of_blocked_wide_job(backfill: str) -> None:
    run = blocked_wide(job("s").tasks(1, cpu=1).walltime(50).build(), backfill=backfill)
    assert run.reservations() == [("w", 100.0)]
    start = run.starts()["s"]
    assert start.backfilled is True
    assert run.start_times()["s"] == 2
    assert run.phase("w") is JobPhase.QUEUED
    assert run.core.jobs["s"].history[-1].reason == "backfilled"
    # the head still starts at its reservation
    run.step(52, exited("s"))
    run.step(100, exited("r"))
    assert run.start_times()["w"] == 100
    assert run.starts()["w"].backfilled is False


@pytest.mark.parametrize("backfill", ["easy", "conservative"])
def test_short_job_ending_exactly_at_the_reservation_backfills(backfill: str) -> None:
    run = blocked_wide(job("s").tasks(1, cpu=1).walltime(98).build(), backfill=backfill)
    assert "s" in run.starts()


@pytest.mark.parametrize("backfill", ["easy", "conservative", "none"])
def test_long_job_that_would_delay_the_head_does_not_start(backfill: str) -> None:
    run = blocked_wide(job("l").tasks(1, cpu=1).walltime(500).build(), backfill=backfill)
    assert "l" not in run.starts()
    run.step(100, exited("r"))
    assert list(run.starts()) == ["r", "w"]
    run.step(200, exited("w"))
    assert run.start_times()["l"] == 200


def test_no_backfill_keeps_strict_order() -> None:
    run = blocked_wide(job("s").tasks(1, cpu=1).walltime(1).build(), backfill="none")
    assert "s" not in run.starts()
    assert run.reservations() == []


@pytest.mark.parametrize("backfill", ["easy", "conservative"])
def test_long_job_in_the_extra_resources_backfills(backfill: str) -> None:
    # head 'w' needs 2 CPUs at t=100; of the 4 then free, 2 are extra → a long 1-CPU and then
    # another long 1-CPU job may run past the reservation; a third may not.
    run = run_script(
        ONE,
        [
            (0, submit(job("r").tasks(1, cpu=3).walltime(100).build())),
            (1, submit(job("w").tasks(1, cpu=2).walltime(100).build())),
            (2, submit(job("l1").tasks(1, cpu=1).walltime(1000).build())),
        ],
        backfill=backfill,
    )
    assert run.starts()["l1"].backfilled
    run.step(100, exited("r"))
    assert run.start_times()["w"] == 100
    run.step(101, submit(job("l2").tasks(1, cpu=1).walltime(1000).build()))
    assert "l2" in run.starts()


def test_easy_extra_is_used_up() -> None:
    run = run_script(
        [node("n0").cpu(8).build()],
        [
            (0, submit(job("r").tasks(1, cpu=6).walltime(100).build())),
            (1, submit(job("w").tasks(1, cpu=6).walltime(100).build())),  # extra at 100: 2
            (2, submit(job("l1").tasks(1, cpu=1).walltime(1000).build())),
            (3, submit(job("l2").tasks(1, cpu=2).walltime(1000).build())),  # only 1 extra left
            (4, submit(job("l3").tasks(1, cpu=1).walltime(1000).build())),
        ],
    )
    assert set(run.starts()) == {"r", "l1", "l3"}
    run.step(100, exited("r"))
    assert run.start_times()["w"] == 100


@pytest.mark.parametrize("backfill", ["easy", "conservative"])
def test_node_exact_reservation(backfill: str) -> None:
    # the head is pinned to n0 (busy until 100); n1 stays free at the reservation, so long
    # jobs that fit n1 may start, one that needs n0 may not.
    cluster = [node("n0").cpu(4).build(), node("n1").cpu(4).build()]
    run = run_script(
        cluster,
        [
            (
                0,
                submit(
                    job("r")
                    .tasks(1, cpu=3)
                    .selector({"kubernetes.io/hostname": "n0"})
                    .walltime(100)
                    .build()
                ),
            ),
            (
                1,
                submit(
                    job("w")
                    .tasks(1, cpu=4)
                    .selector({"kubernetes.io/hostname": "n0"})
                    .walltime(100)
                    .build()
                ),
            ),
            (
                2,
                submit(
                    job("long_n0")
                    .tasks(1, cpu=1)
                    .selector({"kubernetes.io/hostname": "n0"})
                    .walltime(1000)
                    .build()
                ),
            ),
            (3, submit(job("long_any").tasks(2, cpu=2).walltime(1000).build())),
        ],
        backfill=backfill,
    )
    assert run.reservations()[0] == ("w", 100.0)
    assert "long_n0" not in run.starts()
    assert run.starts()["long_any"].nodes == ("n1",)
    run.step(100, exited("r"))
    assert run.start_times()["w"] == 100


def test_reservation_is_announced_once_per_change() -> None:
    run = blocked_wide(job("x").tasks(1, cpu=1).walltime(500).build())
    assert run.reservations() == [("w", 100.0)]
    run.step(3, submit(job("y").tasks(1, cpu=1).walltime(600).build()))
    run.step(4)
    assert run.reservations() == [("w", 100.0)]  # unchanged: not repeated
    # 'r' overruns its walltime: nothing can be promised until it ends
    run.step(150, submit(job("z").tasks(1, cpu=1).walltime(5).build()))
    assert "w" not in run.starts()


@pytest.mark.parametrize("order", ["priority", "sjf"])
def test_job_started_ahead_of_the_head_invalidates_the_easy_reservation(order: str) -> None:
    # 8 CPUs. r (4 CPUs) ends at 100; head h (6 CPUs) is promised t=100 with 2 CPUs extra.
    # At t=2, f (ranked ahead of h: higher priority / shorter) starts on 1 of the 4 free CPUs
    # and runs to 502. Now only 1 CPU is extra at t=100, so g (2 CPUs, ranked behind h,
    # running to 2002) must not be backfilled: it would push h from 100 to 502.
    jobs = [
        (job("r").tasks(1, cpu=4).walltime(100).at(0).build(), 100.0),
        (job("h").tasks(1, cpu=6).walltime(1000).at(1).build(), 1000.0),
        (job("f").tasks(1, cpu=1).walltime(500).priority(1).at(2).build(), 500.0),
        (job("g").tasks(1, cpu=2).walltime(2000).priority(-1).at(2).build(), 2000.0),
    ]
    run = simulate([node("n0").cpu(8).build()], jobs, backfill="easy", queue_order=order)
    assert run.reservations()[0] == ("h", 100.0)
    assert run.start_times()["f"] == 2
    assert run.start_times()["h"] == 100, run.decisions


# ============================================================================ conservative


def protects_second_job(backfill: str) -> Run:
    """n0 busy until 100 with the head 'h1' pinned to it; 'h2' needs both nodes. 'x' fits n1
    now and does not touch h1, but running to 1000 it would delay h2."""
    cluster = [node("n0").cpu(4).build(), node("n1").cpu(4).build()]
    on_n0 = {"kubernetes.io/hostname": "n0"}
    return run_script(
        cluster,
        [
            (0, submit(job("r").tasks(1, cpu=4).selector(on_n0).walltime(100).build())),
            (1, submit(job("h1").tasks(1, cpu=4).selector(on_n0).walltime(100).build())),
            (2, submit(job("h2").tasks(2, cpu=4).walltime(100).build())),
            (3, submit(job("x").tasks(1, cpu=4).walltime(1000).build())),
            (4, submit(job("s").tasks(1, cpu=4).walltime(150).build())),
        ],
        backfill=backfill,
    )


def test_easy_only_protects_the_head() -> None:
    run = protects_second_job("easy")
    assert run.starts()["x"].nodes == ("n1",)
    assert "s" not in run.starts()


def test_conservative_protects_every_reservation() -> None:
    run = protects_second_job("conservative")
    assert "x" not in run.starts()
    # s ends at 154 < 200, when h2 is due (after h1 on n0 from 100 to 200): it may go
    assert run.starts()["s"].nodes == ("n1",)
    assert run.starts()["s"].backfilled
    run.step(100, exited("r"))
    assert run.start_times()["h1"] == 100
    run.step(154, exited("s"))
    run.step(200, exited("h1"))
    assert run.start_times()["h2"] == 200
    assert "x" not in run.starts()
    run.step(300, exited("h2"))
    assert run.start_times()["x"] == 300


def test_conservative_depth_limits_who_is_considered() -> None:
    run = run_script(
        ONE,
        [
            (0, submit(job("r").tasks(1, cpu=3).walltime(100).build())),
            (1, submit(job("w").tasks(1, cpu=4).walltime(100).build())),
            (2, submit(job("s").tasks(1, cpu=1).walltime(10).build())),
        ],
        backfill="conservative",
        conservative_depth=1,
    )
    assert "s" not in run.starts()


# ============================================================================ properties

ZONES = "ab"


@st.composite
def workloads(draw: st.DrawFn) -> tuple[list[NodeSpec], list[tuple[JobSpec, float]]]:
    """Small heterogeneous clusters and workloads: CPU, CPU+memory, GPUs, selectors, spread
    constraints and two-group gangs. Runtime equals the walltime."""
    cluster = []
    for i in range(draw(st.integers(1, 4))):
        b = node(f"n{i}").cpu(draw(st.sampled_from([2, 4, 8])))
        b.mem(f"{draw(st.sampled_from([4, 8, 16]))}Gi").label("zone", draw(st.sampled_from(ZONES)))
        if draw(st.booleans()):
            b.gpu(draw(st.integers(1, 2)))
        cluster.append(b.build())
    jobs = []
    t = 0
    for k in range(draw(st.integers(1, 12))):
        t += draw(st.integers(0, 20))
        b = job(f"j{k}").at(t)
        cpu = draw(st.integers(1, 4))
        reps = draw(st.integers(1, 3))
        kind = draw(st.sampled_from(["cpu", "mem", "selector", "gpu", "two", "spread", "prefer"]))
        if kind == "cpu":
            b.tasks(reps, cpu=cpu)
        elif kind == "mem":
            b.tasks(reps, cpu=cpu, mem=f"{draw(st.sampled_from([1, 2, 4, 8]))}Gi")
        elif kind == "selector":
            b.tasks(reps, cpu=cpu).selector(zone=draw(st.sampled_from(ZONES)))
        elif kind == "gpu":
            b.tasks(reps, cpu=1, gpu=1)
        elif kind == "two":
            b.tasks(reps, "a", cpu=cpu).tasks(1, "b", cpu=1, mem="1Gi")
        elif kind == "spread":
            b.tasks(reps, cpu=cpu).max_per_node(1)
        else:
            b.tasks(reps, cpu=cpu).prefer("zone", "In", "a", weight=3)
        walltime = draw(st.integers(1, 100))
        jobs.append((b.walltime(walltime).build(), float(walltime)))
    return cluster, jobs


def first_reservations(run: Run) -> dict[str, float]:
    first: dict[str, float] = {}
    for job_id, start in run.reservations():
        first.setdefault(job_id, start)
    return first


PROPERTY = settings(max_examples=250, deadline=None, suppress_health_check=[HealthCheck.too_slow])


@pytest.mark.parametrize("backfill", ["easy", "conservative"])
@PROPERTY
@given(case=workloads())
def test_head_starts_no_later_than_its_first_reservation(
    backfill: str, case: tuple[list[NodeSpec], list[tuple[JobSpec, float]]]
) -> None:
    cluster, jobs = case
    run = simulate(cluster, jobs, backfill=backfill)
    starts = run.start_times()
    for job_id, promised in first_reservations(run).items():
        assert job_id in starts, f"{job_id} was promised t={promised} but never started"
        assert starts[job_id] <= promised, (job_id, starts[job_id], promised, run.decisions)


def check_allocation(run: Run, cluster: list[NodeSpec], jobs: list[tuple[JobSpec, float]]) -> None:
    """At every start, the tasks running on each node fit its capacity, and every task sits
    on a node its job's placement allows (selectors, spread limit)."""
    capacity = {n.name: n.capacity for n in cluster}
    labels = {n.name: n.labels for n in cluster}
    specs = {spec.id: (spec, runtime) for spec, runtime in jobs}
    intervals: list[tuple[float, float, StartJob]] = []
    for t, d in run.decisions:
        if isinstance(d, StartJob):
            spec, runtime = specs[d.job_id]
            intervals.append((t, t + runtime, d))
            for group in d.groups:
                limit = spec.placement.max_tasks_per_node
                assert limit is None or max(group.counts) <= limit
                for name in group.nodes:
                    assert spec.placement.allows(labels[name]), (d.job_id, name)
            requested = {g.name: g.replicas for g in spec.task_groups}
            assert {g.group: sum(g.counts) for g in d.groups} == requested
    for now in sorted({t for t, _, _ in intervals}):
        used = {name: Resources() for name in capacity}
        for start, end, d in intervals:
            if start <= now < end:
                for task in d.tasks:
                    used[task.node] = used[task.node] + task.resources.scaled(task.count)
        for name, amount in used.items():
            assert amount.fits_in(capacity[name]), (now, name, amount, capacity[name])


@pytest.mark.parametrize("backfill", ["none", "easy", "conservative"])
@PROPERTY
@given(case=workloads())
def test_every_job_runs_and_no_node_is_overallocated(
    backfill: str, case: tuple[list[NodeSpec], list[tuple[JobSpec, float]]]
) -> None:
    cluster, jobs = case
    run = simulate(cluster, jobs, backfill=backfill)
    starts = run.start_times()
    rejected = run.rejected()
    for spec, _ in jobs:
        assert (spec.id in starts) != (spec.id in rejected), spec.id
        assert run.phase(spec.id) is (
            JobPhase.COMPLETED if spec.id in starts else JobPhase.CANCELLED
        )
    check_allocation(run, cluster, jobs)
    # nothing started twice
    assert len(run.of(StartJob)) == len(starts)


@pytest.mark.parametrize("backfill", ["easy", "conservative"])
def test_backfill_never_starts_a_job_before_its_submission(backfill: str) -> None:
    jobs = [
        (job(f"j{i}").tasks(1, cpu=1 + i % 4).walltime(10 + i).at(i).build(), 10.0 + i)
        for i in range(20)
    ]
    run = simulate(nodes(2, cpu=4), jobs, backfill=backfill)
    for spec, _ in jobs:
        assert run.start_times()[spec.id] >= spec.submit_time
    assert not any(isinstance(d, ReserveJob) and d.start_time < t for t, d in run.decisions)


@PROPERTY
@given(workloads(), st.sampled_from(["first-fit", "best-fit"]))
def test_easy_scan_blocks_do_not_change_decisions(
    workload: tuple[list[NodeSpec], list[tuple[JobSpec, float]]], placement: str
) -> None:
    """The EASY scan reads candidates in blocks and drops the kinds that failed before each
    block; blocks of one job give the same decisions as one block for the whole queue."""
    cluster, jobs = workload
    config = CoreConfig(backfill="easy", placement=placement)
    runs = []
    for block in (1, 1_000_000):
        saved, easy_scan.FIRST_BLOCK = easy_scan.FIRST_BLOCK, block
        try:
            runs.append(simulate(cluster, jobs, config))
        finally:
            easy_scan.FIRST_BLOCK = saved
    assert runs[0].decisions == runs[1].decisions
