"""The controller's monitor: hang, GPU and node findings from the agents' samples and health."""

from __future__ import annotations

from collections.abc import Callable

import numpy as np

from fusesched.agent.fake_sensors import FakeSensors
from fusesched.agent.sample_window import SampleWindow
from fusesched.agent.sensing import Sensing, sample_to_wire
from fusesched.agent.sensors import TaskWatch, collect
from fusesched.api.wire import NodeHealthWire
from fusesched.controller.hang import HangPolicy
from fusesched.controller.monitor import Finding, JobInfo, Monitor, task_sample
from fusesched.model.job import JobType

MINUTE = 60.0
Step = Callable[[FakeSensors, int], None]


class Node:
    """A node whose sensors are scripted: FakeSensors → Sensing → what a heartbeat carries."""

    def __init__(self, name: str, gpus: int, watches: list[TaskWatch]) -> None:
        self.name = name
        self.fake = FakeSensors(gpus=gpus)
        self.now = 0.0
        self.sensing = Sensing(self.fake, interval_s=0, clock=lambda: self.now)
        self.watches = watches

    def beat(self, monitor: Monitor, now: float) -> None:
        self.now = now
        self.sensing.sample(self.watches)
        samples, health = self.sensing.pending()
        monitor.observe(self.name, samples, health, now)
        self.sensing.delivered(samples)


def stuck(fake: FakeSensors, i: int) -> None:
    fake.gpu(0, util=100.0, memory=40 * 2**30)  # a collective stuck in NCCL spins at 100 %
    fake.advance("j1.0.0", cpu=30.0)


def training(fake: FakeSensors, i: int) -> None:
    fake.gpu(0, util=60.0 + 7.0 * (i % 5), memory=40 * 2**30)
    fake.advance("j1.0.0", cpu=30.0)


def feed(node: Node, monitor: Monitor, step: Step, minutes: range) -> None:
    for i in minutes:
        step(node.fake, i)
        node.beat(monitor, i * MINUTE)


def train_node() -> Node:
    return Node("n1", 1, [TaskWatch("j1.0.0", gpu_indices=(0,))])


TRAIN_JOB: dict[str, JobInfo] = {"j1.0.0": ("j1", JobType.AI_TRAIN, None)}


def test_a_stuck_training_task_is_reported_once() -> None:
    node, monitor = train_node(), Monitor()
    feed(node, monitor, stuck, range(61))
    [finding] = monitor.check(60 * MINUTE, TRAIN_JOB)
    assert (finding.kind, finding.job_id, finding.node, finding.task_id) == (
        "hang",
        "j1",
        "n1",
        "j1.0.0",
    )
    assert "gpu_util quiet" in finding.reason
    assert monitor.check(70 * MINUTE, TRAIN_JOB) == []


def test_busy_training_and_services_are_not_hung() -> None:
    node, monitor = train_node(), Monitor()
    feed(node, monitor, training, range(61))
    assert monitor.check(60 * MINUTE, TRAIN_JOB) == []
    idle, monitor = train_node(), Monitor()
    feed(idle, monitor, stuck, range(61))
    assert monitor.check(60 * MINUTE, {"j1.0.0": ("j1", JobType.SERVICE, None)}) == []
    off = HangPolicy(enabled=False)
    assert monitor.check(60 * MINUTE, {"j1.0.0": ("j1", JobType.AI_TRAIN, off)}) == []


def test_checks_are_rate_limited_per_task() -> None:
    node, monitor = train_node(), Monitor(check_interval_s=600.0)
    feed(node, monitor, stuck, range(27))  # does not cover the 30-min window yet
    assert monitor.check(26 * MINUTE, TRAIN_JOB) == []
    feed(node, monitor, stuck, range(27, 33))  # now it does, but the task was judged 6 min ago
    assert monitor.check(32 * MINUTE, TRAIN_JOB) == []
    assert [f.kind for f in monitor.check(36 * MINUTE, TRAIN_JOB)] == ["hang"]


def test_a_lost_gpu_drains_the_node_and_fails_only_the_job_on_it() -> None:
    node = Node(
        "n2", 2, [TaskWatch("a.0.0", gpu_indices=(0,)), TaskWatch("b.0.0", gpu_indices=(1,))]
    )
    jobs: dict[str, JobInfo] = {
        "a.0.0": ("a", JobType.AI_TRAIN, None),
        "b.0.0": ("b", JobType.AI_TRAIN, None),
    }
    monitor = Monitor()
    node.beat(monitor, 0.0)
    assert monitor.check(0.0, jobs) == []
    node.fake.lose_gpu(1)
    node.beat(monitor, 10.0)
    findings = monitor.check(10.0, jobs)
    assert [(f.kind, f.job_id) for f in findings] == [("node", None), ("gpu", "b")]
    assert "GPU 1 (GPU-fake-1) is lost" in findings[0].reason
    assert findings[1].reason.startswith("GPU 1 faulty: lost")
    node.beat(monitor, 20.0)  # still unhealthy: nothing new
    assert monitor.check(20.0, jobs) == []
    node.fake.xid(0, 79)  # later the other GPU falls off the bus too
    node.beat(monitor, 30.0)
    [finding] = monitor.check(30.0, jobs)
    assert (finding.kind, finding.job_id, finding.reason) == ("gpu", "a", "GPU 0 faulty: XID 79")


def test_a_node_healthy_again_is_reported() -> None:
    monitor = Monitor()
    monitor.observe("n3", [], NodeHealthWire(), 0.0)
    assert monitor.check(0.0, {}) == []
    monitor.observe("n3", [], NodeHealthWire(healthy=False, reasons=["disk full"]), 1.0)
    monitor.observe("n3", [], NodeHealthWire(healthy=False, reasons=["disk full"]), 2.0)
    assert monitor.check(2.0, {}) == [Finding("node", None, "n3", None, "disk full")]
    monitor.observe("n3", [], NodeHealthWire(), 3.0)
    [finding] = monitor.check(3.0, {})
    assert (finding.kind, finding.node) == ("node-healthy", "n3")


def test_repeated_and_forgotten_samples() -> None:
    node, monitor = train_node(), Monitor()
    feed(node, monitor, stuck, range(61))
    samples, _ = node.sensing.pending()
    assert samples == []  # all delivered
    node.now = 60 * MINUTE
    node.sensing.sample(node.watches)
    samples, _ = node.sensing.pending()
    monitor.observe("n1", samples, None, 60 * MINUTE)  # the same time again: ignored
    monitor.forget("j1.0.0")
    assert monitor.check(60 * MINUTE, TRAIN_JOB) == []  # nothing known about it any more
    assert monitor.check(61 * MINUTE, {}) == []


def test_wire_samples_fill_the_window_as_the_originals() -> None:
    fake = FakeSensors(gpus=3)
    watch = TaskWatch("t.0.0", gpu_indices=(0, 1, 2))
    direct, via_wire = SampleWindow("t.0.0"), SampleWindow("t.0.0")
    for i in range(5):
        fake.gpu(0, util=10.0 * i, memory=2**20 * i)
        fake.gpu(1, util=50.0, memory=2**30)
        fake.advance("t.0.0", cpu=1.5, io=100, log=7)
        fake.checkpoint("t.0.0", 100.0 + i)
        if i == 3:
            fake.lose_gpu(2)
        [sample], _ = collect(fake, [watch], float(i))
        direct.push(sample)
        via_wire.push(task_sample(sample_to_wire(sample, watch.gpu_indices)))
    np.testing.assert_allclose(direct.array(), via_wire.array(), equal_nan=True)
