"""Read-only views of the controller's live state for the API and the portal: every node
with its state, last heartbeat and free resources (:func:`nodes`, ``GET /v1/nodes``, the
portal's Cluster page), and every queue's pending and running counts (:func:`queue_counts`,
``GET /v1/queues``). Each takes the controller's lock; nothing here changes its state.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from fusesched.api.wire import NodeInventory
from fusesched.controller import drains
from fusesched.model.node import NodeSpec, NodeState
from fusesched.model.resources import Resources

if TYPE_CHECKING:
    from fusesched.controller.service import Controller


def queue_counts(ctl: Controller) -> list[tuple[str, int, int]]:
    """(queue, pending, running) for every queue with live jobs, by name."""
    with ctl.lock:
        counts: dict[str, list[int]] = {}
        for live in ctl.jobs.values():
            entry = counts.setdefault(live.spec.queue, [0, 0])
            entry[1 if live.nodes else 0] += 1
    return [(name, p, r) for name, (p, r) in sorted(counts.items())]


def nodes(ctl: Controller) -> list[tuple[NodeInventory, NodeState, float, Resources]]:
    """Each node with its state, last heartbeat and free resources (from the core); a
    draining node on which nothing runs any more is shown DRAINED."""
    with ctl.lock:
        out = []
        for name, node in ctl.nodes.items():
            state = drains.shown_state(ctl, name)
            out.append((node.inventory, state, node.last_seen, _free(ctl, name)))
        for name, spec in ctl.remote_specs.items():
            out.append(_remote(ctl, name, spec))
        return out


def _remote(
    ctl: Controller, name: str, spec: NodeSpec
) -> tuple[NodeInventory, NodeState, float, Resources]:
    """An external pool's node as that pool last listed it."""
    inventory = NodeInventory(
        name=name, address="", resources=spec.capacity.to_spec(), labels=dict(spec.labels)
    )
    return inventory, ctl.remote_nodes[name][2], ctl.clock(), _free(ctl, name)


def _free(ctl: Controller, name: str) -> Resources:
    """What the core has free on a node (nothing for a node it does not know)."""
    cluster = ctl.core.cluster
    row = cluster.index.get(name)
    if row is None:
        return Resources()
    return Resources({c: int(cluster.free[row, k]) for c, k in cluster.columns.items()})
