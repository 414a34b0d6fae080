"""From a snapshot and a scenario to the simulator's inputs: nodes, jobs, core configuration,
power hook and outages.

Times are shifted so that the snapshot's first submission is at 0; a job's begin time
(``sbatch --begin``) keeps its wait after the job's submission. A finished job runs for
its measured run time (``end - start`` in the store, its last run); a job that had not ended
when the snapshot was taken runs for its requested walltime, else the core's default
estimate (counted in :attr:`TwinInputs.estimated`). Jobs cancelled before they ever started
are left out (the twin cannot know when a person would cancel them).

Advance reservations (:func:`reservations`): the snapshot's, less those the scenario
removes, plus those it adds, with their times shifted like the jobs' (not scaled by the
arrival rate); the engine hands each to the core when it was made (live: its creation).
"""

from __future__ import annotations

import copy
import dataclasses
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from fusesched.api.wire import DeviceInfo, NodeInventory
from fusesched.controller.records import node_spec
from fusesched.hostlist import expand_hostlist
from fusesched.model.job import JobSpec
from fusesched.model.node import (
    LABEL_GPU_MODEL,
    LABEL_HOSTNAME,
    LABEL_POOL,
    LABEL_RACK,
    LOCAL_POOL,
    NodeSpec,
)
from fusesched.model.reservation import Reservation
from fusesched.model.resources import Resources
from fusesched.policies.registry import CoreConfig, PolicyError
from fusesched.power.saving import SavingConfig
from fusesched.sim.engine import Outage, SimJob
from fusesched.sim.power import PowerSetup
from fusesched.sim.reservations import SimReservation, bind, check, fit_to, from_live
from fusesched.store.records import JobState
from fusesched.submit.request import JobRequest
from fusesched.twin.scenario import (
    AddNodes,
    AddReservation,
    PowerChange,
    Scenario,
    ScenarioError,
    absolute_time,
)
from fusesched.twin.snapshot import SnapJob, SnapNode, Snapshot, SnapshotError


@dataclass(frozen=True)
class TwinInputs:
    nodes: list[NodeSpec]
    jobs: list[SimJob]
    config: CoreConfig
    power: PowerSetup | None
    outages: list[Outage]
    origin: float  # the snapshot time of t = 0 (first submission)
    latency: float = 0.0  # dispatch latency: each job reaches the core this much later
    tenant_of: Mapping[str, str] = field(default_factory=dict)
    measured: int = 0  # jobs replayed with their measured run time
    estimated: int = 0  # jobs replayed with an estimate (not finished at the snapshot)
    skipped: int = 0  # jobs left out (cancelled before they started)
    # advance reservations, handed to the core when made (sim/reservations.py)
    reservations: list[SimReservation] = field(default_factory=list)
    unreserved: int = 0  # jobs that named a reservation the replay does not have


# ------------------------------------------------------------------------------ nodes


def snapshot_node(node: SnapNode) -> NodeSpec:
    """The core's node, built as the live controller builds it from the agent's inventory
    (a node listed without devices, as from a trace, counts its GPUs from its capacity)."""
    if not node.devices:
        labels = {LABEL_POOL: LOCAL_POOL, **node.labels}
        return NodeSpec(node.name, Resources.parse(dict(node.capacity)), labels)
    inventory = NodeInventory(
        name=node.name,
        address=node.address or "127.0.0.1",
        resources=dict(node.capacity),
        labels=dict(node.labels),
        devices=[DeviceInfo.model_validate(d) for d in node.devices],
    )
    return node_spec(inventory)


def _matches(spec: NodeSpec, labels: Mapping[str, str]) -> bool:
    return all(spec.labels.get(k) == v for k, v in labels.items())


def _copy(spec: NodeSpec, name: str) -> NodeSpec:
    labels = {k: v for k, v in spec.labels.items() if k != LABEL_HOSTNAME}
    return NodeSpec(name, spec.capacity, labels, devices=spec.devices)


def _unique(base: str, taken: set[str]) -> str:
    i = 1
    while f"{base}-{i}" in taken:
        i += 1
    name = f"{base}-{i}"
    taken.add(name)
    return name


def add_nodes(nodes: list[NodeSpec], change: AddNodes, where: str) -> list[NodeSpec]:
    """``nodes`` with ``change.count`` more (copies of a template, or of a new type)."""
    taken = {n.name for n in nodes}
    if change.like is not None:
        template = next((n for n in nodes if n.name == change.like), None)
        if template is None:
            raise ScenarioError(f"{where}.like: no node {change.like!r} in the snapshot")
        base = change.name or template.name
    elif change.match is not None:
        template = next((n for n in nodes if _matches(n, change.match)), None)
        if template is None:
            raise ScenarioError(f"{where}.match: no node has labels {change.match}")
        base = change.name or template.name
    else:
        assert change.capacity is not None and change.name is not None
        capacity = Resources.parse({k: str(v) for k, v in change.capacity.items()})
        template = NodeSpec(change.name, capacity, dict(change.labels))
        base = change.name
    extra = dict(change.labels) if change.capacity is None else {}
    out = list(nodes)
    for _ in range(change.count):
        copy_ = _copy(template, _unique(base, taken))
        if extra:
            labels = {**copy_.labels, **extra}
            copy_ = NodeSpec(copy_.name, copy_.capacity, labels, devices=copy_.devices)
        out.append(copy_)
    return out


def apply_nodes(nodes: list[NodeSpec], scenario: Scenario, source: str) -> list[NodeSpec]:
    for i, change in enumerate(scenario.nodes.remove):
        where = f"{source}: nodes.remove.{i}"
        if change.nodes:
            missing = [n for n in change.nodes if n not in {x.name for x in nodes}]
            if missing:
                raise ScenarioError(f"{where}.nodes: no node {missing[0]!r} in the snapshot")
            gone = set(change.nodes)
        else:
            assert change.match is not None and change.count is not None
            matching = [n.name for n in nodes if _matches(n, change.match)]
            if len(matching) < change.count:
                raise ScenarioError(
                    f"{where}: {change.count} to remove but {len(matching)} node(s) match"
                )
            gone = set(matching[len(matching) - change.count :])
        nodes = [n for n in nodes if n.name not in gone]
    for i, add in enumerate(scenario.nodes.add):
        nodes = add_nodes(nodes, add, f"{source}: nodes.add.{i}")
    if not nodes:
        raise ScenarioError(f"{source}: nodes: the scenario leaves no node")
    return nodes


# ------------------------------------------------------------------------------ policies


def apply_quotas(tenancy: Mapping[str, Any] | None, scenario: Scenario, source: str) -> Any:
    """The tenancy data with the scenario's quota changes (a changed copy)."""
    if not scenario.quotas:
        return tenancy
    if tenancy is None:
        raise ScenarioError(f"{source}: quotas: the snapshot has no tenancy configuration")
    data = copy.deepcopy(dict(tenancy))
    queues = {
        q.get("name"): q
        for org in data.get("organisations") or []
        for tenant in org.get("tenants") or []
        for q in tenant.get("queues") or []
    }
    for i, change in enumerate(scenario.quotas):
        queue = queues.get(change.queue)
        if queue is None:
            known = ", ".join(sorted(str(k) for k in queues))
            raise ScenarioError(
                f"{source}: quotas.{i}.queue: no queue {change.queue!r}; known: {known}"
            )
        flavors = queue.setdefault("flavors", [])
        entry = next((f for f in flavors if f.get("name") == change.flavor), None)
        if entry is None:
            entry = {"name": change.flavor, "resources": {}}
            flavors.append(entry)
        resources = entry.setdefault("resources", {})
        old = resources.get(change.resource)
        quota = dict(old) if isinstance(old, Mapping) else ({"nominal": old} if old else {})
        for key in ("nominal", "borrowing_limit", "lending_limit"):
            value = getattr(change, key)
            if value is not None:
                quota[key] = value
        if "nominal" not in quota:
            raise ScenarioError(f"{source}: quotas.{i}.nominal: a new quota needs a nominal")
        resources[change.resource] = quota
    return data


def core_config(snapshot: Snapshot, scenario: Scenario, source: str) -> CoreConfig:
    from fusesched.model.tenancy import TenancyError
    from fusesched.policies.tenancy_policy import TenancyPolicy

    tenancy_data = apply_quotas(snapshot.tenancy, scenario, source)
    base = snapshot.core.model_dump()
    changes = {k: v for k, v in scenario.policy.model_dump().items() if v is not None}
    try:
        tenancy = TenancyPolicy.from_dict(tenancy_data) if tenancy_data else None
    except TenancyError as exc:
        raise ScenarioError(f"{source}: quotas: {exc}") from None
    try:
        return CoreConfig(**{**base, **changes}, tenancy=tenancy)
    except PolicyError as exc:
        raise ScenarioError(f"{source}: policy: {exc}") from None


def power_setup(
    snapshot: Snapshot, scenario: Scenario, seed: int, source: str
) -> PowerSetup | None:
    """The power hook: the scenario's settings, else the snapshot's, else always-on."""
    change = scenario.power
    if change is None and snapshot.power is not None:
        raw = snapshot.power
        keys = set(PowerChange.model_fields)
        picked = {k: v for k, v in raw.items() if k in keys}
        try:
            change = PowerChange.model_validate(picked)
        except ValueError:
            change = None  # the live file's policy is not one the twin knows: always-on
    if change is None:
        change = PowerChange()
    kwargs: dict[str, Any] = {
        k: v
        for k, v in change.model_dump().items()
        if k not in ("policy", "tick_s") and v is not None
    }
    try:
        return PowerSetup(
            policy=change.policy, config=SavingConfig(**kwargs), tick_s=change.tick_s, seed=seed
        )
    except ValueError as exc:
        raise ScenarioError(f"{source}: power: {exc}") from None


# ------------------------------------------------------------------------------ jobs


def job_spec(job: SnapJob) -> JobSpec:
    """The core's spec of a stored job (an array member from its parent's expansion)."""
    request = JobRequest.model_validate(job.request)
    if job.array_parent is None:
        spec = request.to_job_spec(job.id, job.submit)
        return spec.expand_array()[0] if spec.array is not None else spec
    parent = request.to_job_spec(job.array_parent, job.submit)
    try:
        return parent.array_member(job.id)  # (not expanded whole: once per member)
    except ValueError:
        raise SnapshotError(f"job {job.id}: not a member of array {job.array_parent}") from None


def whole_arrays(pairs: Sequence[tuple[SnapJob, JobSpec]]) -> set[str]:
    """The arrays the replay has every member of: dependencies on them replay (on one that
    lacks a member — one cancelled before it started, or outside the snapshot — they are
    dropped, as dependencies on a job outside it are)."""
    found: dict[str, int] = {}
    sizes: dict[str, int] = {}
    for _, spec in pairs:
        parent = spec.array_parent
        if parent is not None and spec.array is not None:
            found[parent] = found.get(parent, 0) + 1
            sizes[parent] = len(spec.array.indices)
    return {parent for parent, count in found.items() if count == sizes[parent]}


_SPEC_CACHE: list[tuple[Snapshot, list[tuple[SnapJob, JobSpec]]]] = []


def replayable(snapshot: Snapshot) -> list[tuple[SnapJob, JobSpec]]:
    """The snapshot's jobs that the twin replays, with their specs (parsed once per
    snapshot object and process: a sweep runs many scenarios on one snapshot)."""
    if _SPEC_CACHE and _SPEC_CACHE[0][0] is snapshot:
        return _SPEC_CACHE[0][1]
    out: list[tuple[SnapJob, JobSpec]] = []
    for job in snapshot.jobs:
        if job.start is None and job.state == JobState.CANCELLED.value:
            continue
        try:
            spec = job_spec(job)
        except ValueError as exc:
            raise SnapshotError(f"job {job.id}: {exc}") from None
        out.append((job, spec))
    _SPEC_CACHE[:] = [(snapshot, out)]  # one snapshot per process at a time
    return out


def build(
    snapshot: Snapshot, scenario: Scenario, seed: int, source: str = "scenario"
) -> TwinInputs:
    """Everything :class:`~fusesched.sim.engine.Simulation` needs for one run."""
    nodes = apply_nodes([snapshot_node(n) for n in snapshot.nodes], scenario, source)
    config = core_config(snapshot, scenario, source)
    pairs = replayable(snapshot)
    origin = min((j.submit for j, _ in pairs), default=0.0)
    latency = scenario.dispatch_latency_s
    if latency is None:
        latency = dispatch_latency(snapshot)
    rng = np.random.default_rng(seed)
    rate = scenario.arrival.rate
    jitter = scenario.arrival.jitter_s
    offsets = np.array([j.submit - origin for j, _ in pairs], dtype=np.float64) / rate
    if jitter > 0 and len(offsets):
        offsets = np.maximum(0.0, offsets + rng.uniform(-jitter, jitter, len(offsets)))
    ids = {j.id for j, _ in pairs} | whole_arrays(pairs)  # (what a dependency may name)
    jobs: list[SimJob] = []
    tenant_of: dict[str, str] = {}
    measured = estimated = 0
    for (job, spec), t in zip(pairs, offsets.tolist(), strict=True):
        runtime = job.runtime
        if runtime is None or not JobState(job.state).finished:
            runtime = spec.walltime_s or config.default_estimate_s
            estimated += 1
            code = 0
        else:
            measured += 1
            code = job.exit_code if job.exit_code is not None else 0
        changes: dict[str, Any] = {"submit_time": t + latency}
        if spec.begin_time is not None:  # the same wait after its submission (or none)
            wait = spec.begin_time - job.submit
            changes["begin_time"] = t + latency + wait if wait > 0 else None
        # (a singleton names no job: it is resolved again against the replay's jobs; a
        # dependency on an array replays when the replay has every member of it)
        if spec.dependencies and any(d.job_id and d.job_id not in ids for d in spec.dependencies):
            changes["dependencies"] = ()
        jobs.append(SimJob(dataclasses.replace(spec, **changes), runtime, code))
        tenant_of[spec.id] = spec.tenant
    jobs.sort(key=lambda j: j.spec.submit_time)
    outages = resolve_failures(nodes, scenario, source)
    booked = reservations(snapshot, scenario, nodes, origin, source)
    jobs, booked, without = bind(jobs, booked)
    try:
        check(nodes, booked)
    except ValueError as exc:
        raise ScenarioError(f"{source}: reservations: {exc}") from None
    return TwinInputs(
        nodes=nodes,
        jobs=jobs,
        config=config,
        power=power_setup(snapshot, scenario, seed, source),
        outages=outages,
        origin=origin,
        latency=latency,
        tenant_of=tenant_of,
        measured=measured,
        estimated=estimated,
        skipped=len(snapshot.jobs) - len(pairs),
        reservations=booked,
        unreserved=without,
    )


# ------------------------------------------------------------------------------ reservations


def reservations(
    snapshot: Snapshot, scenario: Scenario, nodes: Sequence[NodeSpec], origin: float, source: str
) -> list[SimReservation]:
    """The replay's reservations (times from the first submission): the snapshot's, less the
    scenario's ``reservations.remove``, on the nodes the scenario leaves (one left with none
    is dropped), plus its ``reservations.add``. A snapshot reservation is made when it was
    created live; one the scenario adds, at ``made_at_s`` or the snapshot's time."""
    change = scenario.reservations
    held = {r.name for r in snapshot.reservations}
    for i, name in enumerate(change.remove):
        if name not in held:
            known = ", ".join(sorted(held)) or "none"
            raise ScenarioError(
                f"{source}: reservations.remove.{i}: the snapshot has no reservation "
                f"{name!r} (it has: {known})"
            )
    gone = set(change.remove)
    kept: list[SimReservation] = []
    for snap_res in snapshot.reservations:
        if snap_res.name in gone:
            continue
        kept.append(from_live(snap_res.reservation(), snap_res.created_at, origin))
    kept, _ = fit_to(kept, nodes)  # (the scenario removed all its nodes: it is gone)
    names = {k.reservation.name for k in kept}
    now = max(0.0, snapshot.created_at - origin)
    for i, add in enumerate(change.add):
        where = f"{source}: reservations.add.{i}"
        if add.name in names:
            raise ScenarioError(
                f"{where}.name: {add.name!r} is held already (remove it first to change it)"
            )
        names.add(add.name)
        kept.append(_added(add, nodes, origin, now, where))
    return kept


def _added(
    add: AddReservation, nodes: Sequence[NodeSpec], origin: float, now: float, where: str
) -> SimReservation:
    try:
        names = expand_hostlist(add.nodes) if isinstance(add.nodes, str) else list(add.nodes)
    except ValueError as exc:
        raise ScenarioError(f"{where}.nodes: {exc}") from None
    known = {n.name for n in nodes}
    missing = [n for n in names if n not in known]
    if missing:
        raise ScenarioError(f"{where}.nodes: no node {missing[0]!r} in the cluster")
    if add.start_s is not None:
        start = add.start_s
    else:
        assert add.start is not None
        start = absolute_time(add.start) - origin
    if add.end_s is not None:
        end = add.end_s
    elif add.end is not None:
        end = absolute_time(add.end) - origin
    else:
        assert add.duration_s is not None
        end = start + add.duration_s
    try:
        res = Reservation(add.name, tuple(names), start, end, tuple(add.users), tuple(add.tenants))
    except ValueError as exc:
        raise ScenarioError(f"{where}: {exc}") from None
    made = add.made_at_s if add.made_at_s is not None else now
    if end <= made:  # (live: refused, its end has passed)
        since = "made_at_s" if add.made_at_s is not None else "the snapshot's time"
        raise ScenarioError(
            f"{where}: it ends at {end:g} s after the first submission, before it is made "
            f"({made:g} s, {since}): give a later window (or, in a scenario, an earlier "
            "made_at_s)"
        )
    return SimReservation(res, made)


_LATENCY_CACHE: list[tuple[Snapshot, float]] = []


def dispatch_latency(snapshot: Snapshot) -> float:
    """The live controller's dispatch latency, measured from the snapshot's history: the
    median wait, live, of the jobs that the twin (without latency) starts the moment they are
    submitted (for them the live wait is the time from the submission to the cycle that
    started them). 0 when no job qualifies (a trace's history: starts are not known). Jobs
    that named a reservation the replay does not have (it ended or was deleted before the
    snapshot) do not count: live, they waited for its window, not for a cycle. Computed once
    per snapshot object and process."""
    if _LATENCY_CACHE and _LATENCY_CACHE[0][0] is snapshot:
        return _LATENCY_CACHE[0][1]
    from fusesched.sim.engine import Simulation

    inputs = build(snapshot, Scenario(name="calibration", dispatch_latency_s=0.0), 0, "snapshot")
    outcomes = (
        Simulation(inputs.nodes, inputs.jobs, inputs.config, reservations=inputs.reservations)
        .run()
        .outcomes
    )
    by_id = {j.id: j for j in snapshot.jobs}
    booked = {b.reservation.name for b in inputs.reservations}
    unbooked = {
        spec.id
        for _, spec in replayable(snapshot)
        if spec.reservation is not None and spec.reservation not in booked
    }
    waits = []
    for o in outcomes:
        job = by_id.get(o.job_id)
        if job is None or job.start is None or o.start != o.submit or o.job_id in unbooked:
            continue
        if o.failures or o.preemptions:
            continue
        waits.append(job.start - job.submit)
    latency = max(0.0, float(np.median(waits))) if waits else 0.0
    _LATENCY_CACHE[:] = [(snapshot, latency)]
    return latency


def resolve_failures(nodes: Sequence[NodeSpec], scenario: Scenario, source: str) -> list[Outage]:
    out: list[Outage] = []
    for i, failure in enumerate(scenario.failures):
        if failure.node is not None:
            names = [n.name for n in nodes if n.name == failure.node]
            what = f"node {failure.node!r}"
        elif failure.rack is not None:
            names = [n.name for n in nodes if n.labels.get(LABEL_RACK) == failure.rack]
            what = f"rack {failure.rack!r} (label {LABEL_RACK})"
        else:
            model = failure.gpu_model
            names = [
                n.name
                for n in nodes
                if n.labels.get(LABEL_GPU_MODEL) == model
                or any(d.model == model for d in n.devices)
            ]
            what = f"GPU model {model!r}"
        if not names:
            raise ScenarioError(f"{source}: failures.{i}: no node of {what} in the cluster")
        duration = failure.duration_s if failure.duration_s is not None else float("inf")
        out.append(Outage(failure.at_s, tuple(names), duration, f"{what} failed"))
    return out
