"""Operator drains: take a node out of scheduling for maintenance, and give it back.

A drained node runs what it runs to the end but is given nothing new (``DRAINING`` for the
core; shown as ``drained`` once nothing runs there), like Slurm's ``scontrol update
NodeName=… State=DRAIN Reason=…`` or Kubernetes' ``kubectl cordon``. The reason is stored with
the node (``nodes.drain_reason``), so the drain outlives agent restarts, the node going
silent and coming back, and controller restarts. While a drain stands, whatever else would
bring the node back UP (a health check passing again, power saving resuming it, the adoption
of its tasks after a restart) brings it back DRAINING (:func:`failures.set_node_state`).

Undraining makes the node UP again unless something else still holds it out: it reports
itself unhealthy, or it still waits for its tasks to be adopted after a restart.

The store is written first: when it cannot record a drain or undrain (a
:class:`DrainUnstored`), nothing changes, so what the controller does and what a restarted one
would do agree. A node the store knows whose agent has not registered since a controller
restart can be drained and undrained too: only the store changes, and the node comes back
DRAINING when its agent registers (:func:`agents.register` reads :func:`stored_drain`).

Nodes of external pools (``pool:node``, run by Slurm or Kubernetes) are drained in their own
cluster (``scontrol``, ``kubectl cordon``); fusesched follows what that cluster reports.
"""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING

from sqlalchemy.exc import SQLAlchemyError

from fusesched.controller import failures
from fusesched.controller.records import UnknownNodeError
from fusesched.model.node import NodeState
from fusesched.store.errors import StoreError, UnknownNode

if TYPE_CHECKING:
    from fusesched.controller.records import LiveNode
    from fusesched.controller.service import Controller

log = logging.getLogger(__name__)

#: longest reason kept (Slurm's ``Reason=`` is a short text too)
MAX_REASON = 1_000


class DrainRefused(ValueError):
    """A drain or undrain that cannot be done; the message says why (a 400)."""


class DrainUnstored(RuntimeError):
    """The store could not record a drain or undrain, so nothing changed (a 503)."""


def shown_state(ctl: Controller, name: str) -> NodeState:
    """``name``'s state as users see it: a draining node on which nothing runs any more is
    DRAINED (Slurm's ``drain`` against ``draining``). The caller holds the lock."""
    state = ctl.nodes[name].state
    cluster = ctl.core.cluster
    row = cluster.index.get(name)
    idle = row is not None and bool((cluster.free[row] == cluster.capacity[row]).all())
    return NodeState.DRAINED if state is NodeState.DRAINING and idle else state


def stored_drain(ctl: Controller, name: str) -> str | None:
    """The drain the store holds for ``name`` (None: not drained, or not stored yet)."""
    row = ctl.persist.store.get_node(name)
    return None if row is None else row.drain_reason


#: a node after a drain or undrain: its state as users see it (:func:`shown_state`) and the
#: operator's drain reason (None: not drained)
Drained = tuple[NodeState, str | None]


def drain(ctl: Controller, name: str, reason: str) -> Drained:
    """Drain ``name`` for ``reason`` (draining it again replaces the reason).
    :class:`UnknownNodeError` for a node the store does not know, :class:`DrainRefused` for
    an external pool's node or an empty reason, :class:`DrainUnstored` when the store cannot
    record it. A known node whose agent is not back since a restart is answered DOWN."""
    reason = " ".join(reason.split())
    if not reason:
        raise DrainRefused("give a reason for the drain (e.g. 'disk replacement')")
    if len(reason) > MAX_REASON:
        raise DrainRefused(f"the reason is longer than {MAX_REASON:,} characters")
    now = ctl.clock()
    with ctl.lock:
        node = _local_node(ctl, name)
        _store(ctl, name, reason, "drain")  # first: a store that refuses changes nothing
        ctl.persist.node_event(name, "NodeDrained", now, {"reason": reason})
        if node is not None:
            node.drain = reason
            if node.state is NodeState.UP:
                failures.set_node_state(ctl, name, NodeState.DRAINING, f"drained: {reason}", now)
        ctl.persist.flush()
        return (NodeState.DOWN if node is None else shown_state(ctl, name)), reason


def undrain(ctl: Controller, name: str) -> Drained:
    """Lift the operator's drain of ``name`` (the node stays DRAINING while it is unhealthy or
    waits for adoption; DOWN or SUSPENDED ones stay so until they are back). Undraining a node
    that is not drained changes nothing. Refused as :func:`drain` is."""
    now = ctl.clock()
    with ctl.lock:
        node = _local_node(ctl, name)
        drained = _stored(ctl, name) if node is None else node.drain
        if drained is not None:
            _store(ctl, name, None, "undrain")
            ctl.persist.node_event(name, "NodeUndrained", now)
        if node is None:
            ctl.persist.flush()
            return NodeState.DOWN, None
        node.drain = None
        held = name in ctl.adopt_held or not ctl.monitor.healthy(name)
        if node.state is NodeState.DRAINING and not held:
            failures.set_node_state(ctl, name, NodeState.UP, "undrained", now)
        ctl.persist.flush()
        answer = shown_state(ctl, name), node.drain
    ctl.wake()
    return answer


def _local_node(ctl: Controller, name: str) -> LiveNode | None:
    """The local node ``name``; None for one not registered (since a controller restart: the
    store tells whether it knows it)."""
    node = ctl.nodes.get(name)
    if node is not None:
        return node
    owner = ctl.remote_nodes.get(name)
    if owner is not None:
        raise DrainRefused(
            f"node {name!r} belongs to the external pool {owner[0]!r}: drain it in that "
            "cluster (scontrol, kubectl cordon); fusesched follows what it reports"
        )
    if ":" in name:  # an external pool's node, its pool not reported (yet): not ours to drain
        raise UnknownNodeError(name)
    return None


def _stored(ctl: Controller, name: str) -> str | None:
    """The drain the store holds for ``name``; :class:`UnknownNodeError` when the store does
    not know it, :class:`DrainUnstored` when it cannot be read."""
    try:
        row = ctl.persist.store.get_node(name)
    except (StoreError, SQLAlchemyError) as exc:
        log.warning("node %s: the store could not be read: %s", name, exc)
        raise DrainUnstored(f"the store is unavailable: node {name!r} is unchanged") from None
    if row is None:
        raise UnknownNodeError(name)
    return row.drain_reason


def _store(ctl: Controller, name: str, reason: str | None, what: str) -> None:
    """Record ``name``'s drain (None: none) in the store: :class:`UnknownNodeError` when the
    store does not know it, :class:`DrainUnstored` when it cannot (nothing has changed yet)."""
    try:
        ctl.persist.store.set_node_drain(name, reason)
    except UnknownNode:
        raise UnknownNodeError(name) from None
    except (StoreError, SQLAlchemyError) as exc:
        log.warning("node %s: the store did not record the %s: %s", name, what, exc)
        raise DrainUnstored(
            f"the store is unavailable: the {what} of node {name!r} was not recorded and "
            "nothing changed; try again"
        ) from None
