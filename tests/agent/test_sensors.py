"""Sensors: real psutil samples of real processes, NVML through a fake module, the window."""

from __future__ import annotations

import contextlib
import itertools
import os
import resource
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

from fusesched.agent.fake_sensors import FakeSensors
from fusesched.agent.nvml_sensor import NvmlGpuSensor
from fusesched.agent.sample_window import COLUMNS, SampleWindow
from fusesched.agent.sensors import (
    GpuSample,
    PsutilTaskSensor,
    Sensors,
    TaskSample,
    TaskWatch,
    collect,
    newest_file,
)

BUSY = "import time\nend = time.time() + 30\nwhile time.time() < end: pass\n"


@pytest.fixture
def spawn() -> Iterator[Any]:
    procs: list[subprocess.Popen[bytes]] = []

    def start(*argv: str, **kw: Any) -> subprocess.Popen[bytes]:
        proc = subprocess.Popen(list(argv), start_new_session=True, **kw)
        procs.append(proc)
        return proc

    yield start
    for proc in procs:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(proc.pid, 9)
        proc.wait()


def _cpu_delta(sensor: PsutilTaskSensor, watch: TaskWatch, seconds: float) -> float:
    first = sensor.sample_tasks([watch], 0.0)[0]
    time.sleep(seconds)
    second = sensor.sample_tasks([watch], seconds)[0]
    return second.cpu_seconds - first.cpu_seconds


def test_busy_process_advances_cpu_and_sleeping_one_does_not(spawn: Any) -> None:
    busy = spawn(sys.executable, "-c", BUSY)
    sleeping = spawn("sleep", "30")
    time.sleep(0.2)
    sensor = PsutilTaskSensor()
    busy_watch = TaskWatch("busy", pgid=busy.pid)
    sleep_watch = TaskWatch("sleep", pgid=sleeping.pid)
    sensor.sample_tasks([busy_watch, sleep_watch], 0.0)
    time.sleep(0.6)
    busy_s, sleep_s = sensor.sample_tasks([busy_watch, sleep_watch], 0.6)
    assert busy_s.processes == 1 and sleep_s.processes == 1
    assert _cpu_delta(sensor, busy_watch, 0.6) > 0.1  # a share of a CPU, even on a busy host
    assert _cpu_delta(sensor, sleep_watch, 0.6) < 0.05
    assert busy_s.rss_bytes > 1_000_000 and sleep_s.rss_bytes > 0


def test_file_writes_show_as_io_bytes(spawn: Any, tmp_path: Path) -> None:
    target = tmp_path / "data.bin"
    code = (
        "import os, time\ntime.sleep(0.5)\n"
        f"with open({str(target)!r}, 'wb') as f:\n"
        "    f.write(b'x' * (4 << 20)); f.flush(); os.fsync(f.fileno())\n"
        "time.sleep(30)\n"
    )
    proc = spawn(sys.executable, "-c", code)
    sensor = PsutilTaskSensor()
    watch = TaskWatch("io", pgid=proc.pid)
    time.sleep(0.2)
    before = sensor.sample_tasks([watch], 0.0)[0]
    deadline = time.monotonic() + 10
    while not (target.exists() and target.stat().st_size == 4 << 20):
        assert time.monotonic() < deadline
        time.sleep(0.05)
    time.sleep(0.1)
    after = sensor.sample_tasks([watch], 1.0)[0]
    assert after.write_chars - before.write_chars >= 4 << 20
    assert after.io_bytes - before.io_bytes >= 4 << 20


def test_whole_group_counted_and_counters_never_go_back(spawn: Any) -> None:
    # a shell with a busy child that ends after ~0.5 s: the child's CPU time must stay counted
    script = (
        f"{sys.executable} -c 'import time\nend=time.time()+0.5\nwhile time.time()<end: pass' &"
        " wait; sleep 30"
    )
    shell = spawn("sh", "-c", script)
    sensor = PsutilTaskSensor()
    watch = TaskWatch("group", pgid=shell.pid)
    seen: list[TaskSample] = []
    for i in range(12):
        seen.append(sensor.sample_tasks([watch], float(i))[0])
        time.sleep(0.1)
    cpu = [s.cpu_seconds for s in seen]
    assert all(b >= a for a, b in itertools.pairwise(cpu))
    assert max(s.processes for s in seen) >= 2  # the shell and its child were both seen
    assert cpu[-1] > 0.1  # the vanished child's time is still there
    assert seen[-1].processes >= 1


BUSY_1S = "import time\nend = time.time() + 1.0\nwhile time.time() < end: pass\n"


@pytest.mark.parametrize(
    "script",
    [
        f"{sys.executable} -c '{BUSY_1S}'; sleep 0.6; true",  # a child the shell reaps
        # a grandchild reaped by a shell that ends with it: the outer shell reaps them both
        f"bash -c \"{sys.executable} -c '{BUSY_1S}'; true\"; sleep 0.6; true",
    ],
    ids=["child", "grandchild"],
)
def test_a_child_reaped_inside_the_task_counts_once(script: str) -> None:
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    shell = subprocess.Popen(["bash", "-c", script], start_new_session=True)
    sensor = PsutilTaskSensor()
    watch = TaskWatch("reaped", pgid=shell.pid)
    started, cpu = time.monotonic(), [0.0]
    try:
        while shell.poll() is None:
            cpu.append(sensor.sample_tasks([watch], time.monotonic())[0].cpu_seconds)
            time.sleep(0.1)
    finally:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(shell.pid, 9)
        shell.wait()
    elapsed = time.monotonic() - started
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    real = (after.ru_utime + after.ru_stime) - (before.ru_utime + before.ru_stime)
    assert all(b >= a for a, b in itertools.pairwise(cpu))  # still never going back
    # the busy child's time once, not once as itself and again through its parent
    assert cpu[-1] <= elapsed * 1.1 and cpu[-1] <= real * 1.1 + 0.05
    assert cpu[-1] >= min(0.8 * real, 0.2)  # and it is counted


def test_vanished_task_and_cgroup_members(spawn: Any, tmp_path: Path) -> None:
    outsider = spawn("sleep", "30")  # its own group: found only through the "cgroup"
    procs = tmp_path / "cgroup.procs"
    procs.write_text(f"{outsider.pid}\n")
    sensor = PsutilTaskSensor()
    (sample,) = sensor.sample_tasks([TaskWatch("cg", cgroup_procs=procs)], 0.0)
    assert sample.processes == 1
    outsider.kill()
    outsider.wait()
    (gone,) = sensor.sample_tasks([TaskWatch("cg", cgroup_procs=procs)], 1.0)
    assert gone.processes == 0 and gone.cpu_seconds >= sample.cpu_seconds
    (nothing,) = sensor.sample_tasks([TaskWatch("none", pgid=2**22 - 7)], 0.0)
    assert nothing.processes == 0 and nothing.cpu_seconds == 0
    sensor.forget("cg")


def test_log_and_checkpoint_files(tmp_path: Path) -> None:
    log = tmp_path / "output.log"
    log.write_text("hello\n")
    ckpt = tmp_path / "ckpt"
    (ckpt / "step").mkdir(parents=True)
    (ckpt / "a.pt").write_bytes(b"1" * 10)
    (ckpt / "step" / "b.pt").write_bytes(b"2" * 20)
    os.utime(ckpt / "a.pt", (1000, 1000))
    os.utime(ckpt / "step" / "b.pt", (2000, 2000))
    assert newest_file(ckpt) == (2000.0, 20)
    assert newest_file(tmp_path / "missing") == (None, 0)
    (s,) = PsutilTaskSensor().sample_tasks([TaskWatch("t", log_path=log, checkpoint_dir=ckpt)], 5.0)
    assert s.log_bytes == 6 and s.checkpoint_mtime == 2000.0 and s.checkpoint_bytes == 20


# --- NVML through a fake module ------------------------------------------------------------


class NVMLError(Exception):
    def __init__(self, value: int) -> None:
        super().__init__(f"NVML error {value}")
        self.value = value


def fake_nvml(count: int = 2, *, events: bool = True) -> SimpleNamespace:
    state: dict[str, Any] = {"count": count, "lost": set(), "queue": [], "ecc": {}, "freed": 0}
    handles = [("gpu", i) for i in range(count)]

    def check(h: Any) -> int:
        if h[1] in state["lost"]:
            raise NVMLError(15)
        return int(h[1])

    def event_set_create() -> Any:
        if not events:
            raise NVMLError(3)
        return "events"

    def wait(es: Any, timeout_ms: int) -> Any:
        if not state["queue"]:
            raise NVMLError(10)
        index, xid = state["queue"].pop(0)
        return SimpleNamespace(device=handles[index], eventData=xid, eventType=8)

    def temperature(h: Any, sensor: int) -> int:
        check(h)
        raise NVMLError(3)  # not supported: stays nan

    def free(es: Any) -> None:
        state["freed"] += 1

    return SimpleNamespace(
        NVMLError=NVMLError,
        nvmlInit=lambda: None,
        nvmlShutdown=lambda: None,
        nvmlDeviceGetCount=lambda: state["count"],
        nvmlDeviceGetHandleByIndex=lambda i: handles[i],
        nvmlDeviceGetUUID=lambda h: f"GPU-{h[1]}".encode(),
        nvmlDeviceGetIndex=lambda h: h[1],
        nvmlDeviceGetUtilizationRates=lambda h: SimpleNamespace(gpu=50 + check(h), memory=3),
        nvmlDeviceGetMemoryInfo=lambda h: SimpleNamespace(used=1000 * (check(h) + 1)),
        nvmlDeviceGetPowerUsage=lambda h: 300_000 + check(h),
        nvmlDeviceGetTemperature=temperature,
        nvmlDeviceGetTotalEccErrors=lambda h, kind, counter: state["ecc"].get(check(h), 0),
        nvmlEventSetCreate=event_set_create,
        nvmlDeviceRegisterEvents=lambda h, types, es: None,
        nvmlEventSetWait_v2=wait,
        nvmlEventSetFree=free,
        state=state,
    )


def test_nvml_readings() -> None:
    nvml = fake_nvml(2)
    sensor = NvmlGpuSensor(nvml)
    first, second = sensor.sample_gpus(3.0)
    assert sensor.available and sensor.xid_supported
    assert (first.index, first.uuid, first.utilization_pct, first.memory_used_bytes) == (
        0,
        "GPU-0",
        50.0,
        1000,
    )
    assert second.power_w == pytest.approx(300.001) and np.isnan(second.temperature_c)
    assert not first.lost and first.xid_errors == () and first.time == 3.0
    sensor.close()
    assert nvml.state["freed"] == 1


def test_nvml_faults_lost_xid_and_ecc() -> None:
    nvml = fake_nvml(3)
    sensor = NvmlGpuSensor(nvml)
    sensor.sample_gpus(0.0)
    nvml.state["lost"].add(1)
    nvml.state["queue"].append((0, 79))
    nvml.state["ecc"][0] = 2
    nvml.state["count"] = 2  # GPU 2 vanished from the device list
    g0, g1, g2 = sensor.sample_gpus(1.0)
    assert g0.xid_errors == (79,) and g0.ecc_uncorrected == 2 and not g0.lost
    assert g1.lost and g2.lost and g2.uuid == "GPU-2"
    again = sensor.sample_gpus(2.0)
    assert again[0].xid_errors == ()  # an XID is reported once


def test_nvml_without_events_or_library() -> None:
    sensor = NvmlGpuSensor(fake_nvml(1, events=False))
    (g,) = sensor.sample_gpus(0.0)
    assert not sensor.xid_supported and g.utilization_pct == 50.0
    assert NvmlGpuSensor(None).sample_gpus(0.0) == []
    broken = fake_nvml(1)
    broken.nvmlInit = lambda: (_ for _ in ()).throw(NVMLError(9))
    assert NvmlGpuSensor(broken).sample_gpus(0.0) == []


def test_sensors_compose_tasks_and_gpus(spawn: Any) -> None:
    proc = spawn("sleep", "30")
    backend = Sensors(gpus=NvmlGpuSensor(fake_nvml(2)))
    tasks, gpus = collect(backend, [TaskWatch("t", pgid=proc.pid, gpu_indices=(1,))], 0.0)
    assert len(gpus) == 2 and [g.index for g in tasks[0].gpus] == [1]
    assert tasks[0].processes == 1


def test_fake_sensors_inject_faults() -> None:
    fake = FakeSensors(gpus=2)
    fake.advance("t", cpu=2.0, io=100, log=10, rss=5)
    fake.checkpoint("t", 42.0)
    fake.gpu(0, util=97.0, memory=123)
    fake.xid(0, 79)
    fake.ecc(1, 1)
    fake.lose_gpu(1)
    tasks, _gpus = collect(fake, [TaskWatch("t", gpu_indices=(0, 1))], 5.0)
    (t,) = tasks
    assert (t.cpu_seconds, t.io_bytes, t.log_bytes, t.checkpoint_mtime) == (2.0, 100, 10, 42.0)
    assert t.gpus[0].utilization_pct == 97.0 and t.gpus[0].xid_errors == (79,)
    assert t.gpus[1].lost
    assert collect(fake, [], 6.0)[1][0].xid_errors == ()
    fake.end("t")
    assert fake.sample_tasks([TaskWatch("t")], 7.0)[0].processes == 0


# --- the window ----------------------------------------------------------------------------


def test_window_aggregates_gpus_and_wraps() -> None:
    window = SampleWindow("t", capacity=3)
    gpus = (
        GpuSample(0, utilization_pct=50.0, memory_used_bytes=100),
        GpuSample(1, utilization_pct=100.0, memory_used_bytes=300),
        GpuSample(2, lost=True),
    )
    for i in range(5):
        window.push(TaskSample("t", float(i), cpu_seconds=i, log_bytes=10 * i, gpus=gpus))
    data = window.array()
    assert data.shape == (3, len(COLUMNS)) and list(data[:, 0]) == [2.0, 3.0, 4.0]
    cols = window.last(since=3.0)
    assert list(cols["log_bytes"]) == [30.0, 40.0]
    assert cols["gpu_util_pct"][0] == 75.0 and cols["gpu_memory_bytes"][0] == 400.0
    assert cols["gpus_lost"][0] == 1.0 and np.isnan(cols["checkpoint_mtime"][0])
    assert (window.oldest_time, window.newest_time, len(window)) == (2.0, 4.0, 3)
    with pytest.raises(ValueError, match="time order"):
        window.push(TaskSample("t", 1.0))
    with pytest.raises(ValueError, match="window of"):
        window.push(TaskSample("u", 9.0))


@given(st.integers(2, 20), st.lists(st.floats(0, 100, allow_nan=False), max_size=60))
def test_window_holds_the_newest_samples_in_order(capacity: int, steps: list[float]) -> None:
    window = SampleWindow("t", capacity)
    times = list(np.cumsum(steps)) if steps else []
    for i, when in enumerate(times):
        window.push(TaskSample("t", float(when), cpu_seconds=float(i)))
    kept = window.column("cpu_seconds")
    expected = list(range(len(times)))[-capacity:] if times else []
    assert list(kept) == expected


def test_final_sample_of_a_zombie_counts_its_time_to_the_end() -> None:
    """A task's main process has exited but is not reaped: its /proc entry still holds its own
    and its reaped children's CPU times, so a sample then counts the task to its end."""
    child = "import time\nwhile time.process_time() < 0.3: pass\n"
    code = (
        "import subprocess, sys, time\n"
        f"subprocess.run([sys.executable, '-c', {child!r}])\n"
        "while time.process_time() < 0.6: pass\n"
    )
    proc = subprocess.Popen([sys.executable, "-c", code], start_new_session=True)
    sensor = PsutilTaskSensor()
    watch = TaskWatch("zombie", pgid=proc.pid)
    try:
        early = sensor.sample_tasks([watch], time.time())[0]
        deadline = time.monotonic() + 20
        while os.waitid(os.P_PID, proc.pid, os.WEXITED | os.WNOWAIT | os.WNOHANG) is None:
            assert time.monotonic() < deadline, "the task did not exit"
            time.sleep(0.02)
        final = sensor.sample_tasks([watch], time.time())[0]
    finally:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(proc.pid, 9)
        before = resource.getrusage(resource.RUSAGE_CHILDREN)
        proc.wait()
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    real = (after.ru_utime + after.ru_stime) - (before.ru_utime + before.ru_stime)
    assert real >= 0.85  # its 0.6 s and its child's 0.3 s
    assert early.cpu_seconds < final.cpu_seconds
    assert abs(final.cpu_seconds - real) <= 0.1, (final, real)
    # reaped now: what is left is counted, never less
    assert sensor.sample_tasks([watch], time.time())[0].cpu_seconds >= final.cpu_seconds
