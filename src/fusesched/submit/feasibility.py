"""Submit-time feasibility: could this job ever run on these nodes, even with all of them free?

:func:`check_feasible` tests necessary conditions only (it does not solve the packing): some
node passes the placement's label filters; every group's task fits on one such node; the
tasks that must start together (the gang) fit on those nodes by count, by
``max_tasks_per_node`` and by total resources; a gang held to one domain or to a node count
finds a domain or that many nodes that could hold it. It returns the first reason it finds,
worded for the user, or None.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence

from fusesched.core.topology import TopologyMode
from fusesched.model.job import JobSpec, Placement, TaskGroup
from fusesched.model.node import LABEL_HOSTNAME, NodeSpec
from fusesched.model.resources import Resources, format_quantity, glance_quantity


def check_feasible(spec: JobSpec, nodes: Sequence[NodeSpec]) -> str | None:
    """Why ``spec`` can never run on ``nodes``, or None when nothing rules it out."""
    if not nodes:
        return "the cluster has no nodes"
    eligible = [node for node in nodes if spec.placement.allows(node.labels)]
    if not eligible:
        return _placement_reason(spec.placement, nodes)
    where = "matching node" if spec.placement.constrained else "node"
    hosts: dict[str, list[NodeSpec]] = {}  # per group with its own filters, its nodes
    for group in spec.task_groups:
        own = group.placement
        if own is not None:
            hosts[group.name] = [node for node in eligible if own.allows(node.labels)]
            if not hosts[group.name]:
                return f"group {group.name!r}: {_placement_reason(own, eligible)}"
        reason = _task_reason(
            group, hosts.get(group.name, eligible), where if own is None else "matching node"
        )
        if reason is not None:
            return reason
    return (
        _gang_reason(spec, eligible, where, hosts)
        or _domain_reason(spec, eligible, hosts)
        or _node_count_reason(spec, eligible, where, hosts)
    )


def _show(resources: Mapping[str, int]) -> str:
    return ", ".join(f"{k}={format_quantity(k, v)}" for k, v in resources.items())


def _placement_reason(placement: Placement, nodes: Sequence[NodeSpec]) -> str:
    for key, value in placement.node_selector.items():
        if not any(node.labels.get(key) == value for node in nodes):
            seen = sorted({node.labels[key] for node in nodes if key in node.labels})
            have = f"nodes have {', '.join(seen)}" if seen else "no node has that label"
            return f"no node has label {key}={value} ({have})"
    for req in placement.required:
        if not any(req.matches(node.labels) for node in nodes):
            if req.key == LABEL_HOSTNAME and req.op == "In":  # (sbatch -w, --nodelist)
                return _unknown_nodes(req.values, nodes)
            return f"no node meets {req.describe()}"
    for req in placement.anti_affinity:
        if all(req.matches(node.labels) for node in nodes):
            return f"every node meets the anti-affinity {req.describe()}"
    return "no node meets the node selector, required and anti-affinity terms together"


def _unknown_nodes(names: Sequence[str], nodes: Sequence[NodeSpec]) -> str:
    """A node list (``-w``) naming no node of the cluster, said as Slurm users read it."""
    known = sorted(node.labels.get(LABEL_HOSTNAME, node.name) for node in nodes)
    shown = ", ".join(known[:10]) + (f" and {len(known) - 10} more" if len(known) > 10 else "")
    asked = ", ".join(names)
    return f"no node is named {asked} (-w/--nodelist; the nodes: {shown})"


def _task_reason(group: TaskGroup, nodes: Sequence[NodeSpec], where: str) -> str | None:
    if any(group.resources.fits_in(node.capacity) for node in nodes):
        return None
    for name, amount in group.resources.items():
        largest = max(node.capacity.get(name, 0) for node in nodes)
        if largest == 0:
            return (
                f"group {group.name!r} asks for {format_quantity(name, amount)} {name} per task "
                f"but no {where} has any"
            )
        if amount > largest:
            return (
                f"group {group.name!r} asks for {format_quantity(name, amount)} {name} per task "
                f"but the largest {where} has {glance_quantity(name, largest)}"
            )
    return (
        f"group {group.name!r} asks for {_show(group.resources)} per task, which no single "
        f"{where} has together"
    )


def _fit_count(task: Resources, capacity: Resources) -> int:
    return min((capacity.get(k, 0) // v for k, v in task.items()), default=0)


def _gang_reason(
    spec: JobSpec, nodes: Sequence[NodeSpec], where: str, hosts: Mapping[str, Sequence[NodeSpec]]
) -> str | None:
    per_node = spec.placement.max_tasks_per_node
    gang = spec.gang_size
    plural = "s" if len(nodes) != 1 else ""
    if per_node is not None and math.ceil(gang / per_node) > len(nodes):
        return (
            f"the job's {gang} tasks must run at once with at most {per_node} per node, so "
            f"they need {math.ceil(gang / per_node)} nodes, but only {len(nodes)} {where}"
            f"{plural} {'exist' if plural else 'exists'}"
        )
    if spec.min_member is not None:
        return None  # which tasks form the gang is not fixed; the per-task check stands
    limit = per_node if per_node is not None else math.inf
    for group in spec.task_groups:
        own = hosts.get(group.name, nodes)
        fits = sum(min(limit, _fit_count(group.resources, node.capacity)) for node in own)
        if fits < group.replicas:
            return (
                f"group {group.name!r} needs {group.replicas} tasks at once but at most {fits} "
                f"fit on the {len(own)} {'matching node' if group.name in hosts else where}"
                f"{'s' if len(own) != 1 else ''}"
            )
    capacity = Resources()
    for node in nodes:
        capacity = capacity + node.capacity
    total = spec.total
    for name, amount in total.items():
        if amount > capacity.get(name, 0):
            return (
                f"the job asks for {format_quantity(name, amount)} {name} in all but the "
                f"{len(nodes)} {where}{plural} {'have' if plural else 'has'} "
                f"{format_quantity(name, capacity.get(name, 0))}"
            )
    return None


def _domain_reason(
    spec: JobSpec, nodes: Sequence[NodeSpec], hosts: Mapping[str, Sequence[NodeSpec]]
) -> str | None:
    """A gang whose tasks must share one domain of a label (``topology`` required; ``sbatch
    -N 1`` with several tasks: one host) that no domain could hold even empty: said at
    submission, as Slurm refuses it, rather than cancelled by the scheduler later. A node
    without the label is a domain of its own (core/topology.py)."""
    request = spec.placement.topology
    if request is None or request.mode is not TopologyMode.REQUIRED or spec.min_member:
        return None
    limit = spec.placement.max_tasks_per_node or spec.task_count
    own = {name: {n.name for n in listed} for name, listed in hosts.items()}
    domains: dict[tuple[bool, str], list[NodeSpec]] = {}
    for node in nodes:  # (a node without the label: a domain of its own, as the core's)
        value = node.labels.get(request.key)
        domains.setdefault((value is None, node.name if value is None else value), []).append(node)
    best = 0
    for members in domains.values():
        held = []
        for group in spec.task_groups:
            mine = [n for n in members if group.name not in own or n.name in own[group.name]]
            fits = sum(min(limit, _fit_count(group.resources, n.capacity)) for n in mine)
            held.append(min(fits, group.replicas))
        if all(h >= g.replicas for h, g in zip(held, spec.task_groups, strict=True)):
            return None
        best = max(best, sum(held))
    if request.key == LABEL_HOSTNAME:
        return (
            f"the job's {spec.task_count} tasks must share one node (-N 1) but at most {best} "
            "fit on any one node"
        )
    return (
        f"the job's {spec.task_count} tasks must share one {request.key} domain but at most "
        f"{best} fit in any one"
    )


def _node_count_reason(
    spec: JobSpec, nodes: Sequence[NodeSpec], where: str, hosts: Mapping[str, Sequence[NodeSpec]]
) -> str | None:
    """A gang that must run on exactly ``placement.nodes`` nodes (``sbatch -N 2 -n 4``) when
    fewer nodes could hold even one of its tasks: refused at submission, as Slurm refuses a
    node count the partition cannot give."""
    count = spec.placement.nodes
    if count is None:
        return None
    own = {name: {n.name for n in listed} for name, listed in hosts.items()}
    usable = sum(
        any(
            (group.name not in own or node.name in own[group.name])
            and group.resources.fits_in(node.capacity)
            for group in spec.task_groups
        )
        for node in nodes
    )
    if usable >= count:
        return None
    return (
        f"the job must run on {count} nodes (-N {count}) but only {usable} {where}"
        f"{'s' if usable != 1 else ''} could hold one of its tasks"
    )
