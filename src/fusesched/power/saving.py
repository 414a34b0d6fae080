"""Power saving: which nodes to suspend and which to resume (pure: no I/O, no wall clock).

The shell (the simulator's :mod:`fusesched.sim.power`, the live controller's
:mod:`fusesched.controller.power`) calls :func:`plan_power` every control interval with what it
observes: each node's power state and since when it is in it (:class:`NodeView`), each pool's
waiting demand and, for the ``forecast`` policy, the forecast (:class:`PoolDemand`), the rules
(:class:`SavingConfig`) and the recent actions that the rate limits count
(:class:`RateHistory`). It gets back a :class:`PowerPlan`: nodes to suspend, nodes to resume,
nodes whose resume timed out (to be marked failed), and the updated history. Same inputs, same
plan.

Per pool, the policy names a **target**: how many nodes should be awake (busy, idle and
powered, or resuming), and how long a node must have been idle before it may be suspended.
The shared machinery then

1. marks failed every node resuming for longer than ``resume_timeout_s``;
2. leaves alone excluded nodes (by name or pool) and nodes the scheduler does not use;
3. suspends idle nodes (longest idle first) while more are awake than the target, never
   below the pool's warm reserve nor below what the waiting jobs need;
4. resumes suspended nodes (those the waiting jobs can use first, ``PoolDemand.wake_first``,
   then longest suspended first) while fewer are awake than the target — the target counting
   idle nodes that no waiting job could run (``PoolDemand.unfit_powered``) as no help to
   them;
5. within the cluster-wide rate limits (actions per minute, as Slurm's ``SuspendRate`` and
   ``ResumeRate``).

Policies, registered by name in :data:`SAVING_POLICIES`:

* ``always-on`` — every node awake (suspended ones are resumed); nothing is suspended;
* ``idle-timeout`` — Slurm's ``SuspendTime``: a node idle for ``idle_threshold_s`` is
  suspended; nodes are resumed only when jobs are waiting that cannot start (the target is
  busy nodes + waiting demand + reserve);
* ``forecast`` — keeps awake what the forecast says will be needed within the look-ahead
  (wake latency + control interval) and suspends the rest once idle for ``forecast_min_idle_s``
  (a short hysteresis);
* ``predictive`` — idle-timeout with a forecast of the **arrivals** (the rise of demand,
  :class:`fusesched.power.forecast.RiseForecaster`) on both ends: it wakes ahead a headroom
  for the arrivals expected within the wake look-ahead, and an idle node beyond what the
  arrivals of the next ``idle_threshold_s`` can use goes after ``predictive_min_idle_s``
  instead of ``idle_threshold_s``;
* ``surge`` — a warm reserve learned from the history instead of configured: it keeps booted,
  beyond the busy nodes and the waiting demand, as many idle nodes as the largest rise of
  demand within the wake look-ahead seen over the last week
  (:class:`fusesched.power.forecast.SurgeTracker`), and suspends every idle node beyond that
  after ``surge_min_idle_s``. Made for power saving that must not make jobs wait for a boot:
  it saves what the worst recent burst leaves idle. Until the tracker has a day of history
  nothing is suspended (suspended nodes are resumed only for waiting jobs or the reserve);
* ``surge-room`` — ``surge`` with the surge and the headroom counted in node-equivalents of
  work (a node's largest share of CPUs or GPUs in use) rather than whole busy nodes, and the
  free room on powered busy nodes (``room_nodes``) taken off the headroom: a burst of small
  jobs that fits in the free GPUs of running nodes wakes no idle node for itself.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from enum import StrEnum
from types import MappingProxyType


class PowerState(StrEnum):
    ON = "on"  # powered; takes work if the scheduler has it up
    SUSPENDING = "suspending"  # shutting down (counts as off for the policy)
    SUSPENDED = "suspended"
    RESUMING = "resuming"  # booting; takes work when it is up
    FAILED = "failed"  # a resume timed out: marked failed, left alone


@dataclass(frozen=True, slots=True)
class NodeView:
    """What the policy needs to know about one node.

    ``since``: when it entered its current power state, or for an ``ON`` node that is not
    ``busy``, when it last became idle. ``schedulable``: the scheduler uses it (not drained or
    down for another reason); only schedulable nodes are suspended.
    """

    name: str
    pool: str
    power: PowerState
    busy: bool = False
    since: float = 0.0
    schedulable: bool = True


@dataclass(frozen=True, slots=True)
class PoolDemand:
    """Demand on one pool, in nodes.

    ``queued_nodes``: node-equivalents of the jobs waiting that cannot start now.
    ``forecast_nodes``: nodes the forecast says will be needed (busy + waiting) within the
    look-ahead (an upper estimate; what to wake for); None when there is no forecast yet.
    ``forecast_keep_nodes``: the same over a longer look-ahead (what not to switch off: a
    node suspended now should stay down long enough to pay for its shut-down and boot);
    None: ``forecast_nodes``.
    ``rise_nodes``: how much the pool's demand (busy + waiting) may rise within the wake
    look-ahead (an upper estimate of the arrivals; the headroom the ``predictive`` policy keeps
    booted); None when there is no forecast yet. ``rise_keep_nodes``: the same over the
    longer keep look-ahead (idle nodes beyond it are not expected to be used before an
    idle timeout would switch them off anyway); None: no early suspends.
    ``surge_nodes``: the largest rise of the pool's demand within the wake look-ahead seen
    recently (the ``surge`` policy's booted headroom); None while there is too little history.
    ``held_nodes``: node-equivalents of waiting jobs that only this pool's powered nodes could
    run (none of its sleeping ones): they wake nothing, but that many idle nodes are not
    suspended under them.
    ``room_nodes``: node-equivalents free on the pool's powered busy nodes (per node, 1 − its
    largest share of CPUs or GPUs in use); only the ``surge-room`` policy reads it, and for it
    ``surge_nodes`` is the largest rise of the work (node-equivalents in use + waiting).
    ``wake_first``: names of the pool's sleeping nodes that could run at least one of the jobs
    counted in ``queued_nodes``; they are resumed before its other sleeping nodes. In a pool
    of mixed node sizes the node woken first could otherwise be one the waiting jobs cannot
    use (an 8-GPU node for a job constrained to the 2-GPU ones), which, once up and idle,
    counts as awake and blocks further wakes. Empty: oldest asleep first.
    ``unfit_powered``: names of the pool's powered nodes that none of the jobs counted in
    ``queued_nodes`` could run (their labels, their size). Idle, they do not count towards
    the awake nodes those jobs need: the pool is kept at least at its busy nodes, those idle
    nodes and the rounded-up ``queued_nodes`` awake (see :func:`plan_power`), so an idle node
    that cannot run a waiting job no longer keeps the node it needs asleep.
    """

    queued_nodes: float = 0.0
    forecast_nodes: float | None = None
    forecast_keep_nodes: float | None = None
    rise_nodes: float | None = None
    rise_keep_nodes: float | None = None
    surge_nodes: float | None = None
    held_nodes: float = 0.0
    room_nodes: float = 0.0
    wake_first: tuple[str, ...] = ()
    unfit_powered: tuple[str, ...] = ()


@dataclass(frozen=True)
class SavingConfig:
    """The power-saving rules (Slurm's names in brackets).

    ``min_warm``: per pool, the least number of idle powered nodes kept as a warm reserve
    (``default_min_warm`` for pools not listed). Rates are nodes per minute over the whole
    cluster, 0 = unlimited.
    """

    idle_threshold_s: float = 1800.0  # SuspendTime
    max_suspends_per_min: int = 0  # SuspendRate
    max_resumes_per_min: int = 0  # ResumeRate
    resume_timeout_s: float = 900.0  # ResumeTimeout
    default_min_warm: int = 0
    min_warm: Mapping[str, int] = field(default_factory=dict)
    exclude_nodes: frozenset[str] = frozenset()  # SuspendExcNodes
    exclude_pools: frozenset[str] = frozenset()  # SuspendExcParts
    forecast_min_idle_s: float = 300.0  # forecast: hysteresis before suspending an idle node
    predictive_min_idle_s: float = 120.0  # predictive: idle before a node no arrival needs goes
    surge_min_idle_s: float = 120.0  # surge: idle before a node beyond the headroom goes

    def __post_init__(self) -> None:
        times = (
            self.idle_threshold_s,
            self.resume_timeout_s,
            self.forecast_min_idle_s,
            self.predictive_min_idle_s,
            self.surge_min_idle_s,
        )
        if min(times) < 0 or any(math.isnan(t) for t in times):
            raise ValueError("thresholds and timeouts must not be negative (nor NaN)")
        counts = (self.max_suspends_per_min, self.max_resumes_per_min, self.default_min_warm)
        if not all(_whole(v) for v in (*counts, *self.min_warm.values())):
            raise ValueError("rates and warm reserves must be whole numbers")
        if min(counts) < 0:
            raise ValueError("rates and reserves must not be negative")
        if any(v < 0 for v in self.min_warm.values()):
            raise ValueError("warm reserves must not be negative")
        for name in ("max_suspends_per_min", "max_resumes_per_min", "default_min_warm"):
            object.__setattr__(self, name, int(getattr(self, name)))
        warm = {pool: int(v) for pool, v in self.min_warm.items()}
        object.__setattr__(self, "min_warm", MappingProxyType(warm))
        object.__setattr__(self, "exclude_nodes", frozenset(self.exclude_nodes))
        object.__setattr__(self, "exclude_pools", frozenset(self.exclude_pools))

    def reserve(self, pool: str) -> int:
        return self.min_warm.get(pool, self.default_min_warm)

    def excluded(self, node: NodeView) -> bool:
        return node.name in self.exclude_nodes or node.pool in self.exclude_pools


def _whole(value: object) -> bool:
    """An int, or a float with no fraction (not NaN, not infinite, not a bool)."""
    if isinstance(value, bool):
        return False
    return isinstance(value, int) or (isinstance(value, float) and value.is_integer())


@dataclass(frozen=True, slots=True)
class RateHistory:
    """Times of the suspends and resumes of the last minute (what the rate limits count)."""

    suspends: tuple[float, ...] = ()
    resumes: tuple[float, ...] = ()

    def recent(self, now: float) -> RateHistory:
        cut = now - 60.0
        return RateHistory(
            tuple(t for t in self.suspends if t > cut), tuple(t for t in self.resumes if t > cut)
        )


@dataclass(frozen=True, slots=True)
class PowerPlan:
    """What to do now: suspend these, resume these, mark these failed (resume timed out)."""

    suspend: tuple[str, ...]
    resume: tuple[str, ...]
    failed: tuple[str, ...]
    history: RateHistory
    targets: Mapping[str, int] = field(default_factory=dict)  # pool → nodes wanted awake


@dataclass(frozen=True, slots=True)
class PoolFacts:
    """One pool as a policy sees it (counts over the nodes power saving may touch or not)."""

    pool: str
    busy: int
    idle: int  # powered and idle
    resuming: int
    suspended: int  # suspended or suspending
    demand: PoolDemand
    reserve: int

    @property
    def awake(self) -> int:
        return self.busy + self.idle + self.resuming

    @property
    def needed_now(self) -> int:
        """Busy nodes plus what the waiting jobs need (rounded up)."""
        return self.busy + math.ceil(self.demand.queued_nodes - 1e-9)


@dataclass(frozen=True, slots=True)
class Target:
    """Resume while fewer than ``awake`` nodes are awake; suspend (idle nodes idle for
    ``min_idle_s``) while more than ``max(awake, keep)`` are, and (idle nodes idle for
    ``keep_idle_s``) while more than ``awake`` are."""

    awake: int  # nodes wanted awake (busy + idle + resuming)
    min_idle_s: float  # an idle node may be suspended after this long
    keep: int = 0  # nodes not to switch off, if more than ``awake``
    keep_idle_s: float = math.inf  # ... unless idle for this long


#: A policy: from a pool's facts and the rules, its target.
SavingPolicy = Callable[[PoolFacts, SavingConfig], Target]


def always_on(facts: PoolFacts, config: SavingConfig) -> Target:
    return Target(facts.awake + facts.suspended, math.inf)


def idle_timeout(facts: PoolFacts, config: SavingConfig) -> Target:
    return Target(facts.needed_now + facts.reserve, config.idle_threshold_s)


def forecast(facts: PoolFacts, config: SavingConfig) -> Target:
    wanted = facts.needed_now + facts.reserve
    predicted = facts.demand.forecast_nodes
    if predicted is not None:
        wanted = max(wanted, math.ceil(predicted - 1e-9))
    keep = facts.demand.forecast_keep_nodes
    kept = wanted if keep is None else max(wanted, math.ceil(keep - 1e-9))
    return Target(wanted, config.forecast_min_idle_s, kept)


def predictive(facts: PoolFacts, config: SavingConfig) -> Target:
    """idle-timeout with a forecast on both ends: wake a booted headroom for the arrivals
    expected within the wake look-ahead (``rise_nodes``) before they wait, and switch off after
    only ``predictive_min_idle_s`` the idle nodes beyond what the arrivals of the keep
    look-ahead (``rise_keep_nodes``) can use; the rest go after ``idle_threshold_s`` as with
    idle-timeout. Without a forecast yet it is idle-timeout."""
    demand = facts.demand
    headroom = facts.reserve
    if demand.rise_nodes is not None:
        headroom = max(headroom, math.ceil(demand.rise_nodes - 1e-9))
    awake = facts.needed_now + headroom
    if demand.rise_keep_nodes is None:
        return Target(awake, config.idle_threshold_s)
    keep = facts.needed_now + max(headroom, math.ceil(demand.rise_keep_nodes - 1e-9))
    return Target(awake, config.predictive_min_idle_s, keep, config.idle_threshold_s)


def surge(facts: PoolFacts, config: SavingConfig) -> Target:
    """A booted headroom of the largest recent surge of demand (``surge_nodes``, at least the
    warm reserve) beyond the busy nodes and the waiting demand; idle nodes beyond it go after
    ``surge_min_idle_s``. Without enough history yet it holds the pool as it is: nothing is
    suspended, and suspended nodes are resumed only for waiting jobs or the warm reserve."""
    if facts.demand.surge_nodes is None:
        return Target(max(facts.awake, facts.needed_now + facts.reserve), math.inf)
    headroom = max(facts.reserve, math.ceil(facts.demand.surge_nodes - 1e-9))
    return Target(facts.needed_now + headroom, config.surge_min_idle_s)


def surge_room(facts: PoolFacts, config: SavingConfig) -> Target:
    """``surge`` that counts the free room on powered busy nodes as headroom: the booted
    headroom in whole idle nodes is the largest recent surge of work (``surge_nodes``, in
    node-equivalents) less the node-equivalents still free on the busy nodes
    (``room_nodes``), rounded up, and at least the warm reserve. With no free room it is
    ``surge``. (Room scattered over many nodes serves only jobs that fit in one node's
    remainder: a burst of whole-node jobs finds less headroom than ``surge`` would keep.)"""
    surged = facts.demand.surge_nodes
    if surged is None:
        return surge(facts, config)
    beyond = math.ceil(surged - facts.demand.room_nodes - 1e-9)
    return Target(facts.needed_now + max(facts.reserve, beyond), config.surge_min_idle_s)


SAVING_POLICIES: Mapping[str, SavingPolicy] = MappingProxyType(
    {
        "always-on": always_on,
        "idle-timeout": idle_timeout,
        "forecast": forecast,
        "predictive": predictive,
        "surge": surge,
        "surge-room": surge_room,
    }
)


def get_policy(name: str) -> SavingPolicy:
    try:
        return SAVING_POLICIES[name]
    except KeyError:
        known = ", ".join(SAVING_POLICIES)
        raise ValueError(f"unknown power-saving policy {name!r}; choose from: {known}") from None


def plan_power(
    policy: str,
    now: float,
    nodes: Sequence[NodeView],
    demand: Mapping[str, PoolDemand],
    config: SavingConfig,
    history: RateHistory = RateHistory(),
) -> PowerPlan:
    """Decide which nodes to suspend, resume and mark failed now (see the module docstring).

    Pools are handled in name order; within the rate limits, earlier pools go first.
    """
    choose = get_policy(policy)
    history = history.recent(now)
    suspends_left = _left(config.max_suspends_per_min, len(history.suspends))
    resumes_left = _left(config.max_resumes_per_min, len(history.resumes))
    failed, by_pool = _tally(now, nodes, config.resume_timeout_s)
    suspend: list[str] = []
    resume: list[str] = []
    targets: dict[str, int] = {}
    for pool in sorted(by_pool):
        tally = by_pool[pool]
        members = tally.members
        facts = PoolFacts(
            pool,
            tally.busy,
            tally.idle,
            tally.resuming,
            tally.suspended,
            demand.get(pool, PoolDemand()),
            config.reserve(pool),
        )
        target = choose(facts, config)
        unfit = _unfit_idle(members, facts.demand, config)
        if unfit and target.awake < facts.needed_now + unfit:  # (they serve no waiting job)
            target = replace(target, awake=facts.needed_now + unfit)
        targets[pool] = target.awake
        surplus = facts.awake - target.awake
        if surplus > 0 and suspends_left > 0:
            # never below the warm reserve, nor below what the waiting jobs need
            waiting = facts.demand.queued_nodes + facts.demand.held_nodes
            keep_idle = facts.reserve + math.ceil(waiting - 1e-9)
            room = min(surplus, facts.idle - keep_idle, suspends_left)
            # nodes idle for min_idle_s only down to ``keep``; those idle for keep_idle_s further
            short_room = min(room, facts.awake - max(target.awake, target.keep))
            if room > 0:
                shortest = min(target.min_idle_s, target.keep_idle_s)
                idle = sorted(
                    (
                        n
                        for n in members
                        if n.power is PowerState.ON
                        and not n.busy
                        and n.schedulable
                        and not config.excluded(n)
                        and now - n.since >= shortest
                    ),
                    key=lambda n: (n.since, n.name),
                )
                chosen: list[str] = []
                for n in idle:  # longest idle first
                    if len(chosen) >= room:
                        break
                    idle_for = now - n.since
                    if idle_for >= target.keep_idle_s or (
                        idle_for >= target.min_idle_s and len(chosen) < short_room
                    ):
                        chosen.append(n.name)
                suspend.extend(chosen)
                suspends_left -= len(chosen)
        elif facts.awake < target.awake and resumes_left > 0:
            first = frozenset(facts.demand.wake_first)  # nodes the waiting jobs can use
            asleep = sorted(
                (n for n in members if n.power is PowerState.SUSPENDED and not config.excluded(n)),
                key=lambda n: (n.name not in first, n.since, n.name),
            )
            chosen = [n.name for n in asleep[: min(target.awake - facts.awake, resumes_left)]]
            resume.extend(chosen)
            resumes_left -= len(chosen)
    history = replace(
        history,
        suspends=history.suspends + (now,) * len(suspend),
        resumes=history.resumes + (now,) * len(resume),
    )
    return PowerPlan(tuple(suspend), tuple(resume), tuple(failed), history, targets)


def _unfit_idle(members: Sequence[NodeView], demand: PoolDemand, config: SavingConfig) -> int:
    """How many of a pool's idle powered nodes none of its queued jobs could run
    (``demand.unfit_powered``); none while no job is queued, or while no node they could
    use can be woken (all excluded, or none asleep): then keeping the unfit ones awake
    helps nobody."""
    if not demand.unfit_powered or demand.queued_nodes <= 0:
        return 0
    useful = frozenset(demand.wake_first)
    if not any(
        n.power is PowerState.SUSPENDED
        and not config.excluded(n)
        and (not useful or n.name in useful)
        for n in members
    ):
        return 0
    unfit = frozenset(demand.unfit_powered)
    return sum(
        1
        for n in members
        if n.power is PowerState.ON and not n.busy and n.schedulable and n.name in unfit
    )


def _left(rate: int, used: int) -> int:
    return max(0, rate - used) if rate > 0 else 1 << 62


@dataclass(slots=True)
class _Tally:
    """One pool's nodes and the counts of :class:`PoolFacts`, gathered in one pass."""

    members: list[NodeView] = field(default_factory=list)
    busy: int = 0
    idle: int = 0  # powered, idle and schedulable (a drained or down node is no warm capacity)
    resuming: int = 0
    suspended: int = 0  # suspended or suspending


def _tally(
    now: float, nodes: Sequence[NodeView], resume_timeout_s: float
) -> tuple[list[str], dict[str, _Tally]]:
    """The nodes whose resume timed out, and every other node by pool with its pool's counts
    (one pass: this runs every control step over every node)."""
    on, resuming, asleep = PowerState.ON, PowerState.RESUMING, PowerState.SUSPENDED
    suspending = PowerState.SUSPENDING
    failed: list[str] = []
    by_pool: dict[str, _Tally] = {}
    for node in nodes:
        power = node.power
        if power is resuming and now - node.since > resume_timeout_s:
            failed.append(node.name)
            continue
        tally = by_pool.get(node.pool)
        if tally is None:
            tally = by_pool[node.pool] = _Tally()
        tally.members.append(node)
        if power is on:
            if node.busy:
                tally.busy += 1
            elif node.schedulable:
                tally.idle += 1
        elif power is resuming:
            tally.resuming += 1
        elif power is asleep or power is suspending:
            tally.suspended += 1
    return failed, by_pool
