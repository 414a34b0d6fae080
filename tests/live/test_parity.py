"""The same workload through the simulator and through the live controller: same decisions.

The live side is the real thing — controller, REST API, store, three agents speaking HTTP —
except that the agents' tasks only pretend to run (``FakeRuntime``) for exactly the durations
the simulator uses, and the controller's clock is a fake one the test advances. The test runs
the live controller in lock-step with simulated time: at each instant it waits until the agents
have reported every exit due, submits the jobs due, and runs one scheduling cycle — what the
simulator does at each instant.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from pathlib import Path

import numpy as np
import pytest

from fusesched.agent.client import AgentClient
from fusesched.agent.fake import FakeRuntime
from fusesched.api.wire import NodeInventory
from fusesched.controller.server import ControllerServer
from fusesched.model.events import StartJob
from fusesched.model.node import NodeSpec
from fusesched.model.resources import Resources
from fusesched.policies.registry import CoreConfig
from fusesched.sdk import Client
from fusesched.sim.engine import SimJob, Simulation
from fusesched.submit.request import JobRequest

START = 1_000_000.0
CONFIG = CoreConfig(queue_order="fcfs", backfill="easy", placement="best-fit")


class FakeClock:
    def __init__(self, now: float) -> None:
        self.now = now

    def __call__(self) -> float:
        return self.now


NODES = [
    NodeInventory(name="node-a", resources={"cpu": "4", "memory": "8Gi"}, labels={"pool": "x"}),
    NodeInventory(name="node-b", resources={"cpu": "4", "memory": "8Gi"}, labels={"pool": "y"}),
    NodeInventory(name="node-c", resources={"cpu": "8", "memory": "16Gi"}, labels={"pool": "y"}),
]


def workload(n: int, seed: int) -> list[tuple[float, JobRequest, float]]:
    """(submit offset, request, true runtime): gangs, selectors, spreading, walltime kills."""
    rng = np.random.default_rng(seed)
    out = []
    t = 0.0
    for i in range(n):
        t += float(rng.choice([0, 0, 1, 2, 5]))
        replicas = int(rng.integers(1, 4))
        cpu = int(rng.integers(1, 5))
        runtime = float(rng.integers(1, 40))
        walltime = runtime + float(rng.integers(0, 20)) if i % 7 else runtime / 2  # some killed
        placement: dict[str, object] = {}
        if i % 5 == 0:
            placement["node_selector"] = {"pool": "y"}
        if i % 4 == 0 and replicas > 1:
            placement["max_tasks_per_node"] = 1
        request = JobRequest.model_validate(
            {
                "name": f"j{i}",
                "walltime_s": walltime,
                "placement": placement,
                "groups": [
                    {
                        "replicas": replicas,
                        "resources": {"cpu": str(cpu), "memory": f"{cpu}Gi"},
                        "argv": ["work"],
                    }
                ],
            }
        )
        out.append((t, request, runtime))
    return out


def simulate(jobs: list[tuple[float, JobRequest, float]]) -> list[tuple[str, float, object]]:
    nodes = [NodeSpec(n.name, Resources.parse(n.resources), n.labels) for n in NODES]
    sim_jobs = [
        SimJob(request.to_job_spec(str(k + 1), START + t), runtime)
        for k, (t, request, runtime) in enumerate(jobs)
    ]
    result = Simulation(nodes, sim_jobs, CONFIG, kill_at_walltime=True, keep_log=True).run()
    starts = [d for d in result.log if isinstance(d, StartJob)]
    ends = {o.job_id: o.start for o in result.outcomes}
    return [(d.job_id, ends[d.job_id] - START, _where(d)) for d in starts]


def _where(decision: StartJob) -> object:
    return [(g.group, g.nodes, g.counts) for g in decision.groups]


def wait_until(condition: Callable[[], bool], what: str, timeout: float = 20.0) -> None:
    deadline = time.monotonic() + timeout
    while not condition():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out waiting for {what}")
        time.sleep(0.005)


def run_live(
    jobs: list[tuple[float, JobRequest, float]], data: Path
) -> list[tuple[str, float, object]]:
    clock = FakeClock(START)
    server = ControllerServer(
        data, port=0, core=CONFIG, long_poll_s=0.2, clock=clock, auto_schedule=False
    ).start()
    controller = server.controller
    durations = {str(k + 1): runtime for k, (_, _, runtime) in enumerate(jobs)}
    agents = []
    try:
        for inventory in NODES:  # registered in this order, as the simulator adds them
            agent = AgentClient(
                server.url, inventory, FakeRuntime(clock, durations), long_poll_s=0.2
            )
            agent.start()
            agents.append(agent)
            wait_until(lambda name=inventory.name: name in controller.nodes, "registration")
        client = Client(server.url)
        due = list(enumerate(jobs))
        ends: dict[str, float] = {}  # running job -> when its fake tasks end
        starts: list[tuple[str, float, object]] = []
        while due or ends:
            next_submit = START + due[0][1][0] if due else float("inf")
            now = min([next_submit, *ends.values()])
            clock.now = now
            ending = [job for job, end in ends.items() if end <= now]
            wait_until(
                lambda ending=ending: all(_exited(controller, j) for j in ending), "exit reports"
            )
            for job in ending:
                del ends[job]
            batch = []
            while due and START + due[0][1][0] == now:
                batch.append(due.pop(0)[1][1])
            if batch:
                client.submit_many([r.model_dump(mode="json", exclude_none=True) for r in batch])
            for decision in controller.run_cycle():
                if isinstance(decision, StartJob):
                    starts.append((decision.job_id, now - START, _where(decision)))
                    walltime = float(jobs[int(decision.job_id) - 1][1].walltime_s or 1e9)
                    runtime = min(durations[decision.job_id], walltime)
                    ends[decision.job_id] = now + runtime
            wait_until(lambda: _all_started(controller), "task starts")
        return starts
    finally:
        for agent in agents:
            agent.stop()
        server.stop()


def _exited(controller: object, job_id: str) -> bool:
    live = controller.jobs.get(job_id)  # type: ignore[attr-defined]
    if live is None:
        return True
    return bool(live.exit_sent)


def _all_started(controller: object) -> bool:
    with controller.lock:  # type: ignore[attr-defined]
        tasks = [t for _, t in controller.tasks.values()]  # type: ignore[attr-defined]
        return all(t.state in ("running", "exited") for t in tasks)


@pytest.mark.parametrize("seed", [1, 2])
def test_simulator_and_live_controller_make_the_same_decisions(tmp_path: Path, seed: int) -> None:
    jobs = workload(40, seed)
    expected = simulate(jobs)
    assert len(expected) == 40
    assert len({tuple(map(str, w)) for _, _, w in expected}) > 5  # a varied workload
    live = run_live(jobs, tmp_path / "data")
    assert live == expected
