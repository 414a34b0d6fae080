"""The in-process link to a controller: the embedded ``fusesched up`` has its local agents
call the controller in their own process directly instead of over HTTP (see docs/AGENT.md),
through a :class:`ControllerLink` whose failures are handled as failed requests are."""

from __future__ import annotations

from typing import Protocol

import httpx

from fusesched.api.wire import Heartbeat, HeartbeatReply, NodeInventory


class LinkError(httpx.HTTPError):
    """A call through an in-process :class:`ControllerLink` failed; handled as a failed
    request is (the beat is kept and sent again)."""


class NodeForgotten(LinkError):
    """The controller does not know this node (it restarted): register again, as after a 404."""


class ControllerLink(Protocol):
    """A controller in the agent's own process, called directly instead of over HTTP (the
    embedded ``fusesched up``): no request to encode, send, route and decode per beat. Calls
    raise :class:`LinkError` (:class:`NodeForgotten` for an unknown node)."""

    def register(self, inventory: NodeInventory) -> None: ...
    def heartbeat(self, beat: Heartbeat, wait_s: float, launch: bool) -> HeartbeatReply: ...
