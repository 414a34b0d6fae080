"""Start a node agent in this process: what ``fusesched agent`` runs, and what
:class:`~fusesched.cli.local.LocalCluster` starts for each of its agents.

Kept apart from :mod:`fusesched.cli.local` so that an agent process does not import the
controller (its web framework, store and migrations): an agent started again after a crash
registers sooner.
"""

from __future__ import annotations

import ssl
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

import httpx

from fusesched.agent.client import AgentClient
from fusesched.agent.config import AgentConfig, load_config
from fusesched.agent.discovery import discover
from fusesched.agent.joining import JoinError, controller_urls, credential
from fusesched.agent.link import ControllerLink
from fusesched.agent.runtime import ProcessRuntime
from fusesched.agent.sensing import Sensing
from fusesched.tls import client_context


@dataclass
class AgentHandle:
    name: str
    client: AgentClient

    def stop(self, leave: bool = True) -> None:
        """Stop the agent and kill its tasks; ``leave``: tell the controller first
        (:meth:`AgentClient.stop`)."""
        self.client.stop(leave=leave)


def _credential(
    urls: Sequence[str],
    node: str,
    work_dir: Path,
    join_token: str | None,
    verify: ssl.SSLContext | bool,
) -> str | None:
    """:func:`credential` from the first of ``urls`` that is up and leads (a standby answers
    503; the other refusals are final)."""
    for i, url in enumerate(urls):
        last = i == len(urls) - 1
        try:
            return credential(url, node, work_dir, join_token, verify)
        except httpx.TransportError:
            if last:
                raise
        except JoinError as exc:
            if last or "HTTP 503" not in str(exc):
                raise
    raise AssertionError("unreachable")  # pragma: no cover


def start_agent(
    controller_url: str | Sequence[str],
    config: Path | AgentConfig | None,
    *,
    name: str | None = None,
    work_dir: Path | None = None,
    long_poll_s: float = 2.0,
    token: str | None = None,
    join_token: str | None = None,
    ca: Path | None = None,
    link: ControllerLink | None = None,
) -> AgentHandle:
    """Discover this node, register it with the controller and start serving tasks.

    The node's credential is ``token`` when given, else the one an earlier join stored in the
    work dir, else a new one from ``join_token`` (stored there, mode 0600), else none (a
    controller without authentication). ``ca`` is the CA to trust when the controller speaks
    TLS. ``controller_url`` may name several controllers (a leader and its standbys: a list,
    or URLs separated by commas); the agent follows whichever leads. With ``link`` (a
    controller in this process) it registers and beats through that instead of HTTP; the URL
    is still what its tasks are told."""
    urls = controller_urls(controller_url)
    cfg = config if isinstance(config, AgentConfig) else load_config(config)
    updates: dict[str, object] = {}
    if name is not None:
        updates["name"] = name
    if work_dir is not None:
        updates["work_dir"] = work_dir
    if updates:
        cfg = cfg.model_copy(update=updates)
    inventory = discover(cfg)
    verify = client_context(ca) or True
    if token is None and link is None:
        token = _credential(urls, inventory.name, cfg.work_dir, join_token, verify)
    runtime = ProcessRuntime.from_config(cfg)
    client = AgentClient(
        urls,
        inventory,
        runtime,
        long_poll_s=long_poll_s,
        token=token,
        verify=verify,
        ca_path=ca.absolute() if ca is not None else None,
        sensing=Sensing.from_config(cfg),
        link=link,
    )
    client.start()
    return AgentHandle(inventory.name, client)
