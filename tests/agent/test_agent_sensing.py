"""The agent's sensor loop: samples and node health in full heartbeats, checkpoint folders."""

from __future__ import annotations

import json
import os
import resource
import sys
import threading
import time
from pathlib import Path

import httpx
import pytest

from fusesched.agent.client import AgentClient
from fusesched.agent.config import parse_config
from fusesched.agent.fake import FakeRuntime
from fusesched.agent.fake_sensors import FakeSensors
from fusesched.agent.health import HealthCheckProgram, HealthMonitor
from fusesched.agent.runtime import ProcessRuntime
from fusesched.agent.sensing import Sensing
from fusesched.agent.sensors import Sensors
from fusesched.agent.users import Identity
from fusesched.api.wire import Heartbeat, HeartbeatReply, NodeInventory, TaskState

from .helpers import launch, run_one

INVENTORY = NodeInventory(name="node-s", resources={"cpu": "2", "memory": "1Gi"})
# busy for a moment, a line in the log, a checkpoint file: every 50 ms
# (the checkpoint is written once, first: rewritten in the loop, a sample could catch it
# emptied by the shell's ``>`` before ``x`` is written, 0 bytes instead of 2, as CI did once)
BUSY = (
    'echo x > "$FUSESCHED_CHECKPOINT_DIR/step"; '
    "while :; do i=0; while [ $i -lt 5000 ]; do "
    "i=$((i+1)); done; echo tick; sleep 0.05; done"
)


class FakeController:
    """Answers the agent's requests in-process and keeps the heartbeats it got."""

    def __init__(self) -> None:
        self.beats: list[Heartbeat] = []
        self.lock = threading.Lock()

    def __call__(self, request: httpx.Request) -> httpx.Response:
        if request.url.path.endswith("/register"):
            return httpx.Response(200, json={})
        beat = Heartbeat.model_validate(json.loads(request.content))
        with self.lock:
            self.beats.append(beat)
        if float(request.url.params.get("wait", "0")) > 0:
            time.sleep(0.05)  # a short long poll
        return httpx.Response(200, content=HeartbeatReply().model_dump_json())

    def full(self) -> list[Heartbeat]:
        with self.lock:
            return [b for b in self.beats if b.running is not None]


def client_for(
    runtime: ProcessRuntime | FakeRuntime, sensing: Sensing
) -> tuple[AgentClient, FakeController]:
    controller = FakeController()
    client = AgentClient("http://controller", INVENTORY, runtime, sensing=sensing)
    client._http = httpx.Client(transport=httpx.MockTransport(controller))
    return client, controller


def test_full_beats_carry_growing_samples(runtime: ProcessRuntime) -> None:
    client, controller = client_for(runtime, Sensing(Sensors(), interval_s=0))
    assert client.sensing is not None
    runtime.start(launch("j1.0.0", "sh", "-c", BUSY))
    samples = []
    for _ in range(2):
        time.sleep(0.4)
        client.sensing.sample(client._watches())
        client._beat(full=True)
        [sample] = controller.full()[-1].samples
        samples.append(sample)
    first, second = samples
    assert first.task_id == "j1.0.0" and first.processes >= 1
    assert second.time > first.time
    assert second.cpu_seconds > first.cpu_seconds
    assert second.log_bytes > first.log_bytes > 0
    assert second.write_chars > first.write_chars
    assert first.checkpoint_mtime is not None and first.checkpoint_bytes == 2
    health = controller.full()[-1].health
    assert health is not None and health.healthy
    client._beat(full=True)  # nothing sampled since: nothing sent again
    assert controller.full()[-1].samples == []


def test_health_check_failure_makes_the_node_unhealthy() -> None:
    program = HealthCheckProgram(["sh", "-c", "echo disk /scratch is full; exit 1"])
    sensing = Sensing(FakeSensors(), interval_s=0, monitor=HealthMonitor(program))
    client, controller = client_for(FakeRuntime(time.monotonic), sensing)
    sensing.sample([])
    client._beat(full=True)
    health = controller.full()[-1].health
    assert health is not None and not health.healthy
    assert health.reasons == ["disk /scratch is full"]
    client._beat(full=False)  # quick beats carry neither samples nor health
    assert all(b.health is None for b in controller.beats if b.running is None)


def test_injected_gpu_fault_names_the_gpu() -> None:
    fake = FakeSensors(gpus=2)
    runtime = FakeRuntime(time.monotonic, default_duration_s=60.0)
    runtime.start(launch("j2.0.0", "train", gpu_indices=[1]))
    sensing = Sensing(fake, interval_s=0)
    fake.gpu(1, util=90.0, memory=2**30)
    healthy = sensing.sample(runtime.watches())
    assert healthy.healthy
    fake.lose_gpu(1)
    health = sensing.sample(runtime.watches())
    assert not health.healthy and "GPU 1 (GPU-fake-1) is lost" in health.reasons[0]
    [sample], wire = sensing.pending()
    assert (sample.task_id, sample.gpu_indices, sample.gpus_lost) == ("j2.0.0", [1], 1)
    assert sample.gpu_util_mean is None  # no reading from a lost GPU
    assert wire is not None and wire.faulty_gpus() == {1}


def test_sensor_thread_feeds_heartbeats() -> None:
    fake = FakeSensors(gpus=1)
    runtime = FakeRuntime(time.monotonic, default_duration_s=60.0)
    runtime.start(launch("j3.0.0", "serve", gpu_indices=[0]))
    fake.gpu(0, util=50.0, memory=2**30)
    client, controller = client_for(runtime, Sensing(fake, interval_s=0.05))
    client.start()
    try:
        deadline = time.monotonic() + 5
        while not any(b.samples for b in controller.full()):
            assert time.monotonic() < deadline, "no samples reached the controller"
            time.sleep(0.02)
    finally:
        client.stop()
    beat = next(b for b in controller.full() if b.samples)
    assert beat.samples[0].gpu_util_mean == 50.0 and beat.samples[0].gpu_memory_bytes == 2**30
    assert beat.health is not None and [g.index for g in beat.health.gpus] == [0]


def test_config_enables_the_health_check() -> None:
    config = parse_config(
        {"nvml": False, "sample_interval_s": 5, "health_check": {"argv": ["true"]}}
    )
    sensing = Sensing.from_config(config)
    assert sensing.interval_s == 5
    assert sensing.monitor.program is not None and sensing.monitor.program.argv == ["true"]
    assert sensing.sample([]).healthy


@pytest.mark.skipif(os.geteuid() != 0, reason="starting tasks under another uid needs root")
def test_checkpoint_folder_belongs_to_the_task(shared: Path) -> None:
    who = Identity("ckpt-user", 231_000, 231_000)
    rt = ProcessRuntime(shared / "work", identities=lambda user: who)
    try:
        script = 'echo x > "$FUSESCHED_CHECKPOINT_DIR/1"; echo "$FUSESCHED_CHECKPOINT_DIR"'
        report, out = run_one(rt, launch("j4.0.0", "sh", "-c", script))
        folder = shared / "work" / "tasks" / "j4.0.0" / "checkpoints"
        assert (report.state, report.exit_code, out.strip()) == (TaskState.EXITED, 0, str(folder))
        assert (folder / "1").stat().st_uid == who.uid
        # a folder elsewhere is made by the task's user, where that user may make folders
        (shared / "ckpt").mkdir(mode=0o1777)
        (shared / "ckpt").chmod(0o1777)
        custom = shared / "ckpt" / "j5"
        spec = launch("j5.0.0", "sh", "-c", script, checkpoint_dir=str(custom))
        report, out = run_one(rt, spec)
        assert (report.exit_code, out.strip()) == (0, str(custom))
        assert custom.stat().st_uid == who.uid and (custom / "1").exists()
        # ... and nowhere root alone may: the agent (root) neither creates nor hands over
        # anything the job names outside its task folder
        (shared / "rootonly").mkdir(mode=0o755)
        for name, path in (("j7", shared / "rootonly" / "new"), ("j8", shared)):
            spec = launch(f"{name}.0.0", "true", checkpoint_dir=str(path))
            report, out = run_one(rt, spec)
            assert report.state is TaskState.FAILED_TO_START or report.exit_code == 0, out
            assert not (shared / "rootonly" / "new").exists()
            assert path.stat().st_uid == 0 if path.exists() else True
        spec = launch("j9.0.0", "true", checkpoint_dir="../../../rootonly")
        report, _ = run_one(rt, spec)
        assert (shared / "rootonly").stat().st_uid == 0
    finally:
        rt.shutdown(grace_s=0.2)


def test_watches_name_the_task(runtime: ProcessRuntime) -> None:
    runtime.start(launch("j6.0.0", "sleep", "5", gpu_indices=[0]))
    [watch] = runtime.watches()
    assert watch.task_id == "j6.0.0" and watch.pgid is not None
    assert watch.log_path == runtime.log_path("j6.0.0")
    assert watch.checkpoint_dir == runtime.work_dir / "tasks" / "j6.0.0" / "checkpoints"
    assert watch.checkpoint_dir.is_dir() and watch.gpu_indices == (0,)


def test_an_exit_report_carries_the_tasks_final_sample(runtime: ProcessRuntime) -> None:
    """No periodic sample in the task's life: the final one, taken as its main process exits,
    rides with the exit in the quick report, and is not sent again."""
    client, controller = client_for(runtime, Sensing(Sensors(), interval_s=30))
    code = "import time\nwhile time.process_time() < 0.5: pass\n"
    runtime.start(launch("j7.0.0", sys.executable, "-c", code))
    deadline = time.monotonic() + 20
    while not any(r.state is TaskState.EXITED for b in controller.beats for r in b.reports):
        assert time.monotonic() < deadline, "no exit report"
        time.sleep(0.05)
        client._beat(full=False)
    [beat] = [b for b in controller.beats if any(r.state is TaskState.EXITED for r in b.reports)]
    assert beat.running is None and beat.health is None  # a quick report
    [sample] = beat.samples
    assert sample.task_id == "j7.0.0" and 0.45 <= sample.cpu_seconds <= 1.5, sample
    client._beat(full=True)
    assert controller.full()[-1].samples == []  # delivered: not sent again


def test_the_fake_runtime_takes_a_final_sample_too() -> None:
    now = [0.0]
    fake = FakeSensors()
    runtime = FakeRuntime(lambda: now[0], {"j8": 5.0})
    client, controller = client_for(runtime, Sensing(fake, interval_s=30))
    runtime.start(launch("j8.0.0", "true"))
    fake.advance("j8.0.0", cpu=4.5)
    now[0] = 6.0
    client._beat(full=False)
    [beat] = controller.beats
    assert [r.state for r in beat.reports] == [TaskState.RUNNING, TaskState.EXITED]
    assert [(s.task_id, s.cpu_seconds) for s in beat.samples] == [("j8.0.0", 4.5)]


def test_a_final_sample_holds_the_peak_memory_of_a_child_never_sampled(
    runtime: ProcessRuntime,
) -> None:
    """A child that held 64 MiB came and went between samples, and the shell's zombie holds
    none: the kernel's count, read as the task is reaped, makes the final sample's peak."""
    client, controller = client_for(runtime, Sensing(Sensors(), interval_s=30))
    # the kernel's peak of a task includes that of the process that forked it (this one):
    # only a higher peak is the task's own
    hold = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024 + (64 << 20)
    child = f"{sys.executable} -c 'x = bytes(range(256)) * ({hold} // 256)'"
    runtime.start(launch("j9.0.0", "sh", "-c", f"{child}; sleep 0.2"))
    deadline = time.monotonic() + 20
    while not any(r.state is TaskState.EXITED for b in controller.beats for r in b.reports):
        assert time.monotonic() < deadline, "no exit report"
        time.sleep(0.05)
        client._beat(full=False)
    [sample] = [s for b in controller.beats for s in b.samples if s.task_id == "j9.0.0"]
    assert sample.rss_bytes >= hold, sample
    assert sample.cpu_seconds > 0, sample
