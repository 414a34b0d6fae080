"""The scheduling core as a state machine: events in, decisions out.

Every test drives ``SchedulerCore.step`` through ``builders.run_script`` and asserts on the
returned decisions and on ``core.jobs[id].phase``; nothing here looks at the core's arrays.
"""

from __future__ import annotations

import itertools

import pytest
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

from builders import (
    Run,
    cancel,
    exited,
    job,
    make_core,
    node,
    node_state,
    run_script,
    submit,
)
from fusesched.core.scheduler import DuplicateJobId
from fusesched.model.events import (
    JobExited,
    JobSubmitted,
    NodeAdded,
    RejectJob,
    ReserveJob,
    StartJob,
    StopJob,
)
from fusesched.model.job import JobSpec
from fusesched.model.node import NodeSpec, NodeState
from fusesched.model.phases import JobPhase
from fusesched.model.resources import Resources
from fusesched.policies.registry import CoreConfig, PolicyError

# ============================================================================ configuration


@pytest.mark.parametrize(
    "kwargs",
    [
        {"queue_order": "nope"},
        {"backfill": "aggressive"},
        {"placement": "random-fit"},
        {"default_estimate_s": 0},
        {"conservative_depth": 0},
    ],
)
def test_config_rejects_unknown_policies(kwargs: dict[str, object]) -> None:
    with pytest.raises(PolicyError):
        CoreConfig(**kwargs)  # type: ignore[arg-type]


# ============================================================================ queue order


def start_order(queue_order: str, specs: list[JobSpec]) -> list[str]:
    """The order in which ``specs`` start when only one job fits at a time.

    One node with a single ``token`` serialises the jobs (each asks for the token and up to
    8 CPUs); a blocker holds the token while every job is queued, then each job exits one
    second after it starts.
    """
    cluster = [node("n").cpu(8).res("token", 1).build()]
    blocker = job("blocker").tasks(1, cpu=1, token=1).walltime(10).build()
    run = run_script(
        cluster,
        [(0, submit(blocker)), (0.5, submit(*specs))],
        queue_order=queue_order,
        backfill="none",
    )
    order: list[str] = []
    now, running = 10.0, "blocker"
    while True:
        started = [d for d in run.step(now, exited(running)) if isinstance(d, StartJob)]
        if not started:
            break
        assert len(started) == 1
        running = started[0].job_id
        order.append(running)
        now += 1
    return order


def hpc(job_id: str, submit: float, walltime: float, cpus: int = 1) -> JobSpec:
    return job(job_id).tasks(1, cpu=cpus, token=1).walltime(walltime).at(submit).build()


QUEUE_ORDER_CASES = [
    # fcfs: submit time only
    ("fcfs", [hpc("a", 1, 300), hpc("b", 2, 100), hpc("c", 3, 200)], "abc"),
    ("fcfs", [hpc("a", 3, 1), hpc("b", 2, 1), hpc("c", 1, 1)], "cba"),
    ("fcfs", [hpc("a", 1, 9), hpc("b", 1, 1), hpc("c", 1, 5)], "abc"),  # ties: arrival
    # sjf: shortest requested time, then submit time
    ("sjf", [hpc("a", 1, 300), hpc("b", 2, 100), hpc("c", 3, 200)], "bca"),
    ("sjf", [hpc("a", 2, 100), hpc("b", 1, 100), hpc("c", 3, 50)], "cba"),
    # f1 = log10(r)·n + 870·log10(s); with s = 1 only log10(r)·n counts:
    # a: 2·4 = 8, b: 3·2 = 6, c: 1·1 = 1
    ("f1", [hpc("a", 1, 100, 4), hpc("b", 1, 1000, 2), hpc("c", 1, 10, 1)], "cba"),
    # a: 1·1 + 870·log10(10) = 871, b: 3·8 + 0 = 24
    ("f1", [hpc("a", 10, 10, 1), hpc("b", 1, 1000, 8)], "ba"),
    # wfp3 as in RLScheduler: ((1 + s)/r)³·n, lowest first
    # a: (2/300)³ ≈ 3e-7, b: (3/100)³ = 2.7e-5, c: (4/200)³ = 8e-6
    ("wfp3", [hpc("a", 1, 300), hpc("b", 2, 100), hpc("c", 3, 200)], "acb"),
    # same s and r: a: (2/100)³·8 = 6.4e-5, b: (2/100)³·1 = 8e-6
    ("wfp3", [hpc("a", 1, 100, 8), hpc("b", 1, 100, 1)], "ba"),
    # unicep as in RLScheduler: (1 + s)/(log2(n)·r), lowest first
    # a: 2/(1·100) = 0.02, b: 2/(3·100) ≈ 0.0067, c: 4/(1·1000) = 0.004
    ("unicep", [hpc("a", 1, 100, 2), hpc("b", 1, 100, 8), hpc("c", 3, 1000, 2)], "cba"),
    # n = 1 makes log2(n + 1e-15) ≈ 1.4e-15, so single-CPU jobs go last
    ("unicep", [hpc("a", 1, 100, 1), hpc("b", 5, 100, 2)], "ba"),
]


@pytest.mark.parametrize(
    ("order", "specs", "expected"),
    QUEUE_ORDER_CASES,
    ids=[f"{o}-{i}" for i, (o, _, _) in enumerate(QUEUE_ORDER_CASES)],
)
def test_queue_order(order: str, specs: list[JobSpec], expected: str) -> None:
    assert "".join(start_order(order, specs)) == expected


def prio(job_id: str, qos: str, priority: int, submit: float) -> JobSpec:
    spec = job(job_id).tasks(1, cpu=1, token=1).walltime(10).at(submit)
    return spec.qos(qos).priority(priority).build()


@pytest.mark.parametrize(
    ("specs", "expected"),
    [
        # QoS tier beats job priority
        (
            [prio("b", "bronze", 100, 1), prio("s", "silver", 0, 2), prio("g", "gold", -5, 3)],
            ["g", "s", "b"],
        ),
        # within a tier, higher priority first
        (
            [prio("p1", "silver", 1, 1), prio("p5", "silver", 5, 2), prio("p3", "silver", 3, 3)],
            ["p5", "p3", "p1"],
        ),
        # same tier and priority: earlier submit first
        (
            [prio("x", "gold", 2, 5), prio("y", "gold", 2, 4), prio("z", "gold", 2, 6)],
            ["y", "x", "z"],
        ),
    ],
)
def test_priority_order(specs: list[JobSpec], expected: list[str]) -> None:
    assert start_order("priority", specs) == expected


def test_textbook_wfp3_depends_on_waiting_time() -> None:
    # w = now − s at the first cycle after the blocker (t = 10): a waited 10 s of a 1000 s
    # request, b waited 9.5 s of a 10 s request → b's (w/r)³ is far larger → b first
    specs = [hpc("a", 0, 1000), hpc("b", 0.5, 10)]
    assert start_order("wfp3-textbook", specs) == ["b", "a"]
    assert start_order("fcfs", specs) == ["a", "b"]


# ============================================================================ placement

MIXED = [node("n0").cpu(2).build(), node("n1").cpu(8).build(), node("n2").cpu(4).build()]


def placed(cluster: list[NodeSpec], spec: JobSpec, **settings: object) -> StartJob:
    run = run_script(cluster, [(0, submit(spec))], **settings)
    starts = run.starts()
    assert spec.id in starts, run.decisions
    return starts[spec.id]


@pytest.mark.parametrize(
    ("policy", "cpu", "expected"),
    [
        ("first-fit", 1, "n0"),
        ("first-fit", 2, "n0"),
        ("first-fit", 3, "n1"),  # n0 is too small: the lowest-numbered node that fits
        # best-fit: least capacity left over (fraction of the node) after placing the task
        ("best-fit", 2, "n0"),  # n0 left 0
        ("best-fit", 1, "n0"),  # n0 1/2, n1 7/8, n2 3/4
        ("best-fit", 3, "n2"),  # n1 5/8, n2 1/4
        # worst-fit: most capacity left over
        ("worst-fit", 1, "n1"),  # n0 1/2, n1 7/8, n2 3/4
        ("worst-fit", 3, "n1"),  # n1 5/8, n2 1/4
        ("worst-fit", 4, "n1"),  # n1 1/2, n2 0
    ],
)
def test_placement_policy_picks_node(policy: str, cpu: int, expected: str) -> None:
    start = placed(MIXED, job("j").tasks(1, cpu=cpu).build(), placement=policy)
    assert start.nodes == (expected,)


@pytest.mark.parametrize(("policy", "expected"), [("best-fit", "n0"), ("worst-fit", "n1")])
def test_placement_policy_scores_what_is_free_now(policy: str, expected: str) -> None:
    # n0 (8 CPUs) has 3 free after 'f' started; n1 (4 CPUs) is empty. A 1-CPU task leaves
    # 2/8 of n0 or 3/4 of n1.
    cluster = [node("n0").cpu(8).build(), node("n1").cpu(4).build()]
    run = run_script(
        cluster,
        [
            (0, submit(job("f").tasks(1, cpu=5).build())),
            (1, submit(job("j").tasks(1, cpu=1).build())),
        ],
        placement=policy,
    )
    assert run.starts()["f"].nodes == ("n0",)
    assert run.starts()["j"].nodes == (expected,)


def test_first_fit_fills_nodes_in_order() -> None:
    start = placed(MIXED, job("j").tasks(5, cpu=2).build(), placement="first-fit")
    groups = start.groups[0]
    assert (groups.nodes, groups.counts) == (("n0", "n1"), (1, 4))
    assert [(t.node, t.count, t.first_index) for t in start.tasks] == [("n0", 1, 0), ("n1", 4, 1)]


ZONES = [node(f"n{i}").cpu(4).label("zone", z).build() for i, z in enumerate("abc")]


@pytest.mark.parametrize("policy", ["first-fit", "best-fit", "worst-fit"])
@pytest.mark.parametrize(
    ("build", "expected"),
    [
        (lambda j: j.prefer("zone", "In", "b", weight=5), ("n1",)),
        (lambda j: j.prefer("zone", "In", "a", weight=-5), ("n1",)),  # soft anti-affinity
        (lambda j: j.prefer("zone", "In", "a", "b", weight=-5), ("n2",)),
        (
            lambda j: j.prefer("zone", "In", "b", weight=2).prefer("zone", "In", "c", weight=3),
            ("n2",),
        ),
        (lambda j: j.prefer("zone", "NotIn", "c", weight=1).prefer("zone", "In", "b"), ("n1",)),
    ],
)
def test_preferred_terms(policy: str, build: object, expected: tuple[str, ...]) -> None:
    spec = build(job("j").tasks(1, cpu=1)).build()  # type: ignore[operator]
    assert placed(ZONES, spec, placement=policy).nodes == expected


def test_preference_beats_packing() -> None:
    cluster = [node("small").cpu(1).build(), node("big").cpu(16).label("fast", "yes").build()]
    spec = job("j").tasks(1, cpu=1).prefer("fast", "Exists", weight=1).build()
    assert placed(cluster, spec, placement="best-fit").nodes == ("big",)


@pytest.mark.parametrize("policy", ["first-fit", "best-fit", "worst-fit"])
@pytest.mark.parametrize(
    ("build", "expected"),
    [
        (lambda j: j.selector(zone="c"), {"n2"}),
        (lambda j: j.selector({"zone": "b", "kubernetes.io/hostname": "n1"}), {"n1"}),
        (lambda j: j.require("zone", "NotIn", "a", "b"), {"n2"}),
        (lambda j: j.require("zone", "In", "b", "c").avoid("zone", "In", "b"), {"n2"}),
        (lambda j: j.avoid("zone", "In", "a"), {"n1", "n2"}),
        (lambda j: j.require("zone", "Exists"), {"n0", "n1", "n2"}),
    ],
)
def test_hard_filters(policy: str, build: object, expected: set[str]) -> None:
    spec = build(job("j").tasks(2, cpu=2)).build()  # type: ignore[operator]
    start = placed(ZONES, spec, placement=policy)
    assert set(start.nodes) <= expected


@pytest.mark.parametrize(
    "build",
    [
        lambda j: j.selector(zone="d"),
        lambda j: j.selector(zone="a", missing="x"),
        lambda j: j.require("zone", "DoesNotExist"),
        lambda j: j.avoid("zone", "Exists"),
        lambda j: j.selector(zone="a").avoid("kubernetes.io/hostname", "In", "n0"),
    ],
)
def test_no_allowed_node_is_rejected(build: object) -> None:
    spec = build(job("j").tasks(1, cpu=1)).build()  # type: ignore[operator]
    run = run_script(ZONES, [(0, submit(spec))])
    assert list(run.rejected()) == ["j"]
    assert run.phase("j") is JobPhase.CANCELLED


def test_selector_waits_for_its_nodes_and_does_not_take_others() -> None:
    run = run_script(
        ZONES,
        [
            (0, submit(job("x").tasks(1, cpu=4).selector(zone="c").walltime(100).build())),
            (1, submit(job("j").tasks(1, cpu=1).selector(zone="c").walltime(10).build())),
        ],
    )
    assert "j" not in run.starts()
    assert run.phase("j") is JobPhase.QUEUED
    run.step(100, exited("x"))
    assert run.starts()["j"].nodes == ("n2",)


@pytest.mark.parametrize(
    ("tasks", "max_per_node", "counts"),
    [
        (3, 1, (1, 1, 1)),
        (4, 2, (2, 2)),
        (5, 2, (2, 2, 1)),
        (2, 4, (2,)),
    ],
)
def test_max_tasks_per_node(tasks: int, max_per_node: int, counts: tuple[int, ...]) -> None:
    start = placed(ZONES, job("j").tasks(tasks, cpu=1).max_per_node(max_per_node).build())
    assert start.groups[0].counts == counts
    assert len(set(start.nodes)) == len(counts)


def test_max_tasks_per_node_too_many_is_rejected() -> None:
    run = run_script(ZONES, [(0, submit(job("j").tasks(4, cpu=1).max_per_node(1).build()))])
    assert "j" in run.rejected()


def test_max_tasks_per_node_spreads_the_whole_gang() -> None:
    # Placement: "max_tasks_per_node spreads a gang's tasks (1 = one task per node)" — the
    # gang is the whole job, so tasks of different groups may not share a node either.
    spec = job("j").tasks(2, "a", cpu=1).tasks(1, "b", cpu=1).max_per_node(1).build()
    start = placed(ZONES, spec)
    per_node: dict[str, int] = {}
    for task in start.tasks:
        per_node[task.node] = per_node.get(task.node, 0) + task.count
    assert max(per_node.values()) == 1, start


def test_max_tasks_per_node_waits_for_distinct_nodes() -> None:
    run = run_script(
        ZONES,
        [
            (0, submit(job("x").tasks(1, cpu=4).selector(zone="a").walltime(50).build())),
            (1, submit(job("j").tasks(3, cpu=1).max_per_node(1).walltime(10).build())),
        ],
    )
    assert "j" not in run.starts()  # only two nodes have room
    run.step(50, exited("x"))
    assert set(run.starts()["j"].nodes) == {"n0", "n1", "n2"}


# ============================================================================ gangs

TWO = [node("n0").cpu(4).build(), node("n1").cpu(4).build()]


def test_gang_that_half_fits_starts_nothing_and_leaves_the_cluster_free() -> None:
    gang = job("g").tasks(1, "a", cpu=4).tasks(1, "b", cpu=4).walltime(100).build()
    run = run_script(
        TWO,
        [
            (0, submit(job("x").tasks(1, cpu=4).walltime(100).build())),
            (1, submit(gang)),
        ],
    )
    assert "g" not in run.starts()
    assert run.phase("g") is JobPhase.QUEUED
    # n1 was not even partly held by the failed gang: a job needing all of it starts now
    # (it ends before the gang's reservation, so even EASY lets it through)
    run.step(2, submit(job("fill").tasks(1, cpu=4).walltime(50).build()))
    assert run.starts()["fill"].nodes == ("n1",)
    run.step(52, exited("fill"))
    run.step(100, exited("x"))
    start = run.starts()["g"]
    assert {g.group: g.nodes for g in start.groups} in (
        {"a": ("n0",), "b": ("n1",)},
        {"a": ("n1",), "b": ("n0",)},
    )


def test_gang_is_all_or_nothing_within_one_group() -> None:
    run = run_script(
        TWO,
        [
            (0, submit(job("x").tasks(1, cpu=2).walltime(100).build())),
            (1, submit(job("g").tasks(4, cpu=2).walltime(100).build())),
        ],
        backfill="none",
    )
    assert "g" not in run.starts()
    run.step(100, exited("x"))
    assert run.starts()["g"].groups[0].counts == (2, 2)


@pytest.mark.parametrize("backfill", ["none", "easy", "conservative"])
def test_min_member_allows_a_partial_start(backfill: str) -> None:
    # 4 tasks of 2 CPUs, any 2 are enough; only n1 (4 CPUs) is free → 2 tasks start on n1
    run = run_script(
        TWO,
        [
            (0, submit(job("x").tasks(1, cpu=4).walltime(100).build())),
            (1, submit(job("g").tasks(4, cpu=2).min_member(2).walltime(100).build())),
        ],
        backfill=backfill,
    )
    start = run.starts().get("g")
    assert start is not None, run.decisions
    assert start.nodes == ("n1",)
    assert sum(t.count for t in start.tasks) == 2


def test_min_member_job_larger_than_the_cluster_still_runs() -> None:
    # 6 tasks × 2 CPUs = 12 CPUs on an 8-CPU cluster; the gang only needs 2 tasks. The job is
    # (rightly) not rejected — so it must eventually start, with as many tasks as fit.
    run = run_script(TWO, [(0, submit(job("g").tasks(6, cpu=2).min_member(2).build()))])
    assert not run.rejected()
    start = run.starts().get("g")
    assert start is not None, "the job is queued forever"
    assert sum(t.count for t in start.tasks) == 4


def test_min_member_too_big_for_the_cluster_is_rejected() -> None:
    run = run_script(TWO, [(0, submit(job("g").tasks(6, cpu=2).min_member(5).build()))])
    assert "g" in run.rejected()


# ============================================================================ resources


GPU_CLUSTER = [
    node("cpu0").cpu(64).mem("256Gi").build(),
    node("gpu0").cpu(16).mem("64Gi").gpu(4).label("fusesched.io/gpu-model", "h100").build(),
]


@pytest.mark.parametrize(
    ("spec", "expected"),
    [
        (job("j").tasks(2, cpu=4, mem="16Gi", gpu=2).build(), ("gpu0",)),
        (job("j").tasks(1, cpu=32, mem="200Gi").build(), ("cpu0",)),  # memory rules out gpu0
        (job("j").tasks(1, cpu=1, gpu=1).build(), ("gpu0",)),
        (job("j").tasks(1, cpu=20, mem="1Gi").build(), ("cpu0",)),  # cpu rules out gpu0
        (job("j").tasks(1, "ps", cpu=8).tasks(4, "w", cpu=2, gpu=1).build(), ("cpu0", "gpu0")),
    ],
)
def test_multi_resource_tasks_go_where_every_resource_fits(
    spec: JobSpec, expected: tuple[str, ...]
) -> None:
    assert placed(GPU_CLUSTER, spec).nodes == expected


def test_multi_resource_job_waits_for_the_scarce_resource() -> None:
    run = run_script(
        GPU_CLUSTER,
        [
            (0, submit(job("t").tasks(2, cpu=1, gpu=2).walltime(100).build())),
            (1, submit(job("u").tasks(1, cpu=1, gpu=1).walltime(100).build())),
        ],
    )
    assert "u" not in run.starts()  # plenty of CPU and memory, no GPU
    run.step(100, exited("t"))
    assert run.starts()["u"].nodes == ("gpu0",)


def test_two_group_job_that_fits_is_never_rejected() -> None:
    # launcher (CPU only) + worker (needs the GPU). The only way is launcher → c0, worker → g0;
    # placing the launcher on g0 first leaves the worker nowhere. The job fits the empty
    # cluster, so "cannot fit even on an empty cluster" is wrong whatever the group order.
    cluster = [node("g0").cpu(2).gpu(1).build(), node("c0").cpu(2).build()]
    for groups in itertools.permutations(
        [("launcher", {"cpu": 2}), ("worker", {"cpu": 2, "gpu": 1})]
    ):
        builder = job("j")
        for name, res in groups:
            builder.tasks(1, name, **res)
        run = run_script(cluster, [(0, submit(builder.build()))])
        assert not run.rejected(), run.rejected()
        assert {g.group: g.nodes for g in run.starts()["j"].groups} == {
            "launcher": ("c0",),
            "worker": ("g0",),
        }


@pytest.mark.parametrize(
    ("spec", "reason"),
    [
        (job("j").tasks(1, cpu=128).build(), "holds at most 0"),
        (job("j").tasks(1, cpu=1, gpu=8).build(), "holds at most 0"),
        (job("j").tasks(5, cpu=1, gpu=1).build(), "holds at most 4"),
        (job("j").tasks(1, cpu=1, mem="300Gi").build(), "needs 1 tasks"),
        (job("j").tasks(1, cpu=1, fpga=1).build(), "no node offers"),  # unknown resource
        (job("j").tasks(1, cpu=1, **{"nvidia.com/mig-1g.10gb": 1}).build(), "no node offers"),
        (job("j").tasks(1, cpu=1, gpu=1).selector({"fusesched.io/gpu-model": "a100"}).build(), ""),
    ],
)
def test_jobs_that_can_never_fit_are_rejected(spec: JobSpec, reason: str) -> None:
    run = run_script(GPU_CLUSTER, [(0, submit(spec))])
    assert [type(d) for _, d in run.decisions] == [RejectJob]
    assert reason in run.rejected()["j"]
    assert run.phase("j") is JobPhase.CANCELLED


def test_unschedulable_jobs_wait_when_rejection_is_off() -> None:
    run = run_script(
        GPU_CLUSTER,
        [(0, submit(job("j").tasks(1, cpu=128).build()))],
        reject_unschedulable=False,
    )
    assert not run.rejected()
    assert run.phase("j") is JobPhase.QUEUED


def test_unknown_resource_is_rejected_even_when_rejection_is_off() -> None:
    run = run_script(
        GPU_CLUSTER,
        [(0, submit(job("j").tasks(1, cpu=1, fpga=1).build()))],
        reject_unschedulable=False,
    )
    assert "no node offers" in run.rejected()["j"]


def test_a_new_resource_kind_while_jobs_run_does_not_corrupt_accounting() -> None:
    # 'a' runs on n0 (CPU only). A GPU node joins, adding a new resource column. When 'a'
    # exits, n0 must get back its CPUs only: a GPU task must never be placed on n0.
    run = run_script(
        [node("n0").cpu(4).build()],
        [
            (0, submit(job("a").tasks(1, cpu=4).walltime(100).build())),
            (1, NodeAdded(node("g0").cpu(2).gpu(1).build())),
            (2, submit(job("g").tasks(1, cpu=1, gpu=1).walltime(1000).build())),
            (100, exited("a")),
            (101, submit(job("h").tasks(1, cpu=1, gpu=1).walltime(50).build())),
        ],
    )
    assert run.starts()["g"].nodes == ("g0",)
    assert "h" not in run.starts(), run.starts()["h"]  # the only GPU is taken by 'g'


def test_exit_after_a_new_resource_kind_joined_is_accepted() -> None:
    # same as above with two resource columns before the GPU node joins
    run = run_script(
        [node("n0").cpu(4).mem("8Gi").build()],
        [
            (0, submit(job("a").tasks(1, cpu=4, mem="1Gi").walltime(100).build())),
            (1, NodeAdded(node("g0").cpu(2).gpu(1).build())),
            (2, submit(job("b").tasks(1, cpu=4, mem="8Gi").walltime(100).build())),
        ],
    )
    run.step(100, exited("a"))
    assert run.phase("a") is JobPhase.COMPLETED
    assert run.start_times()["b"] == 100


# ============================================================================ dependencies

ONE = [node("n0").cpu(4).build()]


def chain() -> list[JobSpec]:
    return [
        job("a").walltime(100).build(),
        job("ok").walltime(100).after_ok("a").build(),
        job("any").walltime(100).after_any("a").build(),
        job("next").walltime(100).after_ok("ok").build(),
    ]


def test_dependents_wait_as_pending() -> None:
    run = run_script(ONE, [(0, submit(*chain()))])
    assert list(run.starts()) == ["a"]
    assert [run.phase(j) for j in ("ok", "any", "next")] == [JobPhase.PENDING] * 3


def test_success_releases_afterok_and_afterany() -> None:
    run = run_script(ONE, [(0, submit(*chain())), (10, exited("a"))])
    assert run.start_times() == {"a": 0, "ok": 10, "any": 10}
    run.step(20, exited("ok"))
    assert run.start_times()["next"] == 20
    history = run.core.jobs["ok"].history
    assert (history[0].new, history[0].time) == (JobPhase.QUEUED, 10)
    assert "dependencies met" in history[0].reason


@pytest.mark.parametrize(
    "ending",
    [exited("a", code=1), exited("a", timed_out=True), cancel("a")],
    ids=["failed", "timeout", "cancelled"],
)
def test_a_failed_dependency_cancels_its_dependents(ending: object) -> None:
    run = run_script(ONE, [(0, submit(*chain())), (10, ending)])  # type: ignore[list-item]
    if isinstance(ending, JobExited):
        assert run.phase("a") in (JobPhase.FAILED, JobPhase.TIMEOUT)
    else:
        assert run.stopped() == ["a"]
        run.step(11, exited("a", code=143))
        assert run.phase("a") is JobPhase.CANCELLED
    # afterok dependents are rejected, transitively; afterany runs anyway
    assert set(run.rejected()) == {"ok", "next"}
    assert "dependency a" in run.rejected()["ok"]
    assert "dependency ok" in run.rejected()["next"]
    assert run.phase("ok") is JobPhase.CANCELLED
    assert run.phase("next") is JobPhase.CANCELLED
    assert run.phase("any") is JobPhase.RUNNING


def test_cancelling_a_pending_dependency_settles_its_dependents() -> None:
    run = run_script(
        ONE,
        [
            (0, submit(job("blk").tasks(1, cpu=4).walltime(50).build())),
            (1, submit(job("a").after_ok("blk").build())),
            (2, submit(job("b").after_ok("a").build(), job("c").after_any("a").build())),
            (3, cancel("a")),
        ],
    )
    assert run.phase("a") is JobPhase.CANCELLED
    assert list(run.rejected()) == ["b"]
    assert run.phase("c") is JobPhase.QUEUED  # its dependency ended; it waits for room


@pytest.mark.parametrize(
    ("code", "ok_runs"),
    [(0, True), (2, False)],
)
def test_dependency_that_already_ended(code: int, ok_runs: bool) -> None:
    run = run_script(
        ONE,
        [
            (0, submit(job("a").walltime(10).build())),
            (10, exited("a", code=code)),
            (11, submit(job("ok").after_ok("a").build(), job("any").after_any("a").build())),
        ],
    )
    assert "any" in run.starts()
    assert ("ok" in run.starts()) is ok_runs
    assert ("ok" in run.rejected()) is not ok_runs


def test_dependency_on_unknown_job_is_rejected() -> None:
    run = run_script(ONE, [(0, submit(job("z").after_ok("nope").build()))])
    assert "unknown job 'nope'" in run.rejected()["z"]


def test_several_dependencies_all_must_end() -> None:
    run = run_script(
        ONE,
        [
            (0, submit(job("a").walltime(10).build(), job("b").walltime(20).build())),
            (0, submit(job("c").after_ok("a").after_any("b").build())),
            (10, exited("a")),
        ],
    )
    assert run.phase("c") is JobPhase.PENDING
    run.step(20, exited("b", code=9))
    assert run.start_times()["c"] == 20


# ============================================================================ arrays


def array_run(max_parallel: int | None, count: int = 5) -> Run:
    spec = job("arr").tasks(1, cpu=1).walltime(100).array(0, count - 1, max_parallel=max_parallel)
    return run_script([node("n0").cpu(8).build()], [(0, submit(spec.build()))])


def running(run: Run) -> set[str]:
    return {j for j, rec in run.core.jobs.items() if rec.phase is JobPhase.RUNNING}


def test_array_children_are_jobs_of_their_own() -> None:
    run = array_run(None)
    assert set(run.core.jobs) == {f"arr_{i}" for i in range(5)}
    assert running(run) == set(run.core.jobs)


def test_array_max_parallel_throttles() -> None:
    run = array_run(2)
    assert list(run.starts()) == ["arr_0", "arr_1"]  # room for all 5, but only 2 at a time
    assert running(run) == {"arr_0", "arr_1"}
    run.step(5, exited("arr_0"))
    assert running(run) == {"arr_1", "arr_2"}
    run.step(6, exited("arr_1", code=1))  # a failed child frees its slot too
    assert running(run) == {"arr_2", "arr_3"}
    run.step(7, cancel("arr_4"))  # cancelling a held child
    run.step(8, exited("arr_2"), exited("arr_3"))
    assert running(run) == set()
    assert run.phase("arr_4") is JobPhase.CANCELLED
    assert len(run.starts()) == 4


def test_cancelling_a_queued_array_child_frees_its_slot() -> None:
    # the node is busy, so arr_0 and arr_1 wait in the queue and arr_2 is held back
    run = run_script(
        [node("n0").cpu(4).build()],
        [
            (0, submit(job("blk").tasks(1, cpu=4).walltime(10).build())),
            (
                1,
                submit(
                    job("arr").tasks(1, cpu=1).walltime(100).array(0, 2, max_parallel=2).build()
                ),
            ),
            (2, cancel("arr_0")),
            (10, exited("blk")),
        ],
    )
    assert running(run) == {"arr_1", "arr_2"}


def test_cancelling_the_only_admitted_array_child_does_not_strand_the_rest() -> None:
    run = run_script(
        [node("n0").cpu(4).build()],
        [
            (0, submit(job("blk").tasks(1, cpu=4).walltime(10).build())),
            (
                1,
                submit(
                    job("arr").tasks(1, cpu=1).walltime(100).array(0, 2, max_parallel=1).build()
                ),
            ),
            (2, cancel("arr_0")),
            (10, exited("blk")),
        ],
    )
    assert running(run) == {"arr_1"}


# ============================================================================ cancel


def test_cancel_queued_job() -> None:
    run = run_script(
        TWO,
        [
            (0, submit(job("r").tasks(2, cpu=4).walltime(100).build())),
            (1, submit(job("q").tasks(1, cpu=4).walltime(100).build())),
            (2, cancel("q")),
        ],
    )
    assert run.phase("q") is JobPhase.CANCELLED
    assert run.stopped() == []  # nothing was running, nothing to stop
    run.step(100, exited("r"))
    assert "q" not in run.starts()


def test_cancel_running_job_stops_it_then_exit_cancels() -> None:
    run = run_script(
        TWO,
        [
            (0, submit(job("r").tasks(2, cpu=4).walltime(100).build())),
            (1, submit(job("q").tasks(2, cpu=4).walltime(100).build())),
        ],
    )
    out = run.step(2, cancel("r", reason="operator"))
    assert out == [StopJob("r", "operator")]
    assert run.phase("r") is JobPhase.RUNNING  # still running until the shell reports the exit
    out = run.step(3, exited("r", code=143))
    assert run.phase("r") is JobPhase.CANCELLED
    assert run.core.jobs["r"].history[-1].reason == "operator"
    assert [d.job_id for d in out if isinstance(d, StartJob)] == ["q"]  # its room is reused


def test_cancel_running_job_that_then_times_out_is_still_cancelled() -> None:
    run = run_script(
        ONE,
        [
            (0, submit(job("r").walltime(10).build())),
            (5, cancel("r")),
            (10, exited("r", timed_out=True)),
        ],
    )
    assert run.phase("r") is JobPhase.CANCELLED


def test_cancel_finished_job_is_a_no_op() -> None:
    run = run_script(ONE, [(0, submit(job("a").walltime(10).build())), (10, exited("a"))])
    assert run.step(11, cancel("a")) == []
    assert run.phase("a") is JobPhase.COMPLETED


def test_cancel_unknown_job_raises() -> None:
    core = make_core(ONE)
    with pytest.raises(KeyError):
        core.step(0, [cancel("ghost")])


def test_exit_of_a_job_that_is_not_running_raises() -> None:
    run = run_script(TWO, [(0, submit(job("q").tasks(3, cpu=4).build(), job("a").build()))])
    with pytest.raises(KeyError):
        run.step(1, exited("ghost"))
    run.step(2, exited("a"))
    with pytest.raises(KeyError):
        run.step(3, exited("a"))  # already completed


# ============================================================================ nodes


def test_draining_node_gets_no_new_work_but_keeps_running_work() -> None:
    run = run_script(
        TWO,
        [
            (0, submit(job("a").tasks(1, cpu=1).walltime(50).build())),
            (1, node_state("n0", "draining")),
            (2, submit(job("b").tasks(2, cpu=1).build(), job("c").tasks(1, cpu=2).build())),
        ],
    )
    assert run.starts()["a"].nodes == ("n0",)
    assert run.phase("a") is JobPhase.RUNNING
    assert run.starts()["b"].nodes == ("n1",)
    assert run.starts()["c"].nodes == ("n1",)
    run.step(50, exited("a"))
    run.step(51, submit(job("d").tasks(1, cpu=1).build()))
    assert "d" not in run.starts()  # n0 is empty but draining; n1 is full
    run.step(60, node_state("n0", "up"))
    assert run.starts()["d"].nodes == ("n0",)


@pytest.mark.parametrize("state", ["draining", "drained", "down", "suspended"])
def test_only_up_nodes_take_work(state: str) -> None:
    run = run_script(
        TWO,
        [(0, node_state("n0", state)), (1, submit(job("j").tasks(2, cpu=2).build()))],
    )
    assert run.starts()["j"].nodes == ("n1",)
    # a job that needs both nodes waits (it could run if n0 came back), it is not rejected
    run.step(2, submit(job("wide").tasks(2, cpu=4).build()))
    assert not run.rejected()
    assert run.phase("wide") is JobPhase.QUEUED


def test_node_added_later_takes_waiting_work() -> None:
    run = run_script(
        ONE,
        [
            (0, submit(job("a").tasks(1, cpu=4).walltime(100).build())),
            (1, submit(job("b").tasks(1, cpu=4).walltime(100).build())),
            (2, NodeAdded(node("late").cpu(4).build())),
        ],
    )
    assert run.starts()["b"].nodes == ("late",)


def test_node_added_in_a_non_up_state() -> None:
    core = make_core(ONE)
    core.step(0, [NodeAdded(node("d").cpu(64).build(), NodeState.DRAINING)])
    out = core.step(1, [JobSubmitted(job("j").tasks(1, cpu=8).build())])
    assert out == []
    assert core.jobs["j"].phase is JobPhase.QUEUED


def test_unknown_node_state_change_raises() -> None:
    core = make_core(ONE)
    with pytest.raises(KeyError):
        core.step(0, [node_state("ghost", "down")])


def test_duplicate_node_raises() -> None:
    core = make_core(ONE)
    with pytest.raises(ValueError):
        core.step(0, [NodeAdded(node("n0").cpu(1).build())])


# ============================================================================ misc


def test_duplicate_job_id_raises_and_original_untouched() -> None:
    run = run_script(ONE, [(0, submit(job("x").tasks(1, cpu=1).walltime(10).build()))])
    with pytest.raises(DuplicateJobId, match="already in use"):
        run.core.step(1, submit(job("x").tasks(1, cpu=2).walltime(99).build()))
    assert run.phase("x") is JobPhase.RUNNING
    assert run.core.jobs["x"].spec.walltime_s == 10


def test_array_with_a_taken_child_id_is_refused_whole() -> None:
    run = run_script(ONE, [(0, submit(job("a_1").build()))])
    with pytest.raises(DuplicateJobId):
        run.core.step(1, submit(job("a").array(0, 2).build()))
    assert set(run.core.jobs) == {"a_1"}


def test_timeout() -> None:
    run = run_script(
        ONE,
        [(0, submit(job("t").walltime(10).build())), (10, exited("t", code=-9, timed_out=True))],
    )
    assert run.phase("t") is JobPhase.TIMEOUT
    assert run.core.jobs["t"].history[-1].reason == "walltime exceeded"


def test_exit_codes() -> None:
    run = run_script(
        ONE,
        [(0, submit(job("ok").build(), job("bad").build())), (5, [exited("ok"), exited("bad", 7)])],
    )
    assert run.phase("ok") is JobPhase.COMPLETED
    assert run.phase("bad") is JobPhase.FAILED
    assert run.core.jobs["bad"].history[-1].reason == "exit 7"


def test_start_job_tasks_and_nodes() -> None:
    cluster = [node("n0").cpu(4).mem("8Gi").build(), node("n1").cpu(4).mem("8Gi").build()]
    start = placed(cluster, job("j").tasks(3, "w", cpu=2).tasks(1, "ps", cpu=1, mem="1Gi").build())
    assert [g.group for g in start.groups] == ["w", "ps"]
    assert sum(t.count for t in start.tasks) == 4
    assert start.groups[0].resources == Resources.parse({"cpu": 2})
    assert set(start.nodes) == {"n0", "n1"}
    assert start.backfilled is False


def test_nothing_happens_without_events() -> None:
    run = run_script(ONE, [(0, submit(job("a").tasks(1, cpu=4).walltime(10).build()))])
    assert run.step(1) == []
    assert run.step(2) == []


def test_reserve_is_informational_only() -> None:
    run = run_script(
        ONE,
        [
            (0, submit(job("a").tasks(1, cpu=4).walltime(10).build())),
            (1, submit(job("b").tasks(1, cpu=4).walltime(10).build())),
        ],
    )
    assert run.of(ReserveJob) == [ReserveJob("b", 10.0)]
    assert run.phase("b") is JobPhase.QUEUED


# ============================================================================ rejection property


def fits_empty(cluster: list[NodeSpec], spec: JobSpec) -> bool:
    """Brute force: can every task of ``spec`` be put somewhere on the empty cluster?"""
    tasks = [(g.name, g.resources) for g in spec.task_groups for _ in range(g.replicas)]
    allowed = [i for i, n in enumerate(cluster) if spec.placement.allows(n.labels)]
    limit = spec.placement.max_tasks_per_node
    for assignment in itertools.product(allowed, repeat=len(tasks)):
        used = [Resources() for _ in cluster]
        count: dict[int, int] = {}  # max_tasks_per_node counts every task of the job
        for (_group, res), i in zip(tasks, assignment, strict=True):
            used[i] = used[i] + res
            count[i] = count.get(i, 0) + 1
        if all(u.fits_in(n.capacity) for u, n in zip(used, cluster, strict=True)) and (
            limit is None or max(count.values()) <= limit
        ):
            return True
    return False


@st.composite
def cluster_and_job(draw: st.DrawFn) -> tuple[list[NodeSpec], JobSpec]:
    cluster = []
    for i in range(draw(st.integers(1, 3))):
        b = (
            node(f"n{i}")
            .cpu(draw(st.sampled_from([1, 2, 4])))
            .label("zone", draw(st.sampled_from("ab")))
        )
        if draw(st.booleans()):
            b.gpu(draw(st.integers(1, 2)))
        cluster.append(b.build())
    spec = job("j")
    for g in range(draw(st.integers(1, 2))):
        res: dict[str, int] = {"cpu": draw(st.integers(1, 3))}
        if draw(st.booleans()):
            res["gpu"] = 1
        spec.tasks(draw(st.integers(1, 3)), f"g{g}", **res)
    if draw(st.booleans()):
        spec.selector(zone=draw(st.sampled_from("ab")))
    if draw(st.booleans()):
        spec.max_per_node(draw(st.integers(1, 2)))
    return cluster, spec.build()


@settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(cluster_and_job(), st.sampled_from(["first-fit", "best-fit", "worst-fit"]))
@example(  # found by this test: g0 on n0 (first fit) leaves room for only one g1 task
    (
        [node("n0").cpu(2).build(), node("n1").cpu(1).build(), node("n2").cpu(2).build()],
        job("j").tasks(1, "g0", cpu=1).tasks(2, "g1", cpu=2).build(),
    ),
    "first-fit",
)
def test_rejected_exactly_when_the_empty_cluster_cannot_hold_the_job(
    case: tuple[list[NodeSpec], JobSpec], policy: str
) -> None:
    cluster, spec = case
    run = run_script(cluster, [(0, submit(spec))], placement=policy)
    if fits_empty(cluster, spec):
        assert "j" in run.starts(), run.decisions
    else:
        assert "j" in run.rejected(), run.decisions
