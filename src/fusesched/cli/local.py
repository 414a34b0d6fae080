"""A whole cluster in one process: the embedded default behind ``fusesched up``.

One controller (SQLite in the data folder unless a database URL is given) and one or more
node agents that start real processes on this machine. Tests use the same class to run a
controller with several agents of distinct names and sizes.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from fusesched.agent.client import AgentClient
from fusesched.agent.config import AgentConfig, load_config
from fusesched.agent.discovery import discover
from fusesched.agent.runtime import ProcessRuntime
from fusesched.controller.server import DEFAULT_PORT, ControllerServer
from fusesched.policies.registry import CoreConfig


@dataclass
class AgentHandle:
    name: str
    client: AgentClient

    def stop(self) -> None:
        self.client.stop()


def start_agent(
    controller_url: str,
    config: Path | AgentConfig | None,
    *,
    name: str | None = None,
    work_dir: Path | None = None,
    long_poll_s: float = 2.0,
) -> AgentHandle:
    """Discover this node, register it with the controller and start serving tasks."""
    cfg = config if isinstance(config, AgentConfig) else load_config(config)
    updates: dict[str, object] = {}
    if name is not None:
        updates["name"] = name
    if work_dir is not None:
        updates["work_dir"] = work_dir
    if updates:
        cfg = cfg.model_copy(update=updates)
    inventory = discover(cfg)
    runtime = ProcessRuntime.from_config(cfg)
    client = AgentClient(
        controller_url,
        inventory,
        runtime,
        long_poll_s=long_poll_s,
    )
    client.start()
    return AgentHandle(inventory.name, client)


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
    ) -> None:
        self.data_dir = data_dir.absolute()
        self.server = ControllerServer(
            self.data_dir,
            port=port,
            database_url=database_url,
            core=core or CoreConfig(placement="best-fit"),
            long_poll_s=long_poll_s,
        )
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
            }
        )

    @property
    def url(self) -> str:
        return self.server.url

    def start(self) -> LocalCluster:
        self.server.start()
        try:
            for cfg in self.agent_configs:
                self.agents.append(start_agent(self.url, cfg, long_poll_s=self.long_poll_s))
        except BaseException:
            self.stop()
            raise
        return self

    def stop(self) -> None:
        for handle in self.agents:
            handle.stop()
        self.agents = []
        self.server.stop()

    def __enter__(self) -> LocalCluster:
        return self.start()

    def __exit__(self, *_: object) -> None:
        self.stop()
