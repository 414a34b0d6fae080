"""The node routes operators use: drain a node for maintenance and give it back
(controller/drains.py). Cluster-admins only; every change goes to the audit log."""

from __future__ import annotations

from collections.abc import Callable

from fastapi import FastAPI, HTTPException

from fusesched.api.access import Access, Caller, person
from fusesched.api.responses import forbidden
from fusesched.api.schemas import NodeDrain, NodeDrained
from fusesched.controller import drains
from fusesched.controller.auth import Principal, Role
from fusesched.controller.records import UnknownNodeError


def add_node_routes(app: FastAPI, access: Access) -> None:
    """Serve ``/v1/nodes/{name}/drain`` and ``/v1/nodes/{name}/undrain`` from ``app``."""
    controller = access.controller

    def operator(p: Principal) -> None:
        person(p)
        if access.auth.enabled and p.role is not Role.CLUSTER_ADMIN:
            raise forbidden("only cluster-admins may drain or undrain nodes")

    def acting(change: Callable[[], drains.Drained], name: str) -> NodeDrained:
        """A drain or undrain: 404 for a node the store does not know, 400 for a refused one,
        503 when the store cannot record it (nothing changed)."""
        try:
            state, reason = change()
        except UnknownNodeError:
            raise HTTPException(404, f"no node {name!r}") from None
        except drains.DrainRefused as exc:
            raise HTTPException(400, str(exc)) from None
        except drains.DrainUnstored as exc:
            raise HTTPException(503, str(exc)) from None
        return NodeDrained(node=name, state=state.value, drain_reason=reason)

    @app.post("/v1/nodes/{name}/drain", response_model=NodeDrained, tags=["cluster"])
    def drain_node(name: str, body: NodeDrain, p: Caller) -> NodeDrained:
        """Give the node nothing new; what runs there runs to the end. Draining a drained
        node again replaces its reason. The drain outlives agent and controller restarts; a
        node whose agent is not back since a restart is drained in the store (answered
        ``down``) and comes back draining."""
        operator(p)
        answer = acting(lambda: drains.drain(controller, name, body.reason), name)
        access.audit(p, "node-drain", node=name, reason=body.reason)
        return answer

    @app.post("/v1/nodes/{name}/undrain", response_model=NodeDrained, tags=["cluster"])
    def undrain_node(name: str, p: Caller) -> NodeDrained:
        """Lift an operator's drain: the node takes work again, unless it reports itself
        unhealthy or still waits for its tasks to be adopted (it stays ``draining``)."""
        operator(p)
        answer = acting(lambda: drains.undrain(controller, name), name)
        access.audit(p, "node-undrain", node=name)
        return answer
