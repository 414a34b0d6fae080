"""A whole cluster in one process: the embedded default behind ``fusesched up``.

One controller (SQLite in the data folder unless a database URL is given) and one or more
node agents that start real processes on this machine. Tests use the same class to run a
controller with several agents of distinct names and sizes.

The agents reach the controller over its HTTP API, as agents on other machines do, or, with
``agent_link="direct"`` (what ``fusesched up`` uses), through :class:`DirectLink`: they call the
controller in this process, so a heartbeat costs no request to encode, send, route and decode.
"""

from __future__ import annotations

import logging
import socket
from collections.abc import Sequence
from pathlib import Path
from typing import Final, Literal, NoReturn

from fusesched.agent.config import AgentConfig, load_config
from fusesched.agent.link import LinkError, NodeForgotten
from fusesched.agent.start import AgentHandle, start_agent
from fusesched.api.wire import Heartbeat, HeartbeatReply, NodeInventory
from fusesched.backends.federation_config import FederationConfig
from fusesched.controller.inactive import DEFAULT_INACTIVE_LIMIT_S
from fusesched.controller.notify_send import NotifyConfig
from fusesched.controller.power import PowerConfig
from fusesched.controller.records import UnknownNodeError
from fusesched.controller.server import DEFAULT_PORT, ControllerServer
from fusesched.policies.registry import CoreConfig

log = logging.getLogger("fusesched.local")

__all__ = ["AGENT_LINKS", "AgentHandle", "AgentLink", "DirectLink", "LocalCluster", "start_agent"]

AgentLink = Literal["http", "direct"]
AGENT_LINKS: Final = ("http", "direct")


class DirectLink:
    """A local agent's :class:`~fusesched.agent.link.ControllerLink` to the controller of
    ``server``, in the same process. It stands for the API's agent routes without their
    authentication (the caller is this process: nothing outside it can reach the link); the
    controller does the same work as for an HTTP beat. A stopped controller, or one that
    stepped down (:attr:`ControllerServer.fenced`), refuses with :class:`LinkError`, so the
    agent backs off as from an unreachable one; so does a heartbeat whose long poll ends after
    the controller stepped down (its reply, launches included, is dropped).

    The objects passed each way are the frozen wire models themselves, shared, not copies:
    neither side may change what they hold (their lists and dicts included).
    """

    def __init__(self, server: ControllerServer) -> None:
        self._server = server
        self._failing = False  # the last call failed: its traceback was logged already

    def register(self, inventory: NodeInventory) -> None:
        self._leading()
        try:
            self._server.controller.register(inventory)
        except ValueError:  # an invalid inventory (name, address, resources): for the caller
            raise
        except Exception as exc:  # as the API would answer 5xx: the caller retries
            self._failed(exc, f"registering node {inventory.name!r}")
        self._failing = False

    def heartbeat(self, beat: Heartbeat, wait_s: float, launch: bool) -> HeartbeatReply:
        self._leading()
        try:
            reply = self._server.controller.heartbeat(beat, wait_s, launch)
        except UnknownNodeError:
            raise NodeForgotten(f"node {beat.node!r} is not registered") from None
        except Exception as exc:  # as the API would answer 500: the beat is sent again
            self._failed(exc, f"heartbeat of node {beat.node!r}")
        self._failing = False
        self._leading()  # it stepped down during the long poll: its reply does not count
        return reply

    def _leading(self) -> None:
        if self._server.fenced is not None:
            raise LinkError(f"the controller stepped down: {self._server.fenced}")
        if self._server.controller.stopped.is_set():
            raise LinkError("the controller has stopped")

    def _failed(self, exc: Exception, what: str) -> NoReturn:
        """Log a failure (its traceback once per run of failures) and raise it as a
        :class:`LinkError`."""
        if self._failing:
            log.warning("%s failed again: %s", what, exc)
        else:
            log.exception("%s failed", what)
        self._failing = True
        raise LinkError(f"{what} failed: {exc}") from exc


class LocalCluster:
    """A controller and local agents in this process (see the module docstring)."""

    def __init__(
        self,
        data_dir: Path,
        *,
        port: int = DEFAULT_PORT,
        agents: int | Sequence[AgentConfig] = 1,
        agent_config: Path | None = None,
        database_url: str | None = None,
        core: CoreConfig | None = None,
        long_poll_s: float = 1.0,
        auth: bool = False,
        tls_cert: Path | None = None,
        tls_key: Path | None = None,
        ca: Path | None = None,
        federation: FederationConfig | None = None,
        power: PowerConfig | None = None,
        agent_link: AgentLink = "http",
        notify: NotifyConfig | None = None,
        tenancy_file: Path | None = None,
        inactive_limit_s: float = DEFAULT_INACTIVE_LIMIT_S,
        purge_after_s: float | None = None,
    ) -> None:
        if agent_link not in AGENT_LINKS:
            known = ", ".join(AGENT_LINKS)
            raise ValueError(f"unknown agent link {agent_link!r}; choose from: {known}")
        self.agent_link = agent_link
        self.data_dir = data_dir.absolute()
        self.server = ControllerServer(
            self.data_dir,
            port=port,
            database_url=database_url,
            core=core or CoreConfig(placement="best-fit"),
            long_poll_s=long_poll_s,
            auth=auth,
            tls_cert=tls_cert,
            tls_key=tls_key,
            federation=federation,
            power=power,
            notify=notify,
            tenancy_file=tenancy_file,
            inactive_limit_s=inactive_limit_s,
            purge_after_s=purge_after_s,
        )
        self.ca = ca
        if isinstance(agents, int):
            base = load_config(agent_config)
            self.agent_configs = [self._local(base, i, agents) for i in range(agents)]
        else:
            self.agent_configs = list(agents)
        self.agents: list[AgentHandle] = []
        self.long_poll_s = long_poll_s

    def _local(self, base: AgentConfig, i: int, count: int) -> AgentConfig:
        """Agent ``i`` of ``count`` on this machine: its own name and folders."""
        name = base.name or ("local" if count == 1 else f"local-{i + 1}")
        if count > 1 and base.name:
            name = f"{base.name}-{i + 1}"
        root = self.data_dir / "agents" / name
        return base.model_copy(
            update={
                "name": name,
                "address": base.address or "127.0.0.1",
                "work_dir": root / "work",
                "image_cache_dir": self.data_dir / "images",
                "tmp_dir": _own_tmp(base.tmp_dir, root, name, count),
            }
        )

    @property
    def url(self) -> str:
        return self.server.url

    @property
    def admin_token(self) -> str | None:
        """The cluster-admin token a first start with authentication wrote, if any."""
        path = self.server.admin_token_path
        return path.read_text().strip() if path is not None else None

    def start(self) -> LocalCluster:
        self.server.start()
        try:
            authenticator = self.server.authenticator
            for cfg in self.agent_configs:
                # with authentication, local agents get their credential directly (no join);
                # on the direct link they use it only to relay terminals (run --pty)
                name = cfg.name or socket.gethostname()  # as discovery names the node
                link = DirectLink(self.server) if self.agent_link == "direct" else None
                token = None
                if authenticator.enabled:
                    token = authenticator.issue_agent(name)
                self.agents.append(
                    start_agent(
                        self.url,
                        cfg,
                        long_poll_s=self.long_poll_s,
                        token=token,
                        ca=self.ca,
                        link=link,
                    )
                )
        except BaseException:
            self.stop()
            raise
        return self

    def stop(self) -> None:
        # the agents do not tell the controller they leave: it stops with them (its next start
        # settles their jobs), and requeueing each agent's jobs onto the next agent to stop
        # would only slow the stop down and spend the jobs' restarts. They stop beating first,
        # then the controller stops, which answers their long polls at once (else each stop
        # waits out a poll), then they stop and kill their tasks.
        for handle in self.agents:
            handle.client.stop_event.set()
        self.server.stop()
        for handle in self.agents:
            handle.stop(leave=False)
        self.agents = []

    def __enter__(self) -> LocalCluster:
        return self.start()

    def __exit__(self, *_: object) -> None:
        self.stop()


def _own_tmp(configured: Path | None, root: Path, name: str, count: int) -> Path | None:
    """Several agents on one machine get a TMPDIR each, as on separate nodes (one subfolder
    per agent of a configured one); a single agent keeps what is configured."""
    if count == 1:
        return configured
    return configured / name if configured is not None else root / "tmp"


def unresolved(names: Sequence[str]) -> list[str]:
    """Those of the node ``names`` this machine cannot resolve (``getaddrinfo``): a script
    that takes its rendezvous host from ``scontrol show hostnames`` cannot reach them, though
    fusesched's own ``MASTER_ADDR`` (the node's address) works."""
    missing = []
    for name in names:
        try:
            socket.getaddrinfo(name, None)
        except (OSError, UnicodeError):
            missing.append(name)
    return missing
