"""Why a waiting job waits (core/pending_reasons.py): each of Slurm's reasons from a small
hand-made cluster, explicit reasons left to the shell, and no explanation after a cycle that
could change nothing."""

from __future__ import annotations

from dataclasses import replace

from builders import job, make_core, node, nodes
from fusesched.core.pending_reasons import given, take_reasons, waiting_reasons
from fusesched.core.scheduler import SchedulerCore
from fusesched.model.events import (
    JobCheckpointed,
    JobExited,
    JobHoldRequested,
    JobReleaseRequested,
    JobSubmitted,
    NodeStateChanged,
)
from fusesched.model.job import JobSpec
from fusesched.model.licenses import parse_licenses
from fusesched.model.node import LABEL_HOSTNAME, NodeState
from fusesched.policies.registry import CoreConfig
from fusesched.policies.tenancy_policy import TenancyPolicy

from .test_tenancy_core import core_with, gjob, started, tenancy


def two_nodes() -> SchedulerCore:
    return make_core(nodes(2, cpu=4), queue_order="fcfs", backfill="none")


def whole(job_id: str, count: int, at: float = 0.0) -> JobSpec:
    """``count`` tasks of 4 CPUs: one node each."""
    return job(job_id).tasks(count, cpu=4).walltime(100).at(at).build()


def test_the_first_job_waits_for_resources_the_others_for_priority() -> None:
    """(Without backfilling: per partition with it, tests/core/test_contention.py.)"""
    core = two_nodes()
    core.step(0, [JobSubmitted(whole("a", 1))])  # one node left free
    core.step(1, [JobSubmitted(whole("big", 2, at=1)), JobSubmitted(whole("small", 1, at=1))])
    assert take_reasons(core) == {"big": "Resources", "small": "Priority"}
    out = core.step(2, [JobExited("a")])
    assert started(out) == ["big"]
    assert take_reasons(core) == {"small": "Resources"}  # the next in line
    core.step(3, [JobExited("big")])
    assert take_reasons(core) == {}


def test_nothing_to_explain_after_a_cycle_that_changed_nothing() -> None:
    core = two_nodes()
    core.step(0, [JobSubmitted(whole("a", 2)), JobSubmitted(whole("b", 1))])
    assert take_reasons(core) == {"b": "Resources"}
    core.step(1)  # nothing freed, nothing new
    assert take_reasons(core) is None
    assert waiting_reasons(core) == {"b": "Resources"}  # (the same, when asked anyway)


def test_a_drained_node_the_job_names_is_the_reason() -> None:
    core = two_nodes()
    named = replace(
        whole("w", 1),
        placement=job("x").require(LABEL_HOSTNAME, "In", "n1", "n7").build().placement,
    )
    core.step(0, [NodeStateChanged("n1", NodeState.DRAINED), JobSubmitted(named)])
    assert take_reasons(core) == {"w": "ReqNodeNotAvail: n1 drained, n7 not registered"}
    core.step(1, [JobSubmitted(whole("after", 2, at=1))])  # behind it, for room
    assert waiting_reasons(core)["after"] == "Priority"


def test_a_job_its_licenses_hold_back_gets_no_reason_from_the_core() -> None:
    """The shell's view names the licenses with live counts: the core says nothing."""
    core = make_core(
        [node("n0").cpu(16).build()], backfill="none", licenses=parse_licenses("matlab:1")
    )
    first, second = (
        replace(job(j).tasks(1, cpu=1).build(), licenses=(("matlab", 1),)) for j in "ab"
    )
    core.step(0, [JobSubmitted(first), JobSubmitted(second)])
    assert take_reasons(core) == {"b": ""}


def test_a_job_its_queue_quota_parks_says_whose_quota_is_used_up() -> None:
    """(Its wording for each case: tests/core/test_quota_reasons.py.)"""
    core = core_with(tenancy({"a": (2, None, None), "b": (4, None, None)}, cohort=None))
    core.step(0, [JobSubmitted(gjob("a1", "a", 2)), JobSubmitted(gjob("a2", "a", 2))])
    reasons = take_reasons(core)
    assert reasons == {"a2": "QuotaExceeded: queue a gpu 2/2, needs 2; no cohort to borrow from"}
    core.step(1, [JobExited("a1")])
    assert take_reasons(core) == {}


def test_a_users_job_limit_is_slurms_qos_limit() -> None:
    qos = {"silver": {"priority": 5}, "bronze": {"priority": 1, "max_jobs_per_user": 1}}
    core = core_with(tenancy({"a": (4, None, None)}, cohort=None, qos=qos, default_qos="silver"))
    specs = [job(j).tasks(1, cpu=1, gpu=1).queue("a").qos("bronze").user("u").build() for j in "xy"]
    core.step(0, [JobSubmitted(s) for s in specs])
    assert take_reasons(core) == {
        "y": "QOSMaxJobsPerUserLimit: user 'u' has 1 bronze jobs running (limit 1)"
    }


def test_array_children_over_the_throttle_and_dependents() -> None:
    core = make_core([node("n0").cpu(1).build()], queue_order="fcfs", backfill="none")
    array = job("arr").tasks(1, cpu=1).array(0, 2, max_parallel=1).build()
    after = job("next").tasks(1, cpu=1).after_ok("arr_0").build()
    core.step(0, [JobSubmitted(array), JobSubmitted(after)])
    assert take_reasons(core) == {
        "arr_1": "JobArrayTaskLimit: array arr runs at most 1 at a time",
        "arr_2": "JobArrayTaskLimit: array arr runs at most 1 at a time",
        "next": "Dependency: job arr_0",
    }


def test_held_jobs_and_jobs_waiting_for_their_begin_time_keep_the_shells_reason() -> None:
    core = two_nodes()
    later = replace(whole("later", 1), begin_time=50.0)
    core.step(0, [JobSubmitted(whole("a", 2)), JobSubmitted(whole("b", 1)), JobSubmitted(later)])
    assert take_reasons(core) == {"b": "Resources"}
    core.step(1, [JobHoldRequested("b")])
    assert take_reasons(core) == {}
    core.step(2, [JobReleaseRequested("b")])
    assert take_reasons(core) == {"b": "Resources"}


def test_a_dynamic_order_explains_again_only_when_a_cycle_changed_something() -> None:
    """The multifactor order re-sorts the queue every cycle; the reasons stay the same
    unless the first job in line changes or jobs start: not explained again every cycle
    (50,000 waiting jobs cost ~35 ms each time), nor for a running job's checkpoint."""
    core = make_core(nodes(1, cpu=4), queue_order="multifactor", backfill="easy")
    core.step(0, [JobSubmitted(whole("a", 1)), JobSubmitted(whole("b", 1))])
    core.step(1, [JobSubmitted(whole("c", 1, at=1))])
    assert take_reasons(core) == {"b": "Resources", "c": "Priority"}
    for now in (2.0, 3.0):
        core.step(now)
        assert take_reasons(core) is None
    core.step(4, [JobCheckpointed("a", 3.5)])
    assert take_reasons(core) is None
    assert started(core.step(5, [JobExited("a")])) == ["b"]
    assert take_reasons(core) == {"c": "Resources"}


def test_reasons_never_change_what_the_cycle_decides() -> None:
    """The explanation only reads: a core asked every cycle decides as one never asked."""
    policy = TenancyPolicy(tenancy({"a": (3, None, None)}, cohort=None))
    config = CoreConfig(queue_order="fcfs", backfill="easy", tenancy=policy)
    cluster = [node(f"n{i}").cpu(8).gpu(2).build() for i in range(2)]
    asked, never = make_core(cluster, config), make_core(cluster, config)
    events: list[JobSubmitted | JobExited] = [
        JobSubmitted(gjob(f"j{i}", "a", 1 + i % 2)) for i in range(6)
    ]
    for now in range(6):
        out = asked.step(float(now), events)
        assert out == never.step(float(now), events)
        take_reasons(asked)
        events = [JobExited(j) for j in started(out)]
    assert all(rec.phase.terminal for rec in asked.jobs.values())


def test_the_reasons_the_core_gives_are_told_from_the_shells() -> None:
    """After a restart the shell knows which stored reasons were the core's (cleared when
    the job starts) and which its own."""
    for said in ("Priority", "Resources; requeued (preempted for job 8)", "Dependency: job 3"):
        assert given(said)
    for said in ("held: Priority", "begin time 2026-12-06", "released", "", "requeued (x)"):
        assert not given(said)
