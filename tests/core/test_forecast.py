"""Expected start times (core/forecast.py): the core projected forward on a copy."""

from __future__ import annotations

import random
from dataclasses import replace

import pytest
from tests.core.test_tenancy_core import core_with, tenancy

from builders import cancel, exited, job, make_core, node, node_state, nodes, simulate, submit
from fusesched.core.forecast import clone, forecast
from fusesched.model.events import JobHoldRequested, JobSubmitted, NodeAdded, PreemptJob, StartJob
from fusesched.model.node import NodeState
from fusesched.model.phases import JobPhase


def two_busy_nodes(**settings: object):
    """n0 busy until 100, n1 until 300 (4 CPUs each), then a queue behind them."""
    core = make_core(nodes(2, cpu=4), **settings)
    core.step(0.0, submit(job("a").tasks(1, cpu=4).walltime(100).build()))
    core.step(0.0, submit(job("b").tasks(1, cpu=4).walltime(300).build()))
    core.step(
        10.0,
        submit(
            job("wide").tasks(2, cpu=4).walltime(50).build(),
            job("short").tasks(1, cpu=4).walltime(100).build(),
            job("after").tasks(1, cpu=1).walltime(10).after_ok("a").build(),
            job("held").tasks(1, cpu=1).walltime(10).build(),
            job("huge").tasks(1, cpu=64).walltime(10).build(),
        ),
    )
    core.handle(JobHoldRequested("held", "test"), 10.0)
    return core


def test_expected_starts_follow_the_estimates_and_backfilling():
    core = two_busy_nodes(backfill="easy", reject_unschedulable=False)
    got = forecast(core, 20.0)
    starts = {s.job_id: s for s in got.starts}
    assert starts["wide"].start == 300.0  # needs both nodes: when b ends
    assert starts["wide"].nodes == ("n0", "n1")
    # backfilled into n0's gap: it ends (200) before the wide job's reservation (300)
    assert starts["short"].start == 100.0 and starts["short"].nodes == ("n0",)
    # its dependency ends at 100, and short takes n0 whole then: it fits after short (200)
    assert starts["after"].start == 200.0
    assert "held" not in starts and "held" not in got.beyond
    assert "huge" not in starts  # fits no node: never starts
    assert [s.start for s in got.starts] == sorted(s.start for s in got.starts)
    assert got.complete and got.beyond == ("huge",)


def test_the_live_core_is_left_as_it_was():
    core = two_busy_nodes(backfill="easy", reject_unschedulable=False)

    def state():
        return {
            j: (r.phase, r.start_time, list(r.steps), set(r.waiting_on), r.allocation)
            for j, r in core.jobs.items()
        }

    before = state()
    running, cycles = core.running.ids(), core.stats.cycles
    forecast(core, 20.0)
    assert state() == before
    assert core.running.ids() == running and core.stats.cycles == cycles
    # and it schedules on as if nothing happened
    out = core.step(100.0, [exited("a")])
    assert {d.job_id for d in out if isinstance(d, StartJob)} == {"short"}


def test_clone_shares_ended_records_and_specs():
    core = make_core(nodes(1, cpu=4))
    core.step(0.0, submit(job("x").tasks(1, cpu=4).walltime(5).build()))
    core.step(5.0, [exited("x")])
    core.step(6.0, submit(job("y").tasks(1, cpu=4).walltime(5).build()))
    copy = clone(core)
    assert copy.jobs["x"] is core.jobs["x"]  # ended: never changed again
    assert copy.jobs["y"] is not core.jobs["y"] and copy.jobs["y"].spec is core.jobs["y"].spec


def test_horizon_and_step_budget():
    core = two_busy_nodes(backfill="easy", reject_unschedulable=False)
    short = forecast(core, 20.0, horizon_s=150.0)  # up to 170: only short's start (100)
    assert [s.job_id for s in short.starts] == ["short"]
    assert short.beyond == ("after", "huge", "wide") and short.complete
    budget = forecast(core, 20.0, max_steps=1)
    assert not budget.complete and budget.starts == ()
    with pytest.raises(ValueError, match="horizon must be positive"):
        forecast(core, 20.0, horizon_s=0)


def test_nodes_that_wake_up_count_from_their_wake_time():
    core = make_core([node("n0").cpu(4).build(), node("n1").cpu(4).build()])
    core.handle(node_state("n1", NodeState.SUSPENDED), 0.0)
    core.step(0.0, submit(job("a").tasks(1, cpu=4).walltime(1000).build()))
    core.step(1.0, submit(job("b").tasks(1, cpu=4).walltime(10).build()))
    asleep = forecast(core, 2.0)
    assert {s.job_id: s.start for s in asleep.starts} == {"b": 1000.0}
    awake = forecast(core, 2.0, wake_s={"n1": 60.0, "unknown": 1.0})
    assert [(s.job_id, s.start, s.nodes) for s in awake.starts] == [("b", 62.0, ("n1",))]


@pytest.mark.parametrize(
    "settings",
    [
        {"backfill": "none"},
        {"backfill": "easy"},
        {"backfill": "conservative"},
        {"backfill": "easy", "queue_order": "multifactor"},
        {"backfill": "easy", "placement": "best-fit"},
    ],
)
@pytest.mark.parametrize("seed", range(4))
def test_a_projection_is_exact_when_every_job_runs_its_limit(settings, seed):
    """Jobs that run exactly their limits, all submitted before the forecast: the real run
    starts every job when the forecast said, on the nodes it said."""
    rng = random.Random(seed)
    cluster = nodes(6, cpu=8)
    jobs = []
    for i in range(40):
        limit = float(rng.choice([30, 60, 120, 300, 600]))
        spec = (
            job(f"j{i}")
            .tasks(rng.randint(1, 3), cpu=rng.choice([2, 4, 8]))
            .walltime(limit)
            .at(float(rng.randint(0, 50)))
            .user(rng.choice(["ann", "bob", "cy"]))
            .build()
        )
        jobs.append((spec, limit))
    run = simulate(cluster, jobs, **settings)
    truth = {d.job_id: (t, d) for t, d in run.decisions if isinstance(d, StartJob)}
    # replay up to t=50 (every job submitted), forecast, compare with what really happened
    partial = simulate(cluster, jobs, stop_at=50.0, **settings)
    got = forecast(partial.core, 50.0)
    waiting = [j for j, r in partial.core.jobs.items() if r.phase is JobPhase.QUEUED]
    assert waiting, "the case should leave a queue"
    names = partial.core.cluster.names
    for s in got.starts:
        when, decision = truth[s.job_id]
        rows = sorted({int(r) for g in decision.groups for r in g.rows.tolist()})
        assert (s.start, s.nodes) == (when, tuple(names[r] for r in rows)), s.job_id
    assert {s.job_id for s in got.starts} == set(waiting)


def test_jobs_being_stopped_end_now_and_preempted_ones_within_their_grace():
    core = make_core(nodes(1, cpu=4), backfill="easy")
    core.step(0.0, submit(job("long").tasks(1, cpu=4).walltime(86400).build()))
    core.step(1.0, submit(job("next").tasks(1, cpu=4).walltime(60).build()))
    core.step(2.0, [cancel("long")])  # its tasks are being stopped
    assert [(s.job_id, s.start) for s in forecast(core, 3.0).starts] == [("next", 3.0)]
    gate = core_with(tenancy({"a": (4, 4, None), "b": (4, 4, None)}), gpus=8)
    borrower = job("borrower").tasks(1, cpu=1, gpu=8).queue("a").walltime(3600).build()
    gate.step(0.0, [JobSubmitted(borrower)])
    owner = job("owner").tasks(1, cpu=1, gpu=4).queue("b").walltime(60).at(10).build()
    (notice,) = [d for d in gate.step(10.0, [JobSubmitted(owner)]) if isinstance(d, PreemptJob)]
    # the victim stops within its grace (counted from the projection, an upper bound), not
    # at its hour's limit
    got = forecast(gate, 11.0).starts
    assert [(s.job_id, s.start) for s in got] == [("owner", 11.0 + notice.grace_s)]


def test_a_job_not_submitted_gets_its_start_and_the_core_is_left_alone():
    """``sbatch --test-only``: the extra job is projected in the copy only; the projection
    stops once it has started; a job the core refuses says why."""
    core = two_busy_nodes(backfill="easy", reject_unschedulable=True)
    trial = job("trial").tasks(1, cpu=4).walltime(30).build()
    got = forecast(core, 20.0, extra=[trial])
    # behind short (100-200 on n0) and after (200-210, 1 CPU), before wide's reservation
    assert {s.job_id: s.start for s in got.starts}["trial"] == 210.0
    assert "trial" not in core.jobs
    assert "wide" not in {s.job_id for s in got.starts}  # (300: not needed to answer)
    members = job("many").tasks(1, cpu=4).walltime(30).array(0, 1).build()
    starts = {s.job_id: s.start for s in forecast(core, 20.0, extra=[members]).starts}
    assert (starts["many_0"], starts["many_1"]) == (210.0, 240.0)
    big = job("big").tasks(1, cpu=64).walltime(10).build()
    refused = forecast(core, 20.0, extra=[big])
    assert [j for j, _ in refused.rejected] == ["big"] and "big" not in core.jobs


@pytest.mark.parametrize(
    "settings",
    [
        {"backfill": "easy"},
        {"backfill": "conservative", "placement": "best-fit"},
        {"backfill": "easy", "queue_order": "multifactor"},
    ],
)
def test_projections_between_steps_change_nothing_the_core_decides(settings):
    """Two cores fed the same events, one projected before every step: the same decisions
    (a projection works on a copy that shares nothing it changes)."""
    rng = random.Random(7)
    specs = []
    for i in range(60):
        limit = float(rng.choice([30, 60, 120, 300]))
        spec = (
            job(f"j{i}")
            .tasks(rng.randint(1, 3), cpu=rng.choice([2, 4, 8]))
            .walltime(limit)
            .at(float(i * 7))
            .user(rng.choice(["ann", "bob"]))
            .build()
        )
        specs.append((spec, limit * rng.uniform(0.2, 1.0)))
    plain = simulate(nodes(4, cpu=8), specs, **settings)
    watched = make_core(nodes(4, cpu=8), **settings)
    decisions = []
    pending = sorted(specs, key=lambda s: s[0].submit_time)
    ends: list[tuple[float, str]] = []
    i = 0
    while i < len(pending) or ends:
        now = min(
            min((e for e, _ in ends), default=float("inf")),
            pending[i][0].submit_time if i < len(pending) else float("inf"),
        )
        events = [exited(j) for e, j in sorted(ends) if e == now]
        ends = [(e, j) for e, j in ends if e != now]
        while i < len(pending) and pending[i][0].submit_time == now:
            events.extend(submit(pending[i][0]))
            i += 1
        forecast(watched, now)
        for decision in watched.step(now, events):
            decisions.append((now, decision))
            if isinstance(decision, StartJob):
                took = dict((s.id, rt) for s, rt in specs)[decision.job_id]
                ends.append((now + took, decision.job_id))
    assert [(t, d.job_id, type(d).__name__) for t, d in decisions] == [
        (t, d.job_id, type(d).__name__) for t, d in plain.decisions
    ]


def test_a_job_waiting_for_its_begin_time_starts_then_in_the_projection():
    core = make_core(nodes(1, cpu=4))
    later = job("later").tasks(1, cpu=4).walltime(60).build()
    core.step(0.0, submit(replace(later, begin_time=500.0)))
    assert [(s.job_id, s.start) for s in forecast(core, 1.0).starts] == [("later", 500.0)]


def test_a_new_resource_column_in_the_copy_leaves_the_live_shapes_alone():
    core = two_busy_nodes(backfill="easy", reject_unschedulable=False)
    widths = {j: [g.per_task.shape for g in r.groups or ()] for j, r in core.jobs.items()}
    sim = clone(core)
    sim.handle(NodeAdded(node("g0").cpu(4).gpu(2).build()), 20.0)
    assert {j: [g.per_task.shape for g in r.groups or ()] for j, r in core.jobs.items()} == widths
    assert sim.jobs["wide"].groups[0].per_task.shape != core.jobs["wide"].groups[0].per_task.shape
