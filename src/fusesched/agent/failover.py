"""The agent's HTTP requests to its controllers (agent/client.py): registering
(:func:`register_over_http`) and posting heartbeats (:func:`post_beat`).

An agent may be given several controller URLs: a leader and its standbys (docs/LIVE.md). Its
requests go to the client's current URL (``client.url``); when that controller cannot be
reached or answers 503 (a standby), the next URL becomes the current one (:func:`move_on`)
and the request goes there, round after round for a while. A new leader answers a beat with
404 (it does not know the node yet), which makes the agent register again, with it.

These are functions of the :class:`~fusesched.agent.client.AgentClient` whose requests they
make: its HTTP client, its URLs and its stop event.
"""

from __future__ import annotations

import logging
import time
from typing import TYPE_CHECKING

import httpx

if TYPE_CHECKING:
    from fusesched.agent.client import AgentClient

log = logging.getLogger("fusesched.agent")

#: With several controllers, how long one beat goes round them while none leads.
FAILOVER_ROUNDS_S = 2.0


def standby(response: httpx.Response) -> bool:
    """A standby controller's answer (503): the request should go to another controller."""
    return response.status_code == 503


def register_over_http(client: AgentClient, retry_s: float) -> None:
    """Register ``client``'s node, retrying (going round the controllers) while they are still
    starting or none leads; refusals that retrying cannot help (401, 403, 409) are raised at
    once, the last failure once ``retry_s`` is over or the client is stopping."""
    deadline = time.monotonic() + retry_s
    while True:
        url = client.url
        moved = False
        try:
            response = client._http.post(
                f"{url}/v1/agents/register", json=client.inventory.model_dump(mode="json")
            )
            if client._failover and standby(response):
                moved = move_on(client, url, "is a standby")
            response.raise_for_status()
            if client._failover:
                log.info("node %s registered with %s", client.inventory.name, url)
            return
        except httpx.HTTPStatusError as exc:
            if exc.response.status_code in (401, 403, 409):  # retrying will not help
                raise
            if time.monotonic() > deadline or client.stop_event.is_set():
                raise
        except httpx.HTTPError as exc:
            if client._failover:
                moved = move_on(client, url, f"is unreachable ({exc})")
            if time.monotonic() > deadline or client.stop_event.is_set():
                raise
        if not moved or client.url == client.urls[0]:  # a full round: pause
            time.sleep(0.2)


def post_beat(client: AgentClient, content: str, wait_s: float, quick: bool) -> httpx.Response:
    """Post a heartbeat (``content``: its JSON) to the current controller; with several, to
    the next ones while it is unreachable or a standby (:func:`_send_anywhere`)."""
    if client._failover:
        return _send_anywhere(client, content, wait_s, quick)
    return _post(client, client.url, content, wait_s, quick)


def beat_url(
    cache: dict[tuple[str, float, bool], httpx.URL], url: str, wait_s: float, quick: bool
) -> httpx.URL:
    """The heartbeat URL (parsed once, kept in ``cache``: httpx's URL parsing costs more than
    the request's own work). Quick reports say ``launch=true``: this agent takes launches in
    their replies (a controller that does not know the flag ignores it and answers none).
    Every beat says ``signals=true``: this agent understands the replies' signals (a
    controller sends none to an agent that does not say so: older agents refuse the fields),
    ``probes=true``: it runs the launches' liveness and readiness probes (the same), and
    ``outputs=true``: it writes their output files and starts them in the folder they were
    submitted from (the same), ``pty=true``: it relays their pseudo-terminals (the same)."""
    key = (url, wait_s, quick)
    found = cache.get(key)
    if found is None:
        query = f"wait={wait_s}&signals=true&probes=true&outputs=true&pty=true" + (
            "&launch=true" if quick else ""
        )
        found = cache[key] = httpx.URL(f"{url}/v1/agents/heartbeat?{query}")
    return found


def _post(
    client: AgentClient, url: str, content: str, wait_s: float, quick: bool
) -> httpx.Response:
    return client._http.post(
        beat_url(client._urls, url, wait_s, quick),
        content=content,
        headers={"content-type": "application/json"},
    )


def _send_anywhere(client: AgentClient, content: str, wait_s: float, quick: bool) -> httpx.Response:
    """Send a beat to the current controller; when it is unreachable or a standby, to the
    next ones (round after round for up to :data:`FAILOVER_ROUNDS_S`). A new leader answers
    404 (it does not know this node yet), which makes the work thread register again, with
    it. Beats are safe to send twice."""
    deadline = time.monotonic() + FAILOVER_ROUNDS_S
    while True:
        outcome: httpx.Response | httpx.TransportError | None = None
        for _ in client.urls:
            url = client.url
            try:
                outcome = _post(client, url, content, wait_s, quick)
            except httpx.TransportError as exc:
                outcome = exc
                if not move_on(client, url, f"is unreachable ({exc})"):
                    break
                continue
            if not standby(outcome) or not move_on(client, url, "is a standby"):
                return outcome
        # no controller leads right now (a take-over under way): go round again shortly
        if time.monotonic() > deadline or client.stop_event.wait(0.1):
            break
    if isinstance(outcome, httpx.Response):
        return outcome
    assert outcome is not None  # there is at least one URL
    raise outcome


def move_on(client: AgentClient, failed: str, why: str) -> bool:
    """Make the URL after ``failed`` the client's current one (unless another thread already
    moved on); returns whether there is another URL to try."""
    if not client._failover or client.stop_event.is_set():
        return False
    with client._url_lock:
        if client.url == failed:
            index = client.urls.index(failed)
            client.url = client.urls[(index + 1) % len(client.urls)]
            log.warning("controller %s %s; trying %s", failed, why, client.url)
    return True
