"""Advance reservations in the core: maintenance windows keep long jobs off their nodes while
short ones still run before them; a reservation's own jobs run only inside it, only on its
nodes; deletion and the end give the nodes back. The rules hold with every backfill policy,
checked start by start on seeded random workloads."""

from __future__ import annotations

import heapq
import math
import random
from dataclasses import replace

import pytest

from builders import (
    Run,
    exited,
    job,
    make_core,
    node,
    nodes,
    one_queue_tenancy,
    run_script,
    submit,
)
from fusesched.core.forecast import forecast
from fusesched.core.scheduler import SchedulerCore
from fusesched.model.events import (
    Event,
    JobExited,
    JobSubmitted,
    JobUpdateRequested,
    ReservationDeleted,
    ReservationSet,
    ReserveJob,
    StartJob,
)
from fusesched.model.job import JobSpec
from fusesched.model.phases import JobPhase
from fusesched.model.reservation import Reservation, when
from fusesched.model.tenancy import TenancyConfig
from fusesched.policies.registry import CoreConfig
from fusesched.policies.tenancy_policy import TenancyPolicy

BACKFILLS = ["none", "easy", "conservative"]
FOUR = nodes(4, cpu=4)  # n0..n3


def maint(
    name: str = "m", on: tuple[str, ...] = ("n0", "n1"), start: float = 100, end: float = 200
) -> ReservationSet:
    return ReservationSet(Reservation(name, on, start, end))


def into(spec: JobSpec, reservation: str, user: str = "alice") -> JobSpec:
    return replace(spec, reservation=reservation, user=user)


def nodes_of(run: Run, job_id: str) -> set[str]:
    return set(run.starts()[job_id].nodes)


# ============================================================================ maintenance


@pytest.mark.parametrize("backfill", ["easy", "conservative"])
def test_a_maintenance_window_keeps_long_jobs_off_and_lets_short_ones_run_before(
    backfill: str,
) -> None:
    whole = [job(f"long{k}").tasks(1, cpu=4).walltime(500).build() for k in range(4)]
    short = [job(f"short{k}").tasks(1, cpu=4).walltime(50).build() for k in range(2)]
    run = run_script(
        FOUR, [(0, maint()), (10, submit(*whole)), (20, submit(*short))], backfill=backfill
    )
    starts = run.start_times()
    # two long jobs on the free nodes; the reserved ones take only jobs ending before 100
    assert {j for j in starts if j.startswith("long")} == {"long0", "long1"}
    assert {n for j in ("long0", "long1") for n in nodes_of(run, j)} == {"n2", "n3"}
    assert starts["short0"] == 20 and starts["short1"] == 20
    assert {n for j in ("short0", "short1") for n in nodes_of(run, j)} == {"n0", "n1"}
    # the short ones end; nothing long starts on the reserved nodes before the end
    run.step(70, exited("short0"), exited("short1"))
    run.step(150, [])
    assert "long2" not in run.start_times()
    assert run.core.next_wakeup() == 200
    run.step(200, [])
    assert run.start_times()["long2"] == 200 and run.start_times()["long3"] == 200
    assert run.core.bookings is None  # the end: nothing left of it


def test_ending_exactly_at_the_start_is_too_late() -> None:
    run = run_script(
        FOUR[:1], [(0, maint(on=("n0",))), (50, submit(job("j").walltime(50).build()))]
    )
    assert run.start_times() == {}
    run = run_script(
        FOUR[:1], [(0, maint(on=("n0",))), (50, submit(job("j").walltime(49).build()))]
    )
    assert run.start_times() == {"j": 50}


def test_a_job_without_a_time_limit_waits_for_the_end() -> None:
    run = run_script(
        FOUR[:1],
        [
            (0, maint(on=("n0",), start=10_000, end=10_100)),
            (1, submit(job("j").walltime(None).build())),
        ],
    )
    assert run.start_times() == {}
    run.step(10_100, [])
    assert run.start_times() == {"j": 10_100}


def test_a_waiting_job_loses_the_reserved_nodes_as_the_window_nears() -> None:
    """A job that could end before the start when submitted, but waits past that point."""
    run = run_script(
        FOUR[:1],
        [
            (0, maint(on=("n0",))),
            (0, submit(job("blk").tasks(1, cpu=4).walltime(80).build())),
            (1, submit(job("j").tasks(1, cpu=4).walltime(30).build())),
        ],
        backfill="easy",
    )
    run.step(20, [])  # (blk's own moment to lose the nodes: it runs already)
    assert run.core.next_wakeup() == 70  # j must start before 70 to end before 100
    run.step(70, [])
    run.step(75, exited("blk"))
    assert "j" not in run.start_times()
    run.step(200, [])
    assert run.start_times()["j"] == 200


def test_running_jobs_are_not_touched() -> None:
    run = run_script(
        FOUR[:1], [(0, submit(job("r").walltime(1000).build())), (1, maint(on=("n0",)))]
    )
    run.step(150, [])
    assert run.phase("r") is JobPhase.RUNNING and run.stopped() == []


def test_deleting_the_reservation_gives_the_nodes_back() -> None:
    run = run_script(
        FOUR[:1], [(0, maint(on=("n0",))), (1, submit(job("j").walltime(500).build()))]
    )
    assert run.start_times() == {}
    run.step(2, ReservationDeleted("m"))
    assert run.start_times() == {"j": 2}
    assert run.core.jobs["j"].spec.placement.anti_affinity == ()


def test_a_new_time_limit_is_checked_again() -> None:
    run = run_script(
        FOUR[:1],
        [
            (0, submit(job("blk").walltime(10).tasks(1, cpu=4).build())),
            (1, maint(on=("n0",))),
            (2, submit(job("j").tasks(1, cpu=4).walltime(500).build())),
        ],
    )
    run.step(3, JobUpdateRequested("j", walltime_s=20))
    run.step(10, exited("blk"))
    assert run.start_times()["j"] == 10


# ============================================================ a reservation's own jobs


def users_res(
    start: float = 100, end: float = 200, on: tuple[str, ...] = ("n0", "n1")
) -> ReservationSet:
    return ReservationSet(
        Reservation("proj", on, start, end, users=("alice",), tenants=("physics",))
    )


@pytest.mark.parametrize("backfill", BACKFILLS)
def test_its_jobs_run_only_inside_it_on_its_nodes(backfill: str) -> None:
    spec = into(job("in").tasks(2, cpu=4).walltime(50).build(), "proj")
    run = run_script(FOUR, [(0, users_res()), (10, submit(spec))], backfill=backfill)
    rec = run.core.jobs["in"]
    assert rec.phase is JobPhase.QUEUED
    assert rec.steps[-1][3] == "submitted; reservation proj starts at 100"
    assert run.core.next_wakeup() == 100
    run.step(99, [])
    assert run.start_times() == {}
    run.step(100, [])
    assert run.start_times() == {"in": 100}
    assert nodes_of(run, "in") == {"n0", "n1"}


def test_its_jobs_wait_for_its_nodes_even_when_others_are_free() -> None:
    first = into(job("a").tasks(1, cpu=4).walltime(50).build(), "proj")
    second = into(job("b").tasks(1, cpu=4).walltime(50).build(), "proj")
    third = into(job("c").tasks(1, cpu=4).walltime(50).build(), "proj")
    run = run_script(FOUR, [(0, users_res(start=0)), (1, submit(first, second, third))])
    assert set(run.start_times()) == {"a", "b"}
    run.step(51, exited("a"))
    assert run.start_times()["c"] == 51 and nodes_of(run, "c") <= {"n0", "n1"}


def test_the_tenant_admits_too_and_others_are_refused() -> None:
    by_tenant = replace(job("t").build(), reservation="proj", user="bob", tenant="physics")
    stranger = replace(job("s").build(), reservation="proj", user="bob")
    run = run_script(FOUR, [(0, users_res(start=0)), (1, submit(by_tenant, stranger))])
    assert "t" in run.start_times()
    assert run.rejected() == {"s": "user 'bob' (tenant 'default') may not use reservation proj"}


def test_unknown_reservations_and_maintenance_ones_are_refused() -> None:
    run = run_script(
        FOUR,
        [(0, maint()), (1, submit(into(job("u").build(), "nope"), into(job("m1").build(), "m")))],
    )
    assert run.rejected() == {
        "u": "reservation 'nope' does not exist (or has ended)",
        "m1": "reservation m is a maintenance reservation: no job runs in it",
    }
    # without any reservation at all as well
    run = run_script(FOUR, [(1, submit(into(job("u").build(), "nope")))])
    assert "u" in run.rejected()


def test_a_job_too_big_for_its_nodes_is_refused() -> None:
    spec = into(job("big").tasks(3, cpu=4).build(), "proj")
    run = run_script(FOUR, [(0, users_res()), (1, submit(spec))])
    assert run.rejected()["big"].startswith("does not fit on the nodes of reservation proj")


def test_outsiders_keep_off_while_it_runs_and_its_jobs_are_rejected_at_its_end() -> None:
    waiting = into(job("w").tasks(2, cpu=4).walltime(500).build(), "proj")
    later = into(job("l").tasks(2, cpu=4).walltime(500).build(), "proj")
    outsider = job("o").tasks(4, cpu=4).walltime(10).build()
    run = run_script(
        FOUR, [(0, users_res(start=0)), (1, submit(waiting, later, outsider))], backfill="easy"
    )
    assert set(run.start_times()) == {"w"}  # l waits for w; o may not use n0, n1
    run.step(200, [])
    assert run.rejected() == {"l": "reservation proj ended before the job started"}
    assert run.phase("w") is JobPhase.RUNNING  # running on: not touched
    run.step(501, exited("w"))
    assert run.start_times()["o"] == 501


def test_deleting_it_rejects_its_waiting_jobs() -> None:
    spec = into(job("in").build(), "proj")
    run = run_script(FOUR, [(0, users_res()), (1, submit(spec))])
    run.step(2, ReservationDeleted("proj"))
    assert run.rejected() == {"in": "reservation proj deleted"}
    assert run.core.bookings is None


def test_overlapping_reservations_and_duplicates_are_refused() -> None:
    core = make_core(FOUR)
    core.handle(maint(), 0)
    with pytest.raises(ValueError, match="already exists"):
        core.handle(maint(on=("n3",)), 0)
    with pytest.raises(ValueError, match="overlaps reservation 'm' on n1"):
        core.handle(maint("m2", on=("n1", "n2"), start=150, end=300), 0)
    core.handle(maint("m3", on=("n1", "n2"), start=200, end=300), 0)  # back to back: fine
    with pytest.raises(KeyError):
        core.handle(ReservationDeleted("nope"), 0)


def test_the_projection_respects_it() -> None:
    core = make_core(FOUR[:1])
    core.step(
        0,
        [
            maint(on=("n0",)),
            JobSubmitted(job("long").walltime(300).build()),
            JobSubmitted(into(job("in").build(), "m2")),
        ],
    )
    core.step(
        1,
        [
            ReservationSet(Reservation("r2", ("n0",), 500, 600, users=("alice",))),
            JobSubmitted(into(job("mine").walltime(50).build(), "r2")),
        ],
    )
    starts = {s.job_id: s.start for s in forecast(core, 1).jobs}
    # long (300 s) cannot run from m's end at 200 without reaching r2's start at 500
    assert starts == {"long": 600.0, "mine": 500.0}


# ============================================================================ found in review


def test_a_requeue_off_a_failed_node_waits_for_the_window_to_end() -> None:
    run = run_script(
        nodes(2, cpu=4),
        [(0, maint(on=("n0",))), (1, submit(job("j").tasks(1, cpu=4).walltime(500).build()))],
    )
    assert nodes_of(run, "j") == {"n1"}  # (500 s would run into m on n0)
    run.step(
        10, JobExited("j", exit_code=1, reason="gpu fault", requeue=True, exclude_nodes=("n1",))
    )
    assert "j" not in run.rejected()  # n0 is only reserved until 200: it waits for it
    run.step(200, [])
    assert run.start_times()["j"] == 200 and nodes_of(run, "j") == {"n0"}


def test_a_requeue_off_its_reservations_only_node_is_rejected() -> None:
    spec = into(job("in").tasks(1, cpu=4).walltime(50).build(), "proj")
    run = run_script(FOUR, [(0, users_res(start=0, on=("n0",))), (1, submit(spec))])
    assert nodes_of(run, "in") == {"n0"}
    run.step(5, JobExited("in", exit_code=1, reason="bad", requeue=True, exclude_nodes=("n0",)))
    assert run.rejected()["in"].endswith("(after excluding failed nodes)")


def _flavoured_core() -> SchedulerCore:
    config = one_queue_tenancy({"cpu": 16})
    config["flavors"] = [{"name": "any", "resources": ["cpu"], "node_labels": {"zone": "a"}}]
    tenancy = TenancyPolicy(TenancyConfig.from_dict(config))
    core = make_core(nodes(2, cpu=4, zone="a"), CoreConfig(backfill="easy", tenancy=tenancy))
    core.step(0, [maint(on=("n0", "n1"))])
    spec = replace(job("long").tasks(1, cpu=4).walltime(500).build(), tenant="ml", queue="train")
    core.step(1, [JobSubmitted(spec)])
    core.step(2, [])
    return core


def test_with_quota_flavours_a_job_waiting_for_the_end_is_expected_at_the_end() -> None:
    core = _flavoured_core()
    assert core.jobs["long"].never_fits == ""  # it waits for the window's end: it fits
    assert [(s.job_id, s.start) for s in forecast(core, 2).jobs] == [("long", 200.0)]
    started = [d.job_id for d in core.step(200, []) if isinstance(d, StartJob)]
    assert started == ["long"]


def test_nodes_the_host_name_label_does_not_single_out_are_refused() -> None:
    pool_node = node("k8s:w1").cpu(4).label("kubernetes.io/hostname", "w1").build()
    core = make_core([pool_node, *nodes(1, cpu=4)])
    with pytest.raises(ValueError, match=r"labelled kubernetes\.io/hostname=w1"):
        core.handle(maint(on=("k8s:w1",)), 0)
    relabelled = node("n5").cpu(4).label("kubernetes.io/hostname", "n0").build()
    core = make_core([*nodes(1, cpu=4), relabelled])  # n5 would count as n0
    with pytest.raises(ValueError, match="cannot single out n0"):
        core.handle(maint(on=("n0",)), 0)
    assert core.bookings is None


def test_an_ended_reservation_no_cycle_has_ended_yet_is_replaced() -> None:
    core = make_core(FOUR)
    core.step(0, [maint(on=("n0",), start=0, end=100)])
    core.handle(maint(on=("n0",), start=100, end=500), 100)  # same name, overlapping its end
    assert core.bookings is not None and core.bookings.by_name["m"].end == 500
    core.handle(JobSubmitted(job("long").tasks(1, cpu=16).walltime(50).build()), 100)
    assert not [d for d in core.cycle(100) if isinstance(d, StartJob)]  # n0 is kept


def test_an_ended_reservation_handed_over_again_rejects_its_jobs_as_ended() -> None:
    # (a restarted controller hands over every stored one, then the recovered jobs)
    run = run_script(
        FOUR,
        [(500, [users_res(start=100, end=200), *submit(into(job("in").build(), "proj"))])],
    )
    assert run.rejected() == {"in": "reservation proj ended before the job started"}
    assert run.core.bookings is None


def test_jobs_share_the_terms_and_only_waiting_jobs_are_walked() -> None:
    done = job("done").tasks(1, cpu=4).walltime(5).build()
    run = run_script(FOUR, [(0, submit(done)), (5, exited("done"))])
    waiting = [job(f"w{k}").tasks(4, cpu=4).walltime(500).build() for k in range(3)]
    run.step(6, [maint(on=("n0",), start=300, end=400), *submit(*waiting)])
    run.step(7, maint("m2", on=("n1",), start=300, end=400))
    marks = [run.core.jobs[f"w{k}"].booked for k in range(3)]
    assert marks[0] is not None and marks[0][1] is not None
    assert marks[0][1].values == ("n0", "n1")
    assert all(m is not None and m[1] is marks[0][1] for m in marks)  # one term object
    assert run.core.bookings is not None and set(run.core.bookings.waiting) == {
        "w0",
        "w1",
        "w2",
    }


def test_times_past_year_9999_and_empty_names_are_refused() -> None:
    with pytest.raises(ValueError, match="before the end of year 9999"):
        Reservation("far", ("n0",), 3e11, 3e11 + 10, users=("alice",))
    with pytest.raises(ValueError, match="user or tenant name is empty"):
        Reservation("r", ("n0",), 0, 10, users=("",))
    with pytest.raises(ValueError, match="user or tenant name is empty"):
        Reservation("r", ("n0",), 0, 10, tenants=("",))
    assert when(1e300) == "1e+300"  # (a running job's end: shown, not an OverflowError)


# ============================================================================ by property


def _check(
    spec: JobSpec, t: float, on: set[str], live: dict[str, Reservation], deleted: set[str]
) -> None:
    """The rules, for one start (``live``: the reservations created by ``t``)."""
    w = spec.walltime_s
    for res in live.values():
        if res.name in deleted or t >= res.end:
            continue
        if res.name == spec.reservation:
            assert res.start <= t and on <= set(res.nodes), (spec.id, t, on, res)
            continue
        if on & set(res.nodes):
            assert w is not None and t + w < res.start, (spec.id, t, on, res)
    if spec.reservation is not None:
        res = live[spec.reservation]
        assert spec.reservation not in deleted and res.start <= t < res.end


@pytest.mark.parametrize(
    ("backfill", "quotas"), [*((b, False) for b in BACKFILLS), ("easy", True), ("none", True)]
)
@pytest.mark.parametrize("seed", range(6))
def test_no_start_breaks_the_rules(backfill: str, quotas: bool, seed: int) -> None:
    """Also with quotas (the tenancy gate rebuilds a job's spec from its flavours').

    And the announced starts (``ReserveJob``, the head's shadow time under EASY, its slot
    in the conservative profile) are never earlier than the real ones: jobs run at most
    their time limits here, so a head that stays the head starts by its promise — unless
    a reservation is created meanwhile (it may push anyone back: promises made before are
    not checked)."""
    rng = random.Random(seed)
    cluster = nodes(6, cpu=4, zone="a")
    tenancy = None
    if quotas:  # (a flavour with node labels: admitted jobs are pinned to its nodes)
        config = one_queue_tenancy({"cpu": 16})
        config["flavors"] = [{"name": "any", "resources": ["cpu"], "node_labels": {"zone": "a"}}]
        tenancy = TenancyPolicy(TenancyConfig.from_dict(config))
    core = make_core(cluster, CoreConfig(backfill=backfill, tenancy=tenancy))
    made = [
        Reservation("m", ("n0", "n1"), 300, 600),
        Reservation("p", ("n2", "n3"), 200, 900, users=("alice",)),
        Reservation("late", ("n0", "n4"), 800, 1200),
    ]
    # (time, order, events): reservations at the start and one deletion, jobs as they come
    agenda: list[tuple[float, int, list[Event]]] = [
        (0, 0, [ReservationSet(made[0]), ReservationSet(made[1])])
    ]
    agenda.append((150, 1, [ReservationSet(made[2])]))
    agenda.append((700, 2, [ReservationDeleted("late")]))
    runtime: dict[str, float] = {}
    for k in range(60):
        at = rng.uniform(0, 1000)
        wall = rng.choice([None, 20.0, 60.0, 150.0, 400.0])
        b = (
            job(f"j{k}")
            .tasks(rng.randint(1, 3), cpu=rng.choice([2, 4]))
            .walltime(wall)
            .user(rng.choice(["alice", "bob"]))
            .at(at)
            .build()
        )
        if b.user == "alice" and rng.random() < 0.3:
            b = replace(b, reservation="p")
        if quotas:
            b = replace(b, tenant="ml", queue="train")
        runtime[b.id] = (wall or 300.0) * rng.uniform(0.3, 1.0)
        agenda.append((at, 10 + k, [JobSubmitted(b)]))
    heapq.heapify(agenda)
    live: dict[str, Reservation] = {}
    deleted: set[str] = set()
    ends: list[tuple[float, str]] = []
    started = 0
    # the head's announced start (ReserveJob) while it stays the head; (job, start, said)
    promised: dict[str, float] = {}
    kept: list[tuple[str, float, float]] = []
    unpromised: list[tuple[str, float]] = []
    t = 0.0
    for _ in range(5000):
        candidates = [
            x
            for x in (
                agenda[0][0] if agenda else None,
                ends[0][0] if ends else None,
                core.next_wakeup(),
            )
            if x is not None and x >= t
        ]
        if not candidates:
            break
        t = min(candidates)
        events: list[Event] = []
        while ends and ends[0][0] <= t:
            events.append(JobExited(heapq.heappop(ends)[1]))
        while agenda and agenda[0][0] <= t:
            for e in heapq.heappop(agenda)[2]:
                if isinstance(e, ReservationSet):
                    live[e.reservation.name] = e.reservation
                elif isinstance(e, ReservationDeleted):
                    deleted.add(e.name)
                events.append(e)
        if any(isinstance(e, ReservationSet) for e in events):
            promised.clear()  # (a new window may delay anyone: promises made before void)
        for d in core.step(t, events):
            if isinstance(d, StartJob):
                started += 1
                spec = core.jobs[d.job_id].spec
                _check(spec, t, set(d.nodes), live, deleted)
                heapq.heappush(ends, (t + runtime[d.job_id], d.job_id))
                said = promised.pop(d.job_id, None)
                if said is not None:
                    kept.append((d.job_id, t, said))
            elif isinstance(d, ReserveJob):
                promised[d.job_id] = d.start_time
        queue = core.queue.records
        head = queue[0] if queue else None
        for job_id in list(promised):  # (a job that is no longer the head has no promise)
            if head is None or head.id != job_id:
                del promised[job_id]
        if head is not None and head.spec.reservation is None and backfill != "none":
            said = core.last_reservation
            if not (said is not None and said[0] == head.id and said[1] < math.inf):
                unpromised.append((head.id, t))
        t = math.nextafter(t, math.inf)
    assert started > 20
    # the planner sees the windows: a head job that starts started no later than it was
    # promised, and one not submitted into a reservation always holds a promise (before
    # the planner knew of them, a head kept off reserved nodes had none, so anything
    # could overtake it, and a promise could fall where the head may not run)
    assert [(j, at, said) for j, at, said in kept if at > said] == []
    assert unpromised == []
    # every job of p either ran inside it or was rejected
    for rec in core.jobs.values():
        if rec.spec.reservation == "p":
            assert rec.phase is not JobPhase.QUEUED
