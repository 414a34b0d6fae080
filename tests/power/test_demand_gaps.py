"""Four ways waiting demand could wake the wrong nodes, or none (docs/ENERGY.md, "Waiting
demand"): a job its licenses hold back, an exclusive job's whole nodes, an idle node the
waiting jobs cannot use, and a job waiting for its reservation's start. Each is checked on
the simulator's side (:class:`fusesched.sim.power.PowerSim`) and the live controller's
(:class:`fusesched.controller.power.PowerManager`, on a real core), which share
:mod:`fusesched.power.counted_jobs` and :mod:`fusesched.power.pool_demand`."""

from __future__ import annotations

from dataclasses import dataclass
from types import SimpleNamespace

from fusesched.controller.power import PowerConfig, PowerManager, _Node
from fusesched.core.scheduler import SchedulerCore
from fusesched.model.events import (
    JobSubmitted,
    NodeAdded,
    NodeStateChanged,
    ReservationSet,
    StartJob,
)
from fusesched.model.job import JobSpec, Placement, TaskGroup
from fusesched.model.node import LABEL_POOL, NodeSpec, NodeState
from fusesched.model.reservation import Reservation
from fusesched.model.resources import CPU, GPU, Resources
from fusesched.policies.registry import CoreConfig
from fusesched.power.pool_demand import node_kinds, waiting_demand, whole_nodes
from fusesched.power.saving import PoolDemand, PowerState, SavingConfig, plan_power
from fusesched.sim.power import PowerSetup, PowerSim

MATLAB = (("matlab", 1),)


def _node(name: str, gpus: int = 2, **labels: str) -> NodeSpec:
    return NodeSpec(name, Resources({CPU: 8000, GPU: gpus}), {LABEL_POOL: "a", **labels})


def _job(
    job_id: str, tasks: int = 1, gpus: int = 1, placement: Placement | None = None, **spec: object
) -> JobSpec:
    group = TaskGroup("main", tasks, Resources({CPU: 1000, GPU: gpus}))
    return JobSpec(job_id, (group,), placement=placement or Placement(), **spec)  # type: ignore[arg-type]


@dataclass
class Twin:
    """One core, with the simulator's power hook and the live controller's power manager
    (on a stand-in controller) over the same nodes."""

    core: SchedulerCore
    sim: PowerSim
    manager: PowerManager
    ctl: SimpleNamespace

    def submit(self, spec: JobSpec, now: float) -> list[str]:
        """Submit ``spec`` and run a cycle; the ids of the jobs that started."""
        decisions = self.core.handle(JobSubmitted(spec), now) + self.core.cycle(now)
        started = [d for d in decisions if isinstance(d, StartJob)]
        for decision in started:
            self.sim._start(decision, now)
        return [d.job_id for d in started]

    def demand(self, now: float) -> tuple[dict[str, PoolDemand], dict[str, PoolDemand]]:
        """The simulator's and the live controller's demand at ``now``."""
        return self.sim.waiting(now), self.manager._demand(self.ctl, now)  # type: ignore[arg-type]

    def resumed(self, now: float) -> tuple[list[str], list[str]]:
        """The nodes each side resumes at ``now`` (idle-timeout)."""
        self.sim._control(now)
        sim = sorted(
            n
            for n, s in zip(self.sim.names, self.sim.state, strict=True)
            if s is PowerState.RESUMING
        )
        views = self.manager._views(self.ctl, now)  # type: ignore[arg-type]
        demand = self.manager._demand(self.ctl, now)  # type: ignore[arg-type]
        plan = plan_power("idle-timeout", now, views, demand, SavingConfig())
        return sim, sorted(plan.resume)


def _twin(nodes: list[NodeSpec], asleep: tuple[str, ...], config: CoreConfig | None = None) -> Twin:
    core = SchedulerCore(config)
    for spec in nodes:
        core.handle(NodeAdded(spec), 0.0)
    sim = PowerSim(PowerSetup("idle-timeout"))
    sim.attach(core, nodes)
    manager = PowerManager(PowerConfig(("true",), ("true",), policy="idle-timeout"))
    for name in asleep:
        sim._set_state(sim.index[name], PowerState.SUSPENDED, 0.0)
        core.handle(NodeStateChanged(name, NodeState.SUSPENDED, "test: asleep"), 0.0)
        manager.nodes[name] = _Node(PowerState.SUSPENDED, 0.0)
    live_nodes = {
        spec.name: SimpleNamespace(
            spec=spec,
            state=NodeState.SUSPENDED if spec.name in asleep else NodeState.UP,
            drain=None,
        )
        for spec in nodes
    }
    ctl = SimpleNamespace(
        nodes=live_nodes, core=core, tasks={}, outliving={}, jobs=core.jobs, clock=lambda: 0.0
    )
    return Twin(core, sim, manager, ctl)


# ---------------------------------------------------------------------- 1. licenses


def test_a_job_its_licenses_hold_back_wakes_nothing_until_they_come_back() -> None:
    # one matlab license, held by a job on n0 until 7200 s (its time limit); a job that
    # needs it and a whole node waits. Nodes woken for it would idle until 7200 s (and be
    # kept awake under it all that time): it counted 1 node and woke n1
    twin = _twin([_node("n0"), _node("n1")], ("n1",), CoreConfig(licenses=MATLAB))
    assert twin.submit(_job("holder", licenses=MATLAB, walltime_s=7200), 0.0) == ["holder"]
    assert twin.submit(_job("blocked", gpus=2, licenses=MATLAB, walltime_s=600), 0.0) == []
    assert twin.demand(10.0) == ({}, {})
    assert twin.resumed(10.0) == ([], [])
    # a job that needs no license still counts beside it
    assert twin.submit(_job("free", gpus=2, walltime_s=600), 10.0) == []
    wakes = {"a": PoolDemand(queued_nodes=1.0, wake_first=("n1",))}
    assert twin.demand(20.0) == (wakes, wakes)
    # once the holder's estimated end is within one boot, the blocked job counts too: the
    # node it needs is up when the license comes back (as for a begin time)
    soon = 7200.0 - min(twin.sim.lookahead_s, twin.manager.config.wake_latency_s) / 2
    both = {"a": PoolDemand(queued_nodes=2.0, wake_first=("n1",))}
    assert twin.demand(soon) == (both, both)


# ---------------------------------------------------------------------- 2. exclusive


@dataclass(frozen=True)
class Queued:
    spec: JobSpec
    shape_id: int


def test_an_exclusive_job_counts_whole_nodes() -> None:
    asleep = [(_node(f"n{i}", gpus=8), "a", True) for i in range(4)]
    kinds = node_kinds(asleep)

    def counted(spec: JobSpec) -> float:
        return waiting_demand(kinds, [Queued(spec, 1)])["a"].queued_nodes

    alone = Placement(exclusive=True)
    assert counted(_job("j", placement=alone)) == 1.0  # (1/8 of a node shared)
    assert counted(_job("j", 3, gpus=5, placement=alone)) == 3.0  # one 5-GPU task a node
    spread = Placement(exclusive=True, max_tasks_per_node=1)
    assert counted(_job("j", 4, placement=spread)) == 4.0  # (4/8 of one node)
    assert counted(_job("j", 3, placement=Placement(exclusive=True, nodes=3))) == 3.0
    assert counted(_job("j", 16, placement=alone)) == 2.0  # 8 tasks fit a node
    assert counted(_job("j", 16, placement=alone, min_member=4)) == 1.0  # its minimum
    # the core gives an exclusive job and a shared one of the same tasks one shape: each
    # counts as it is
    jobs = [Queued(_job("j"), 1), Queued(_job("k", placement=alone), 1)]
    assert waiting_demand(kinds, jobs)["a"].queued_nodes == 1.125
    assert whole_nodes(_job("j", placement=alone), (8000.0, 8.0)) == 1


def test_exclusive_jobs_wake_a_node_each() -> None:
    # two exclusive 1-GPU jobs wait, n0 busy: each needs a node of its own (they counted
    # half a node each, and one node was woken)
    twin = _twin([_node("n0"), _node("n1"), _node("n2")], ("n1", "n2"))
    assert twin.submit(_job("busy", gpus=2, walltime_s=600), 0.0) == ["busy"]
    for name in ("x", "y"):
        assert twin.submit(_job(name, placement=Placement(exclusive=True)), 0.0) == []
    wakes = {"a": PoolDemand(queued_nodes=2.0, wake_first=("n1", "n2"))}
    assert twin.demand(10.0) == (wakes, wakes)
    assert twin.resumed(10.0) == (["n1", "n2"], ["n1", "n2"])


# --------------------------------------------------- 3. idle nodes the jobs cannot use


def test_an_idle_node_the_waiting_job_cannot_run_on_does_not_cover_it() -> None:
    # n0 is up and idle but lacks the label the job asks for; n1 has it, asleep. n0 counted
    # as the awake node the job needed: n1 was never woken, and n0 never suspended under it
    twin = _twin([_node("n0"), _node("n1", ib="yes")], ("n1",))
    assert twin.submit(_job("j", placement=Placement(node_selector={"ib": "yes"})), 0.0) == []
    expected = PoolDemand(queued_nodes=0.5, wake_first=("n1",), unfit_powered=("n0",))
    assert twin.demand(10.0) == ({"a": expected}, {"a": expected})
    assert twin.resumed(10.0) == (["n1"], ["n1"])


def test_an_idle_node_too_small_for_the_waiting_job_does_not_cover_it() -> None:
    twin = _twin([_node("small"), _node("big", gpus=8)], ("big",))
    assert twin.submit(_job("j", gpus=4), 0.0) == []
    expected = PoolDemand(queued_nodes=0.5, wake_first=("big",), unfit_powered=("small",))
    assert twin.demand(10.0) == ({"a": expected}, {"a": expected})
    assert twin.resumed(10.0) == (["big"], ["big"])


def test_an_idle_node_some_waiting_job_can_use_still_counts() -> None:
    # one job needs the label, another runs anywhere: n0 may serve the second, so it is no
    # "unfit" node, and the pool's rounded-up demand (1) is awake
    nodes = [(_node("n0"), "a", False), (_node("n1", ib="yes"), "a", True)]
    jobs = [
        Queued(_job("j", placement=Placement(node_selector={"ib": "yes"})), 1),
        Queued(_job("k"), 2),
    ]
    demand = waiting_demand(node_kinds(nodes), jobs)
    assert demand == {"a": PoolDemand(queued_nodes=1.0, wake_first=("n1",))}


# ---------------------------------------------------------------------- 4. reservations


def test_a_job_waiting_for_its_reservations_start_wakes_its_node_one_boot_ahead() -> None:
    # the reservation's job waits among the delayed jobs until the start (its not_before),
    # so it counts from one boot before it, and only the reserved node is woken. Idle n0
    # (not reserved: no use to it) covered it, and n2 was not woken in time (nor at all)
    twin = _twin([_node("n0"), _node("n1"), _node("n2")], ("n1", "n2"))
    window = Reservation("r", ("n2",), 3600.0, 7200.0, users=("u",))
    twin.core.handle(ReservationSet(window), 0.0)
    assert twin.submit(_job("j", user="u", reservation="r", walltime_s=600), 0.0) == []
    assert twin.demand(0.0) == ({}, {})
    soon = 3600.0 - min(twin.sim.lookahead_s, twin.manager.config.wake_latency_s) / 2
    twin.core.cycle(soon)  # (the core's clock: what is due within a boot of it)
    expected = PoolDemand(queued_nodes=0.5, wake_first=("n2",), unfit_powered=("n0",))
    assert twin.demand(soon) == ({"a": expected}, {"a": expected})
    assert twin.resumed(soon) == (["n2"], ["n2"])


# ------------------------------------------------- 5. a node count over split groups


def test_a_job_of_split_groups_with_a_node_count_counts_without_failing() -> None:
    # -N 2 over a GPU group and a CPU group with label filters of their own: each group
    # counts on its own (one task each), which cannot hold -N 2 - splitting the job
    # raised ValueError (a traceback in every power cycle while it waited), and an
    # exclusive one would have counted -N whole nodes per group (4, not 2)
    gpu, cpu = Placement(node_selector={"kind": "gpu"}), Placement(node_selector={"kind": "cpu"})
    nodes = [(_node(f"g{i}", gpus=8, kind="gpu"), "a", True) for i in range(2)]
    nodes += [(_node(f"c{i}", gpus=0, kind="cpu"), "a", True) for i in range(2)]
    groups = (
        TaskGroup("g", 1, Resources({CPU: 1000, GPU: 1}), gpu),
        TaskGroup("c", 1, Resources({CPU: 1000}), cpu),
    )
    for exclusive, queued in ((False, 0.25), (True, 2.0)):
        spec = JobSpec("j", groups, placement=Placement(exclusive=exclusive, nodes=2))
        demand = waiting_demand(node_kinds(nodes), [Queued(spec, 1)])
        assert demand["a"].queued_nodes == queued
    # groups split because no one node runs them all (an 8-GPU task, a big CPU task)
    big = NodeSpec("m0", Resources({CPU: 64000}), {LABEL_POOL: "a"})
    kinds = node_kinds([(_node("g0", gpus=8), "a", True), (big, "a", True)])
    groups = (
        TaskGroup("g", 1, Resources({CPU: 1000, GPU: 8})),
        TaskGroup("c", 1, Resources({CPU: 32000})),
    )
    spec = JobSpec("j", groups, placement=Placement(exclusive=True, nodes=2))
    assert waiting_demand(kinds, [Queued(spec, 1)])["a"].queued_nodes == 2.0
