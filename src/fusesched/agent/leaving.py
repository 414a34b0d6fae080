"""A stopping agent tells the controller that its node is leaving (``POST
/v1/agents/leaving``), so that the controller takes the node for lost at once — its jobs
requeued or failed by their restart policies — instead of once its heartbeats have been
missing for the node timeout.

It is a courtesy, never a condition of stopping: the call is bounded by
:data:`LEAVE_TIMEOUT_S` in all, and any failure (the controller away, a standby, a controller
older than the route answering 404) is logged and the agent stops as before.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Sequence

import httpx

from fusesched.api.wire import Leaving

log = logging.getLogger("fusesched.agent")

#: How long a stopping agent tries to tell the controller it is leaving, all URLs together:
#: the stop must not hang on a controller that is away.
LEAVE_TIMEOUT_S = 2.0


def tell_leaving(
    http: httpx.Client, urls: Sequence[str], node: str, timeout_s: float = LEAVE_TIMEOUT_S
) -> bool:
    """Say that ``node`` is leaving to the first of ``urls`` (the current controller first)
    that leads, each tried once, within ``timeout_s`` in all. Returns whether one took it.

    The calls run on a thread of their own, waited for ``timeout_s`` at most: httpx's timeouts
    bound each step of a request (each read, the connect), not the whole of it, and name
    resolution not at all, so an answer that trickles in or a stalled DNS server would hold
    the stop for longer. A call still going then is left to end on its own (the agent is
    stopping; its client is closed under it)."""
    taken: list[bool] = []

    def tell() -> None:
        try:
            taken.append(_tell(http, urls, node, timeout_s))
        except Exception as exc:  # (its client closed under it as the stop went on)
            log.warning("could not tell that node %s is leaving: %s", node, exc)

    worker = threading.Thread(target=tell, name=f"leaving-{node}", daemon=True)
    worker.start()
    worker.join(timeout_s)
    if worker.is_alive():
        log.warning(
            "no controller took node %s's leaving within %g s: it requeues the node's jobs "
            "once its heartbeats have been missing for its node timeout",
            node,
            timeout_s,
        )
        return False
    return bool(taken and taken[0])


def _tell(http: httpx.Client, urls: Sequence[str], node: str, timeout_s: float) -> bool:
    """:func:`tell_leaving`'s calls, one URL after the other."""
    deadline = time.monotonic() + timeout_s
    body = Leaving(node=node).model_dump(mode="json")
    for url in urls:
        left = deadline - time.monotonic()
        if left <= 0:
            log.warning("no time left to tell %s that node %s is leaving", url, node)
            break
        try:
            response = http.post(f"{url}/v1/agents/leaving", json=body, timeout=left)
        except httpx.HTTPError as exc:
            log.warning("could not tell %s that node %s is leaving: %s", url, node, exc)
            continue
        if response.status_code == 503:  # a standby: the leader is another one
            continue
        if response.is_success:
            log.info("told %s that node %s is leaving", url, node)
            return True
        log.warning(
            "%s did not take node %s's leaving (HTTP %d): it requeues the node's jobs once "
            "its heartbeats have been missing for its node timeout",
            url,
            node,
            response.status_code,
        )
        return False
    return False
