"""``UsageRecalled``: a restarted shell hands the core the runs that ended before the restart,
and fair share charges them as it did while they ran (core/past_usage.py)."""

from __future__ import annotations

import math
from dataclasses import replace

import pytest

from builders import job, node, two_tenant_tenancy
from fusesched.core.past_usage import RECALLED_HALF_LIVES, recalled_since
from fusesched.core.scheduler import SchedulerCore
from fusesched.model.events import (
    EndedRuns,
    JobExited,
    JobSubmitted,
    NodeAdded,
    StartJob,
    UsageRecalled,
)
from fusesched.model.job import JobSpec
from fusesched.model.resources import Resources
from fusesched.model.tenancy import TenancyConfig
from fusesched.policies.registry import CoreConfig
from fusesched.policies.tenancy_policy import TenancyPolicy

H = 3600.0
TENANCY = TenancyConfig.from_dict(two_tenant_tenancy({"cpu": 512, "nvidia.com/gpu": 64}))


def core(
    half_life_s: float = 2 * H, gpu_weight: float = 10.0, tenancy: bool = True
) -> SchedulerCore:
    policy = TenancyPolicy(TENANCY, half_life_s=half_life_s, recalc_s=1.0, gpu_weight=gpu_weight)
    config = CoreConfig(queue_order="fcfs", backfill="none", tenancy=policy if tenancy else None)
    out = SchedulerCore(config)
    out.handle(NodeAdded(node("n0").cpu(256).gpu(32).build()), 0.0)
    return out


def spec(job_id: str, tenant: str, queue: str, user: str, **resources: object) -> JobSpec:
    built = job(job_id).tasks(1, **resources).queue(queue).user(user).build()  # type: ignore[arg-type]
    return replace(built, tenant=tenant)


def ran(core: SchedulerCore, runs: list[tuple[JobSpec, float, float]], now: float) -> None:
    """Run each job from its start to its end through ``core`` (room for all), up to ``now``."""
    times = sorted({t for _, s, e in runs for t in (s, e)} | {now})
    for t in times:
        for s, start, end in runs:
            if end == t:
                core.handle(JobExited(s.id, 0), t)
            if start == t:
                core.handle(JobSubmitted(s), t)
        started = {d.job_id for d in core.cycle(t) if isinstance(d, StartJob)}
        assert started == {s.id for s, start, _ in runs if start == t}


def recalled(runs: list[tuple[JobSpec, float, float]]) -> UsageRecalled:
    return UsageRecalled(
        tuple(EndedRuns(s.tenant, s.queue, s.user, s.total, ((b, e),)) for s, b, e in runs)
    )


def usage(core: SchedulerCore, now: float) -> dict[tuple[str, ...], float]:
    assert core.tenants is not None
    return core.tenants.tracker.snapshot(now)


CPU4 = {"cpu": 4}
GPU2 = {"cpu": 2, "gpu": 2}


@pytest.mark.parametrize(
    ("half_life_s", "gpu_weight", "runs", "now"),
    [
        # one CPU job, ended an hour ago
        (2 * H, 10.0, [(("ml", "train", "alice", CPU4), 0.0, H)], 2 * H),
        # CPU and GPU jobs of two tenants and three users, overlapping, ended at other times
        (
            2 * H,
            10.0,
            [
                (("ml", "train", "alice", GPU2), 0.0, 3 * H),
                (("ml", "train", "bob", CPU4), H, 2 * H),
                (("phys", "sim", "carol", {"cpu": 16}), 0.5 * H, 4 * H),
                (("ml", "train", "alice", CPU4), 3 * H, 3.5 * H),
            ],
            6 * H,
        ),
        # another GPU weight; the week's default half-life
        (7 * 86400.0, 3.0, [(("phys", "sim", "dan", GPU2), 0.0, 20 * H)], 50 * H),
        # no decay
        (math.inf, 10.0, [(("ml", "train", "alice", GPU2), 0.0, H)], 1000 * H),
    ],
)
def test_recalled_runs_weigh_what_they_weighed_when_run(
    half_life_s: float,
    gpu_weight: float,
    runs: list[tuple[tuple[str, str, str, dict[str, int]], float, float]],
    now: float,
) -> None:
    specs = [
        (spec(f"j{i}", t, q, u, **res), start, end)
        for i, ((t, q, u, res), start, end) in enumerate(runs)
    ]
    never_restarted = core(half_life_s, gpu_weight)
    ran(never_restarted, specs, now)
    restarted = core(half_life_s, gpu_weight)
    assert restarted.handle(recalled(specs), now) == []
    expected = usage(never_restarted, now)
    got = usage(restarted, now)
    assert got.keys() == expected.keys()
    for account, value in expected.items():
        assert got[account] == pytest.approx(value, rel=1e-12), account
    factors = restarted.tenants.factors([], now)  # type: ignore[union-attr]
    assert factors.order() == never_restarted.tenants.factors([], now).order()  # type: ignore[union-attr]


@pytest.mark.parametrize(
    ("runs", "expected"),
    [
        # memory only: billed nothing, so no account appears (as while it ran)
        (EndedRuns("ml", "train", "alice", Resources.parse({"memory": "4Gi"}), ((0.0, H),)), {}),
        # a run of no length, one that ends before it starts: nothing
        (EndedRuns("ml", "train", "alice", Resources.parse(CPU4), ((H, H), (H, 0.0))), {}),
        # a run that ends after now (a clock set back) counts up to now: 4 cores for an hour
        (
            EndedRuns("ml", "train", "alice", Resources.parse(CPU4), ((0.0, 5 * H),)),
            {("lab", "ml", "train", "alice"): 4 * H},
        ),
        # half a GPU is half the GPU weight; GPUs and shares of a second group add up
        (
            EndedRuns(
                "ml", "train", "bob", Resources.parse({"fusesched.io/gpu-milli": 500}), ((0.0, H),)
            ),
            {("lab", "ml", "train", "bob"): 0.5 * 10 * H},
        ),
        (
            EndedRuns(
                "ml",
                "train",
                "bob",
                Resources.parse({"cpu": 1, "gpu": 1}) + Resources.parse({"cpu": 3}),
                ((0.0, H),),
            ),
            {("lab", "ml", "train", "bob"): (4 + 10) * H},
        ),
        # a queue outside the configuration: the account the gate gives such jobs
        (
            EndedRuns("ghost", "old", "eve", Resources.parse(CPU4), ((0.0, H),)),
            {("", "ghost", "old", "eve"): 4 * H},
        ),
    ],
)
def test_what_each_run_is_charged_and_to_whom(
    runs: EndedRuns, expected: dict[tuple[str, ...], float]
) -> None:
    restarted = core(half_life_s=math.inf)
    restarted.handle(UsageRecalled((runs,)), H)
    leaves = {a: v for a, v in usage(restarted, H).items() if len(a) == 4}
    assert leaves == pytest.approx(expected)


def test_a_core_without_tenancy_takes_it_and_charges_nothing() -> None:
    plain = core(tenancy=False)
    runs = EndedRuns("ml", "train", "alice", Resources.parse(CPU4), ((0.0, H),))
    assert plain.handle(UsageRecalled((runs,)), H) == []
    assert plain.tenants is None


@pytest.mark.parametrize(
    ("half_life_s", "now", "since"),
    [
        (H, 100 * H, 100 * H - RECALLED_HALF_LIVES * H),
        (7 * 86400.0, 0.0, -RECALLED_HALF_LIVES * 7 * 86400.0),
        (math.inf, 100 * H, -math.inf),
    ],
)
def test_runs_are_recalled_from_twenty_half_lives_back(
    half_life_s: float, now: float, since: float
) -> None:
    assert RECALLED_HALF_LIVES == 20
    assert recalled_since(half_life_s, now) == since
    # what such a run still weighs: under one millionth
    assert 0.5 ** ((now - since) / half_life_s) < 1e-6 or math.isinf(half_life_s)
