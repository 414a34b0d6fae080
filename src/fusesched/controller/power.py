"""Power saving in the live controller: idle nodes suspended, resumed when the queue needs them.

The decision is the pure policy the simulator uses (:func:`fusesched.power.saving.plan_power`);
this module observes the local agents' nodes for it and carries its plan out through the
site's own command templates (``suspend``, ``resume``: argv lists with ``{node}`` and
``{address}``, run without a shell — IPMI, ``systemctl suspend`` over ssh, a cloud API's CLI,
never hard-wired).

A node being suspended leaves the scheduler at once (state ``suspended``: nothing new is placed
there; it is not declared lost for its silence). A resumed node is ``resuming`` until its agent
is heard again (a heartbeat or a new registration), then ``up``; one that stays silent longer
than ``resume_timeout_s`` is marked ``down`` (failed). A suspend command that fails leaves the
node up. Commands run in their own threads, so a slow BMC never holds the controller's lock.
External clusters' nodes are left to those clusters.
"""

from __future__ import annotations

import logging
import math
import subprocess
import threading
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import TYPE_CHECKING, Any

from fusesched.model.job import JobSpec
from fusesched.model.node import LABEL_POOL, LOCAL_POOL, NodeSpec, NodeState
from fusesched.model.phases import JobPhase
from fusesched.power.forecast import (
    DAY,
    RISE_KEEP_MARGIN,
    RISE_WAKE_MARGIN,
    DemandForecaster,
    RiseForecaster,
    SurgeTracker,
)
from fusesched.power.saving import (
    SAVING_POLICIES,
    NodeView,
    PoolDemand,
    PowerState,
    RateHistory,
    SavingConfig,
    plan_power,
)
from fusesched.yamlfile import read_yaml

if TYPE_CHECKING:
    from fusesched.controller.service import Controller

log = logging.getLogger("fusesched.controller.power")

#: settings of the pure policy (``SavingConfig``), then the controller's own
_SAVING_FIELDS = frozenset(
    {
        "idle_threshold_s",
        "max_suspends_per_min",
        "max_resumes_per_min",
        "resume_timeout_s",
        "default_min_warm",
        "min_warm",
        "exclude_nodes",
        "exclude_pools",
        "forecast_min_idle_s",
        "predictive_min_idle_s",
        "surge_min_idle_s",
    }
)
_FIELDS = _SAVING_FIELDS | {
    "policy",
    "interval_s",
    "suspend",
    "resume",
    "command_timeout_s",
    "wake_latency_s",
    "forecast_bin_s",
    "surge_memory_days",
    "surge_warm_s",
}


#: the most bins the surge tracker may keep per pool (a year of 10-minute bins is 52,704)
MAX_SURGE_BINS = 100_000
#: policies the live controller does not supply the inputs of (docs/ENERGY.md)
SIMULATOR_ONLY = frozenset({"surge-room"})


@dataclass(frozen=True)
class PowerConfig:
    """The ``--power FILE`` settings (docs/ENERGY.md)."""

    suspend: tuple[str, ...]
    resume: tuple[str, ...]
    policy: str = "idle-timeout"
    interval_s: float = 10.0
    command_timeout_s: float = 60.0
    saving: SavingConfig = field(default_factory=SavingConfig)
    wake_latency_s: float = 300.0  # how long a node takes to resume: the forecast's look-ahead
    forecast_bin_s: float = 600.0  # the forecast's resolution (Holt-Winters bins)
    surge_memory_days: int = 7  # surge: how many days of rises it remembers
    surge_warm_s: float = DAY  # surge: history needed before it suspends anything

    def __post_init__(self) -> None:
        if self.policy in SIMULATOR_ONLY:
            raise ValueError(
                f"policy {self.policy} is simulator-only for now: the live controller does not "
                "report the free room on busy nodes that it needs; use surge"
            )
        times = [self.interval_s, self.forecast_bin_s, self.wake_latency_s]
        times += [self.command_timeout_s, self.surge_warm_s]
        if not all(math.isfinite(t) for t in times):
            raise ValueError(
                "interval_s, forecast_bin_s, wake_latency_s, command_timeout_s and surge_warm_s "
                "must be finite numbers"
            )
        if self.interval_s <= 0:
            raise ValueError("interval_s must be positive")
        if not 1.0 <= self.forecast_bin_s <= DAY:
            raise ValueError("forecast_bin_s must be between 1 s and a day (86400 s)")
        if min(self.wake_latency_s, self.command_timeout_s, self.surge_warm_s) < 0:
            raise ValueError(
                "wake_latency_s, command_timeout_s and surge_warm_s must not be negative"
            )
        days = self.surge_memory_days
        if isinstance(days, bool) or not isinstance(days, int) or not 1 <= days <= 366:
            raise ValueError("surge_memory_days must be a whole number from 1 to 366")
        if self.policy == "surge" and days * DAY / self.forecast_bin_s > MAX_SURGE_BINS:
            raise ValueError(
                f"surge_memory_days × 86400 / forecast_bin_s must be at most {MAX_SURGE_BINS:,} "
                "bins (the surge tracker keeps one per bin): fewer days or wider bins"
            )

    @classmethod
    def parse(cls, data: object, source: str = "<power>") -> PowerConfig:
        """From the file's YAML data; ``ValueError`` naming the file and field otherwise."""
        if not isinstance(data, Mapping):
            raise ValueError(f"{source}: expected a mapping of power-saving settings")
        unknown = sorted(set(data) - _FIELDS)
        if unknown:
            known = ", ".join(sorted(_FIELDS))
            raise ValueError(f"{source}: unknown setting(s) {', '.join(unknown)}; known: {known}")
        commands = {}
        for key in ("suspend", "resume"):
            argv = data.get(key)
            if not isinstance(argv, list) or not argv:
                raise ValueError(f"{source}: {key} must be a command as a list of words (argv)")
            for k, word in enumerate(argv):
                if isinstance(word, bool):  # YAML reads a bare on, off, yes, no so
                    raise ValueError(
                        f"{source}: {key}[{k}] is the boolean {word} (YAML reads a bare on, off, "
                        'yes or no so): quote the word, e.g. "on"'
                    )
                if not isinstance(word, str):
                    raise ValueError(f'{source}: {key}[{k}] is {word!r}: quote it ("{word}")')
            commands[key] = tuple(argv)
        policy = str(data.get("policy", "idle-timeout"))
        if policy not in SAVING_POLICIES:
            raise ValueError(
                f"{source}: policy: unknown {policy!r}; choose from {', '.join(SAVING_POLICIES)}"
            )
        try:
            saving = SavingConfig(
                **{k: _value(k, v) for k, v in data.items() if k in _SAVING_FIELDS}
            )
            return cls(
                commands["suspend"],
                commands["resume"],
                policy,
                _number(data, "interval_s", 10.0),
                _number(data, "command_timeout_s", 60.0),
                saving,
                _number(data, "wake_latency_s", 300.0),
                _number(data, "forecast_bin_s", 600.0),
                data.get("surge_memory_days", 7),
                _number(data, "surge_warm_s", DAY),
            )
        except (TypeError, ValueError) as exc:
            raise ValueError(f"{source}: {exc}") from None

    @classmethod
    def load(cls, path: Path) -> PowerConfig:
        # a YamlFileError is a ValueError: its message names the file
        return cls.parse(read_yaml(path, "power configuration"), str(path))


def _number(data: Mapping[str, Any], key: str, default: float) -> float:
    return float(_value(key, data.get(key, default)))


def _value(key: str, value: Any) -> Any:
    if key in ("exclude_nodes", "exclude_pools"):
        if not isinstance(value, list):
            raise ValueError(f"{key} must be a list of names")
        return frozenset(str(v) for v in value)
    if key == "min_warm":
        if not isinstance(value, Mapping):
            raise ValueError("min_warm must map pools to node counts")
        # numbers as written: SavingConfig rejects a fractional reserve instead of rounding it
        return {str(k): _value(f"min_warm.{k}", v) for k, v in value.items()}
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise ValueError(f"{key} must be a number")
    return value


@dataclass(slots=True)
class _Node:
    power: PowerState = PowerState.ON
    since: float = 0.0  # in this power state since; for an idle ON node: idle since


class PowerManager:
    """The controller's power saving (every method runs with the controller's lock held)."""

    def __init__(self, config: PowerConfig) -> None:
        self.config = config
        self.nodes: dict[str, _Node] = {}
        self.history = RateHistory()
        self._at = 0.0
        # the forecast policy's model of each pool's demand, from what this controller saw
        self.forecaster = DemandForecaster(bin_s=config.forecast_bin_s)
        # the predictive policy's: how much each pool's demand rises (arrivals)
        self.riser = RiseForecaster(bin_s=config.forecast_bin_s)
        # the surge policy's: the largest rise of each pool's demand over the wake latency
        self.surger = SurgeTracker(
            config.wake_latency_s + config.interval_s,
            config.surge_memory_days,
            config.forecast_bin_s,
            config.surge_warm_s,
        )

    # ------------------------------------------------------------------ observation

    def _busy(self, ctl: Controller) -> set[str]:
        """Nodes with a task, and those where a task that outlived its job still dies or an
        ended job's booking is still held (controller/completing.py): not suspended."""
        busy = {task.node for _, task in ctl.tasks.values() if task.state != "exited"}
        busy.update(task.node for task in ctl.outliving.values())
        for rows in ctl.core.completing.values():
            busy.update(ctl.core.cluster.names[row] for row in rows)
        return busy

    def _views(self, ctl: Controller, now: float) -> list[NodeView]:
        busy = self._busy(ctl)
        views = []
        for name, node in ctl.nodes.items():
            entry = self.nodes.setdefault(name, _Node(since=now))
            is_busy = name in busy
            if entry.power is PowerState.ON and is_busy:
                entry.since = now  # idle time counts from the end of the last task
            # an operator's drained node is no capacity: never woken for work (nor suspended)
            schedulable = node.drain is None and (
                node.state is NodeState.UP
                or (node.state is NodeState.SUSPENDED and entry.power is not PowerState.ON)
            )
            views.append(
                NodeView(
                    name,
                    node.spec.labels.get(LABEL_POOL, LOCAL_POOL),
                    entry.power,
                    busy=is_busy,
                    since=entry.since,
                    schedulable=schedulable,
                )
            )
        return views

    def _demand(self, ctl: Controller) -> dict[str, PoolDemand]:
        """Waiting jobs, in node-equivalents, counted against the first pool whose sleeping
        nodes could run them (a gang of two full nodes needs two nodes woken: ``queued_nodes``,
        what the policy resumes nodes for). A job no sleeping node could run is counted, as
        ``held_nodes``, against the first pool whose powered nodes could: nothing is woken for
        it, but the idle nodes it waits for (a gang for which one node is still busy) are not
        suspended under it."""
        sleeping: dict[str, list[NodeSpec]] = {}
        powered: dict[str, list[NodeSpec]] = {}
        for name, node in ctl.nodes.items():
            entry = self.nodes.get(name)
            power = entry.power if entry is not None else PowerState.ON
            pool = node.spec.labels.get(LABEL_POOL, LOCAL_POOL)
            if node.drain is not None:  # an operator keeps it out of work
                continue
            if power in (PowerState.SUSPENDED, PowerState.SUSPENDING):
                sleeping.setdefault(pool, []).append(node.spec)
            elif power is PowerState.ON and node.state is NodeState.UP:
                powered.setdefault(pool, []).append(node.spec)
        queued: dict[str, float] = {}
        held: dict[str, float] = {}
        for job_id in ctl.jobs:
            rec = ctl.core.jobs.get(job_id)
            if rec is None or rec.phase is not JobPhase.QUEUED or rec.spec.dependencies:
                continue
            for part in _parts(rec.spec):
                for counts, pools in ((queued, sleeping), (held, powered)):
                    found = _first_fit(part, pools)
                    if found is not None:
                        counts[found[0]] = counts.get(found[0], 0.0) + found[1]
                        break
        return {
            pool: PoolDemand(queued_nodes=queued.get(pool, 0.0), held_nodes=held.get(pool, 0.0))
            for pool in sorted(set(queued) | set(held))
        }

    def _forecast(
        self, views: Sequence[NodeView], demand: dict[str, PoolDemand], now: float
    ) -> dict[str, PoolDemand]:
        """Feed each pool's nodes needed now (busy + waiting) to the forecaster and add its
        upper estimate over the wake latency to the demand (the forecast policy uses it), or for
        the predictive policy the forecast rise of demand (arrivals), or for the surge policy the
        largest recent rise."""
        if self.config.policy not in ("forecast", "predictive", "surge"):
            return demand
        needed: dict[str, float] = {}
        for view in views:
            needed[view.pool] = needed.get(view.pool, 0.0) + (1.0 if view.busy else 0.0)
        for pool, wanted in demand.items():
            needed[pool] = needed.get(pool, 0.0) + wanted.queued_nodes + wanted.held_nodes
        horizon = self.config.wake_latency_s + self.config.interval_s
        out = {}
        if self.config.policy == "predictive":  # the rise over the wake latency and SuspendTime
            self.riser.observe(now, needed)
            keep = self.config.saving.idle_threshold_s
            for pool in needed:
                wake = self.riser.upper(pool, now, horizon, RISE_WAKE_MARGIN)
                kept = self.riser.upper(pool, now, keep, RISE_KEEP_MARGIN)
                base = demand.get(pool, PoolDemand())
                out[pool] = replace(base, rise_nodes=wake, rise_keep_nodes=kept)
            return out
        if self.config.policy == "surge":
            self.surger.observe(now, needed)
            for pool in needed:
                surge = self.surger.upper(pool, now)
                out[pool] = replace(demand.get(pool, PoolDemand()), surge_nodes=surge)
            return out
        self.forecaster.observe(now, needed)
        for pool in needed:
            level = self.forecaster.upper(pool, now, horizon)
            out[pool] = replace(demand.get(pool, PoolDemand()), forecast_nodes=level)
        return out

    # ------------------------------------------------------------------ the loop

    def tick(self, ctl: Controller, now: float) -> None:
        if now - self._at < self.config.interval_s:
            return
        self._at = now
        views = self._views(ctl, now)
        demand = self._forecast(views, self._demand(ctl), now)
        plan = plan_power(self.config.policy, now, views, demand, self.config.saving, self.history)
        self.history = plan.history
        for name in plan.failed:
            self.nodes[name] = _Node(PowerState.FAILED, now)
            why = f"did not resume within {self.config.saving.resume_timeout_s:g} s"
            _set_state(ctl, name, NodeState.DOWN, why, now)
        for name in plan.suspend:
            self._suspend(ctl, name, now)
        for name in plan.resume:
            self._resume(ctl, name, now)

    def _suspend(self, ctl: Controller, name: str, now: float) -> None:
        self.nodes[name] = _Node(PowerState.SUSPENDING, now)
        _set_state(ctl, name, NodeState.SUSPENDED, "idle: power saving", now)
        self._run(ctl, name, self.config.suspend, "suspend")

    def _resume(self, ctl: Controller, name: str, now: float) -> None:
        self.nodes[name] = _Node(PowerState.RESUMING, now)
        log.info("resuming %s: jobs are waiting for it", name)
        self._run(ctl, name, self.config.resume, "resume")

    def _run(self, ctl: Controller, name: str, template: Sequence[str], what: str) -> None:
        node = ctl.nodes[name]
        argv = [
            w.replace("{node}", name).replace("{address}", node.inventory.address) for w in template
        ]
        timeout = self.config.command_timeout_s

        def run() -> None:
            try:
                done = subprocess.run(
                    argv, capture_output=True, text=True, timeout=timeout, check=False
                )
                problem = (
                    ""
                    if done.returncode == 0
                    else f"exited {done.returncode}: {done.stderr.strip()[:200]}"
                )
            except subprocess.TimeoutExpired:  # (its text holds the argv: secrets, say)
                problem = f"{argv[0]} timed out after {timeout:g} s"
            except OSError as exc:
                problem = f"{argv[0]}: {exc.strerror}"
            with ctl.lock:
                self._done(ctl, name, what, problem)

        threading.Thread(target=run, name=f"power-{what}-{name}", daemon=True).start()

    def _done(self, ctl: Controller, name: str, what: str, problem: str) -> None:
        entry = self.nodes.get(name)
        now = ctl.clock()
        if what == "suspend" and entry is not None and entry.power is PowerState.SUSPENDING:
            if problem:  # it is still up: back to work
                log.warning("suspending %s failed: %s", name, problem)
                self.nodes[name] = _Node(PowerState.ON, now)
                _set_state(ctl, name, NodeState.UP, f"suspend failed: {problem}", now)
            else:
                entry.power = PowerState.SUSPENDED
        elif what == "resume" and problem and entry is not None:
            # still asleep: let the policy pick it (or another node) again at the next tick
            log.warning("resuming %s: the command failed: %s", name, problem)
            if entry.power is PowerState.RESUMING:
                self.nodes[name] = _Node(PowerState.SUSPENDED, now)
        ctl.wake()

    # ------------------------------------------------------------------ agents heard

    def heard(self, ctl: Controller, name: str, registered: bool, now: float) -> None:
        """A node's agent spoke: a resuming node is back (or any sleeping node that
        registered again, having been started by other means)."""
        entry = self.nodes.get(name)
        if entry is None or entry.power is PowerState.ON:
            return
        back = entry.power in (PowerState.RESUMING, PowerState.FAILED)
        if back or (registered and entry.power is not PowerState.SUSPENDING):
            self.nodes[name] = _Node(PowerState.ON, now)
            _set_state(ctl, name, NodeState.UP, "resumed", now)
            ctl.wake()

    def state_of(self, name: str) -> PowerState:
        entry = self.nodes.get(name)
        return PowerState.ON if entry is None else entry.power


def _set_state(ctl: Controller, name: str, state: NodeState, reason: str, now: float) -> None:
    from fusesched.controller import failures

    failures.set_node_state(ctl, name, state, reason, now)


def _parts(spec: JobSpec) -> list[JobSpec]:
    """``spec`` itself; or, when a task group has label filters of its own (a hetjob
    component's ``-C``, a Kubeflow replica type's ``nodeSelector``), one spec per group under
    the job's and the group's filters: each group may need nodes of another pool woken."""
    groups = spec.task_groups
    if all(group.placement is None for group in groups):
        return [spec]
    return [
        replace(
            spec,
            task_groups=(replace(group, placement=None),),
            placement=spec.placement
            if group.placement is None
            else spec.placement.joined(group.placement),
            min_member=None,
        )
        for group in groups
    ]


def _first_fit(spec: JobSpec, pools: Mapping[str, list[NodeSpec]]) -> tuple[str, float] | None:
    """The first pool (by name) with nodes that could run ``spec``, and its node-equivalents
    there; None if no pool has one."""
    for pool, specs in sorted(pools.items()):
        fitting = [
            s
            for s in specs
            if spec.placement.allows(s.labels)
            and all(g.resources.fits_in(s.capacity) for g in spec.task_groups)
        ]
        if fitting:
            return pool, _nodes_needed(spec, fitting)
    return None


def _nodes_needed(spec: JobSpec, fitting: Sequence[NodeSpec]) -> float:
    """Node-equivalents of a job on nodes like ``fitting``: its largest share of one node's
    capacity over every resource it asks for (at least one node, at most those there)."""
    node = fitting[0].capacity
    share = 0.0
    for group in spec.task_groups:
        for name, amount in group.total.items():
            have = node.get(name)
            if have > 0:
                share = max(share, amount / have)
    return float(min(len(fitting), max(1, math.ceil(share - 1e-9))))
