"""Cluster licenses in the core: a job waits until its licenses are free, holds them while it
runs and gives them back when it ends, is requeued or preempted; EASY and conservative
backfilling do not starve a head that waits for licenses; unknown or too many are refused."""

from __future__ import annotations

from dataclasses import replace

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from builders import Run, exited, job, node, run_script, simulate, submit
from fusesched.core.forecast import forecast
from fusesched.core.scheduler import SchedulerCore
from fusesched.model.events import (
    AdoptedTask,
    JobAdopted,
    JobExited,
    JobSubmitted,
    NodeAdded,
    ReserveJob,
    StartJob,
)
from fusesched.model.job import JobSpec, QoS
from fusesched.model.licenses import LicenseError, normalize, parse_licenses, refusal
from fusesched.model.node import NodeSpec
from fusesched.model.phases import JobPhase
from fusesched.policies.registry import CoreConfig, PolicyError
from fusesched.policies.tenancy_policy import TenancyPolicy
from fusesched.sim.engine import PREEMPTED_EXIT_CODE

from .test_backfill import first_reservations, workloads

BIG = [node("n0").cpu(16).build()]


def lic(job_id: str, cpu: int = 1, walltime: float = 100, **licenses: int) -> JobSpec:
    spec = job(job_id).tasks(1, cpu=cpu).walltime(walltime).build()
    return replace(spec, licenses=tuple(sorted(licenses.items())))


def run(
    backfill: str = "easy", licenses: str = "matlab:2,ansys:1", cluster: list[NodeSpec] = BIG
) -> Run:
    return run_script(cluster, [], backfill=backfill, licenses=parse_licenses(licenses))


# ============================================================================ configuration


def test_parse_licenses() -> None:
    assert parse_licenses("matlab:10,ansys:4") == (("ansys", 4), ("matlab", 10))
    assert parse_licenses("matlab", default=1) == (("matlab", 1),)
    with pytest.raises(LicenseError, match="give a count"):
        parse_licenses("matlab")
    with pytest.raises(LicenseError, match=r"'\|' \(any one of"):
        parse_licenses("matlab:1|ansys:1", default=1)
    with pytest.raises(LicenseError, match="given twice"):
        parse_licenses("matlab:1,matlab:2")
    with pytest.raises(LicenseError, match="whole number"):
        parse_licenses("matlab:x")
    with pytest.raises(LicenseError, match="from 1"):
        parse_licenses("matlab:0")
    with pytest.raises(LicenseError, match="invalid license name"):
        parse_licenses("mat lab:1")


@pytest.mark.parametrize("name", ["matlab\n", "matlab\r", " matlab", "mat/lab", "é", "a" * 65])
def test_a_license_name_is_checked_whole(name: str) -> None:
    """(A ``$`` anchor let a trailing newline through a mapping: JSON, YAML, a twin snapshot.)"""
    with pytest.raises(LicenseError, match="invalid license name"):
        normalize({name: 1})
    with pytest.raises(PolicyError, match="invalid license name"):
        CoreConfig(licenses={name: 1})  # type: ignore[arg-type]


def test_core_config_validates_licenses() -> None:
    assert CoreConfig(licenses=(("b", 1), ("a", 2))).licenses == (("a", 2), ("b", 1))
    with pytest.raises(PolicyError, match="licenses: license a: the count"):
        CoreConfig(licenses=(("a", 0),))
    assert SchedulerCore(CoreConfig()).licenses is None  # nothing configured: no ledger


def test_refusal_says_why() -> None:
    configured = (("matlab", 2),)
    assert refusal(configured, (("matlab", 2),)) == ""
    assert "not configured" in refusal(configured, (("ansys", 1),))
    assert "the cluster has 2 in all" in refusal(configured, (("matlab", 3),))
    assert "none" in refusal((), (("matlab", 1),))


@pytest.mark.parametrize("backfill", ["easy", "conservative"])
def test_unknown_or_too_many_licenses_are_rejected(backfill: str) -> None:
    r = run(backfill)
    r.step(0, submit(lic("u", abaqus=1), lic("t", matlab=3)))
    assert "not configured" in r.rejected()["u"]
    assert "the cluster has 2 in all" in r.rejected()["t"]


def test_a_cluster_without_licenses_rejects_a_job_asking_for_one() -> None:
    r = run_script(BIG, [(0, submit(lic("a", matlab=1)))])
    assert "not configured" in r.rejected()["a"]


# ============================================================================ waiting and release


@pytest.mark.parametrize("backfill", ["easy", "conservative", "none"])
def test_a_job_waits_for_its_licenses_and_gets_them_on_end(backfill: str) -> None:
    r = run(backfill)
    r.step(0, submit(lic("a", matlab=2)))
    r.step(1, submit(lic("b", matlab=1)))
    assert list(r.starts()) == ["a"]
    pool = r.core.licenses
    assert pool is not None and pool.used["matlab"] == 2
    assert pool.shortage((("matlab", 1),)) == "waiting for licenses: matlab 1 (0 of 2 free)"
    r.step(50, exited("a"))
    assert r.start_times()["b"] == 50
    assert pool.used["matlab"] == 1
    r.step(60, exited("b"))
    assert pool.used["matlab"] == 0 and not pool.held


def test_jobs_without_licenses_are_not_held_back() -> None:
    r = run("none")
    r.step(0, submit(lic("a", matlab=2), lic("b", matlab=1), lic("c")))
    # strict order: c waits behind b, which waits for its license
    assert list(r.starts()) == ["a"]
    r = run("easy")
    r.step(0, submit(lic("a", matlab=2), lic("b", matlab=1), lic("c")))
    assert list(r.starts()) == ["a", "c"]  # c ends before b could start: backfilled


def test_requeued_job_gives_its_licenses_back() -> None:
    r = run("easy")
    r.step(0, submit(lic("a", matlab=2)))
    r.step(1, submit(lic("b", matlab=2)))
    # a's node failed: requeued with a backoff until t=50, its licenses go to b at once
    r.step(10, JobExited("a", exit_code=1, requeue=True, reason="node failed", not_before=50))
    assert r.start_times()["b"] == 10
    assert r.core.jobs["a"].phase is JobPhase.QUEUED
    r.step(50)  # a may go again, but b holds the licenses: a is reserved for b's end
    assert r.core.jobs["a"].phase is JobPhase.QUEUED
    assert r.reservations()[-1] == ("a", 110)
    r.step(60, exited("b"))
    assert r.core.jobs["a"].phase is JobPhase.RUNNING and r.core.jobs["a"].start_time == 60


def test_cancelled_waiting_job_holds_nothing() -> None:
    r = run("easy")
    r.step(0, submit(lic("a", matlab=2)))
    r.step(1, submit(lic("b", matlab=1)))
    r.core.step(2, [])
    from builders import cancel

    r.step(3, cancel("b"))
    pool = r.core.licenses
    assert pool is not None and pool.used["matlab"] == 2 and list(pool.held) == ["a"]


def _one_queue() -> TenancyPolicy:
    return TenancyPolicy.from_dict(
        {
            "flavors": [{"name": "cpu", "resources": ["cpu"]}],
            "organisations": [
                {
                    "name": "o",
                    "tenants": [
                        {
                            "name": "t",
                            "queues": [
                                {
                                    "name": "default",
                                    "flavors": [
                                        {"name": "cpu", "resources": {"cpu": {"nominal": 64}}}
                                    ],
                                }
                            ],
                        }
                    ],
                }
            ],
        }
    )


def test_preempted_job_gives_its_licenses_to_the_preemptor() -> None:
    tenancy = _one_queue()
    core = SchedulerCore(CoreConfig(backfill="none", tenancy=tenancy, licenses=(("matlab", 1),)))
    core.handle(NodeAdded(node("n0").cpu(2).build()), 0.0)
    low = replace(lic("low", matlab=1), qos=QoS.BRONZE)
    out = core.step(0, [JobSubmitted(low)])
    assert [d.job_id for d in out] == ["low"]
    high = replace(lic("high", cpu=2), qos=QoS.GOLD)
    out = core.step(1, [JobSubmitted(high)])
    assert [type(d).__name__ for d in out] == ["PreemptJob"]  # for its CPUs
    out = core.step(2, [JobExited("low", PREEMPTED_EXIT_CODE)])
    assert [d.job_id for d in out] == ["high"]
    assert core.licenses is not None and core.licenses.used == {"matlab": 0}
    assert core.jobs["low"].phase is JobPhase.QUEUED


def test_a_job_its_licenses_hold_back_preempts_nobody() -> None:
    """Preemption frees nodes, not licenses: a gold job waiting for a license held by a
    bronze one waits for it to end."""
    core = SchedulerCore(
        CoreConfig(backfill="none", tenancy=_one_queue(), licenses=(("matlab", 1),))
    )
    core.handle(NodeAdded(node("n0").cpu(1).build()), 0.0)
    core.step(0, [JobSubmitted(replace(lic("low", matlab=1), qos=QoS.BRONZE))])
    out = core.step(1, [JobSubmitted(replace(lic("high", matlab=1), qos=QoS.GOLD))])
    assert out == []


def test_adopted_jobs_count_their_licenses_again() -> None:
    core = SchedulerCore(CoreConfig(licenses=(("matlab", 2),)))
    core.handle(NodeAdded(node("n0").cpu(16).build()), 0.0)
    old = lic("old", matlab=2)
    core.step(100, [JobAdopted(old, (AdoptedTask("main", "n0"),), 50.0)])
    assert core.licenses is not None and core.licenses.used == {"matlab": 2}
    out = core.step(101, [JobSubmitted(lic("new", matlab=1))])
    assert out == [] or all(d.job_id != "new" for d in out if type(d).__name__ == "StartJob")
    out = core.step(140, [JobExited("old")])
    assert [d.job_id for d in out if type(d).__name__ == "StartJob"] == ["new"]


@pytest.mark.parametrize("backfill", ["easy", "conservative"])
def test_adopted_jobs_over_a_shrunk_total_delay_the_reservation(backfill: str) -> None:
    """The configuration shrank to 2 across a restart while 'old' holds 5 and 'old2' 1:
    when 'old' ends only 1 is free (the other 3 it gives back fill the excess), so a job
    asking for 2 is reserved at 'old2''s end, not at 'old''s — and the long job behind it
    does not take the license it will need (nor crash on a license no longer configured)."""
    core = SchedulerCore(CoreConfig(backfill=backfill, licenses=(("matlab", 2),)))
    core.handle(NodeAdded(node("n0").cpu(16).build()), 0.0)
    old = lic("old", walltime=100, matlab=5, abaqus=3)  # (abaqus: no longer configured)
    old2 = lic("old2", walltime=1000, matlab=1)
    adopted = [JobAdopted(j, (AdoptedTask("main", "n0"),), 50.0) for j in (old, old2)]
    core.step(100, adopted)
    out = core.step(101, [JobSubmitted(lic("new", matlab=2))])
    assert [(d.job_id, d.start_time) for d in out if isinstance(d, ReserveJob)] == [("new", 1050.0)]
    out = core.step(150, [JobExited("old"), JobSubmitted(lic("long", matlab=1, walltime=5000))])
    assert not [d for d in out if isinstance(d, StartJob)]
    out = core.step(1050, [JobExited("old2")])
    assert [d.job_id for d in out if isinstance(d, StartJob)] == ["new"]
    assert core.licenses is not None and core.licenses.used == {"matlab": 2, "abaqus": 0}


# ============================================================================ no starvation


@pytest.mark.parametrize("backfill", ["easy", "conservative"])
def test_license_blocked_head_is_not_starved_by_long_jobs(backfill: str) -> None:
    """'a' holds both matlab licenses until t=100; 'h' waits for 2 of them. A long job
    asking for matlab must not take one at t=100 ahead of h; a short one that ends by
    then may run; a long one without licenses may run (it takes no license)."""
    r = run(backfill)
    r.step(0, submit(lic("a", matlab=2, walltime=100)))
    r.step(1, submit(lic("h", matlab=2, walltime=100)))
    r.step(2, submit(lic("long", matlab=1, walltime=1000), lic("free", walltime=1000)))
    assert list(r.starts()) == ["a", "free"]
    assert r.reservations()[-1] == ("h", 100.0)
    r.step(100, exited("a"))
    assert r.start_times()["h"] == 100
    assert "long" not in r.starts()
    r.step(200, exited("h"))
    assert r.start_times()["long"] == 200


@pytest.mark.parametrize("backfill", ["easy", "conservative"])
def test_short_license_job_backfills_before_the_head(backfill: str) -> None:
    r = run(backfill, licenses="matlab:3")
    r.step(0, submit(lic("a", matlab=2, walltime=100)))
    r.step(1, submit(lic("h", matlab=3, walltime=100)))
    # one matlab is free now; a job using it that ends by t=100 does not delay h
    r.step(2, submit(lic("short", matlab=1, walltime=50), lic("long", matlab=1, walltime=500)))
    assert list(r.starts()) == ["a", "short"]
    r.step(52, exited("short"))
    assert "long" not in r.starts()
    r.step(100, exited("a"))
    assert r.start_times()["h"] == 100


@pytest.mark.parametrize("backfill", ["easy", "conservative"])
def test_long_job_may_take_licenses_the_head_can_spare(backfill: str) -> None:
    r = run(backfill, licenses="matlab:4")
    r.step(0, submit(lic("a", matlab=3, walltime=100)))
    r.step(1, submit(lic("h", matlab=3, walltime=100)))
    # at t=100, 4 are free; h needs 3: one may go to a long job now
    r.step(2, submit(lic("l1", matlab=1, walltime=500), lic("l2", matlab=1, walltime=500)))
    assert list(r.starts()) == ["a", "l1"]
    r.step(100, exited("a"))
    assert r.start_times()["h"] == 100


@pytest.mark.parametrize("backfill", ["easy", "conservative"])
def test_head_blocked_by_resources_keeps_its_licenses(backfill: str) -> None:
    """h needs all 16 CPUs and a license; r holds 8 CPUs until t=100. A long job asking
    for the only license must not take it (h would find it gone at t=100)."""
    r = run(backfill, licenses="matlab:1")
    r.step(0, submit(lic("r", cpu=8, walltime=100)))
    r.step(1, submit(lic("h", cpu=16, matlab=1, walltime=100)))
    r.step(2, submit(lic("l", matlab=1, walltime=500), lic("s", matlab=1, walltime=50)))
    assert list(r.starts()) == ["r", "s"]
    r.step(60, exited("s"))
    assert "l" not in r.starts()
    r.step(100, exited("r"))
    assert r.start_times()["h"] == 100


def test_forecast_counts_licenses() -> None:
    r = run("easy")
    r.step(0, submit(lic("a", matlab=2, walltime=100)))
    r.step(1, submit(lic("b", matlab=2, walltime=100)))
    fc = forecast(r.core, 1)
    starts = {s.job_id: s.start for s in fc.starts}
    assert starts["b"] == 100


# ============================================================================ properties

CONFIGURED = (("ansys", 1), ("matlab", 3))


@st.composite
def licensed_workloads(draw: st.DrawFn) -> tuple[list[NodeSpec], list[tuple[JobSpec, float]]]:
    """test_backfill's workloads (exact runtimes), with some jobs asking for licenses."""
    cluster, jobs = draw(workloads())
    out = []
    for spec, runtime in jobs:
        wanted = draw(
            st.sampled_from([(), (), (("matlab", 1),), (("matlab", 3),), (("ansys", 1),)])
            | st.just((("ansys", 1), ("matlab", 2)))
        )
        out.append((replace(spec, licenses=wanted), runtime))
    return cluster, out


@pytest.mark.parametrize("backfill", ["easy", "conservative"])
@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(case=licensed_workloads())
def test_licenses_are_never_oversubscribed_and_the_head_keeps_its_promise(
    backfill: str, case: tuple[list[NodeSpec], list[tuple[JobSpec, float]]]
) -> None:
    cluster, jobs = case
    r = simulate(cluster, jobs, backfill=backfill, licenses=CONFIGURED)
    starts = r.start_times()
    runtime = {spec.id: (spec, rt) for spec, rt in jobs}
    assert set(starts) | set(r.rejected()) == set(runtime)  # every job ran (or never fits)
    # licenses in use at every start never exceed the configured counts
    total = dict(CONFIGURED)
    for t in starts.values():
        used: dict[str, int] = {}
        for job_id, start in starts.items():
            spec, rt = runtime[job_id]
            if start <= t < start + rt:
                for name, k in spec.licenses:
                    used[name] = used.get(name, 0) + k
        assert all(used[n] <= total[n] for n in used), (t, used)
    # with exact estimates, a reserved job starts no later than it was first promised
    for job_id, promised in first_reservations(r).items():
        assert starts[job_id] <= promised, (job_id, starts[job_id], promised)
