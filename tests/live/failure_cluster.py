"""A controller and real agents built piece by piece, for the failure tests.

Unlike :class:`fusesched.cli.local.LocalCluster`, each agent here can have an injectable GPU
sensor (real psutil task sensors, scripted GPUs), its heartbeats can be cut off and restored (a
network partition: the agent and its tasks keep running), and it can be restarted with the same
name and work dir. The controller has a short node timeout and judges tasks every second.
"""

from __future__ import annotations

import contextlib
import shutil
import tempfile
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx

from fusesched.agent.client import AgentClient
from fusesched.agent.config import AgentConfig
from fusesched.agent.discovery import discover
from fusesched.agent.fake_sensors import FakeSensors
from fusesched.agent.runtime import ProcessRuntime
from fusesched.agent.sensing import Sensing
from fusesched.agent.sensors import PsutilTaskSensor, Sensors
from fusesched.api.wire import DeviceInfo, Heartbeat, HeartbeatReply
from fusesched.controller.server import ControllerServer
from fusesched.sdk import Client

SAMPLE_INTERVAL_S = 0.5
LONG_POLL_S = 0.5


@dataclass
class Agent:
    name: str
    config: AgentConfig
    runtime: ProcessRuntime
    client: AgentClient
    gpus: FakeSensors | None
    partitioned: threading.Event = field(default_factory=threading.Event)
    stopped: bool = False

    def stop(self, kill_tasks: bool = True) -> None:
        if not self.stopped:
            self.stopped = True
            self.client.stop(kill_tasks=kill_tasks)


class FailureCluster:
    """A ControllerServer (port 0, SQLite) and agents added with :meth:`add_agent`."""

    def __init__(
        self,
        root: Path,
        *,
        node_timeout_s: float = 30.0,
        sample_interval_s: float = SAMPLE_INTERVAL_S,
        long_poll_s: float = LONG_POLL_S,
    ) -> None:
        self.root = root
        self.sample_interval_s = sample_interval_s
        self.long_poll_s = long_poll_s
        self.server = ControllerServer(
            root / "data", port=0, long_poll_s=long_poll_s, node_timeout_s=node_timeout_s
        )
        self.controller = self.server.controller
        self.controller.monitor.check_interval_s = 1.0  # judge every task every second
        # the agents' work dirs must be reachable by the tasks' uids
        self.shared = Path(tempfile.mkdtemp(prefix="fusesched-failures-"))
        self.shared.chmod(0o755)
        self.agents: dict[str, Agent] = {}
        self.client = Client(self.server.url)

    def start(self) -> FailureCluster:
        self.server.start()
        return self

    def config(self, name: str, *, cpu: int = 2, gpus: int = 0) -> AgentConfig:
        devices = [DeviceInfo(index=i, uuid=f"GPU-{name}-{i}", model="H200") for i in range(gpus)]
        return AgentConfig(
            name=name,
            address="127.0.0.1",
            cpu=cpu,
            memory="2Gi",
            labels={"fusesched.io/pool": "gpu" if gpus else "cpu"},
            work_dir=self.shared / name,
            image_cache_dir=self.shared / "images",
            nvml=False,
            fake_devices=devices,
            sample_interval_s=self.sample_interval_s,
        )

    def add_agent(
        self, name: str, *, cpu: int = 2, gpus: int = 0, runtime: ProcessRuntime | None = None
    ) -> Agent:
        """Start (or restart, with the same name and work dir) agent ``name``. ``runtime``: keep
        an earlier agent's runtime (its tasks) instead of starting a new one."""
        cfg = self.config(name, cpu=cpu, gpus=gpus)
        fake = FakeSensors(gpus) if gpus else None
        sensing = Sensing(
            Sensors(tasks=PsutilTaskSensor(), gpus=fake),
            interval_s=self.sample_interval_s,
        )
        runtime = runtime if runtime is not None else ProcessRuntime.from_config(cfg)
        client = AgentClient(
            self.server.url, discover(cfg), runtime, long_poll_s=self.long_poll_s, sensing=sensing
        )
        agent = Agent(name, cfg, runtime, client, fake)
        _partitionable(agent)
        client.start()
        old = self.agents.get(name)
        if old is not None:
            old.stop(kill_tasks=False)  # normally already stopped
        self.agents[name] = agent
        return agent

    def stop(self) -> None:
        for agent in self.agents.values():
            with contextlib.suppress(Exception):
                agent.stop()
        self.server.stop()
        shutil.rmtree(self.shared, ignore_errors=True)

    # ------------------------------------------------------------------ queries

    def events(self, job_id: str) -> list[tuple[str, dict[str, Any]]]:
        """(kind, data) of the job's stored events, oldest first."""
        rows = self.server.persist.store.events_for_job(job_id)
        return [(r.event.kind, dict(r.event.data)) for r in rows]

    def event_kinds(self, job_id: str) -> list[str]:
        return [kind for kind, _ in self.events(job_id)]

    def node_state(self, name: str) -> str:
        for node in self.client.nodes():
            if node["name"] == name:
                return str(node["state"])
        raise AssertionError(f"no node {name}")


def _partitionable(agent: Agent) -> None:
    """While ``agent.partitioned`` is set, the agent's requests fail as if the network were
    down: the agent and its tasks keep running, the controller hears nothing."""
    send: Callable[[Heartbeat, float], HeartbeatReply] = agent.client._send

    def guarded(beat: Heartbeat, wait_s: float) -> HeartbeatReply:
        if agent.partitioned.is_set():
            raise httpx.ConnectError("partitioned (test)")
        return send(beat, wait_s)

    agent.client._send = guarded  # type: ignore[method-assign]


@contextlib.contextmanager
def failure_cluster(root: Path, **kwargs: Any) -> Iterator[FailureCluster]:
    cluster = FailureCluster(root, **kwargs)
    try:
        yield cluster.start()
    finally:
        cluster.stop()


def until(
    what: Callable[[], Any], timeout: float, message: str | Callable[[], str] = "timed out"
) -> Any:
    """Poll ``what`` until it returns something truthy (returned); fail after ``timeout``."""
    deadline = time.monotonic() + timeout
    while True:
        value = what()
        if value:
            return value
        if time.monotonic() > deadline:
            raise AssertionError(message() if callable(message) else message)
        time.sleep(0.1)


def process_gone(pid: int) -> bool:
    """The process no longer exists (or is a zombie waiting to be reaped)."""
    try:
        with open(f"/proc/{pid}/stat") as handle:
            state = handle.read().rsplit(")", 1)[1].split()[0]
    except (OSError, IndexError):
        return True
    return state in ("Z", "X")
