"""The controller's Prometheus metrics: what the collector shows for a small controller (two
nodes in two pools, one running GPU job, scripted heartbeats), without any server."""

from __future__ import annotations

import json
import re
from collections.abc import Iterator
from pathlib import Path

import pytest
from prometheus_client.parser import text_string_to_metric_families
from tests.builders import Clock

from fusesched.api.wire import (
    DeviceInfo,
    GpuHealthWire,
    Heartbeat,
    NodeHealthWire,
    NodeInventory,
    TaskReport,
    TaskSampleWire,
    TaskState,
)
from fusesched.controller.logs import LogStore
from fusesched.controller.metric_readings import GpuReading, gpu_reading
from fusesched.controller.metrics import ControllerMetrics, metrics_for
from fusesched.controller.persist import Persistence
from fusesched.controller.service import Controller
from fusesched.store.usage import DEFAULT_POWER
from fusesched.submit.request import JobRequest

Labels = frozenset[tuple[str, str]]
DASHBOARD = Path(__file__).parents[2] / "deploy" / "grafana" / "fusesched.json"


class GpuWithReadings(GpuHealthWire):
    """A GPU entry carrying readings, as the wire will once agents send them."""

    utilization_pct: float | None = None
    memory_used_bytes: int | None = None
    power_w: float | None = None
    temperature_c: float | None = None


@pytest.fixture
def ctl(tmp_path: Path, clock: Clock) -> Iterator[Controller]:
    persist = Persistence(f"sqlite:///{tmp_path / 'db.sqlite'}")
    controller = Controller(persist, LogStore(tmp_path / "logs"), clock=clock)
    controller.register(
        NodeInventory(
            name="cpu-1",
            resources={"cpu": "4", "memory": "8Gi"},
            labels={"fusesched.io/pool": "cpu"},
        )
    )
    controller.register(
        NodeInventory(
            name="gpu-1",
            resources={"cpu": "8", "memory": "16Gi", "nvidia.com/gpu": "2"},
            labels={"fusesched.io/pool": "gpu"},
            devices=[
                DeviceInfo(index=0, uuid="GPU-a", model="H200"),
                DeviceInfo(index=1, uuid="GPU-b", model="H200"),
            ],
        )
    )
    controller.run_cycle()
    yield controller
    persist.close()


def scrape(ctl: Controller) -> dict[str, dict[Labels, float]]:
    """Every sample of the exposition: name -> labels -> value."""
    text = metrics_for(ctl).exposition().decode()
    out: dict[str, dict[Labels, float]] = {}
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            out.setdefault(sample.name, {})[frozenset(sample.labels.items())] = sample.value
    return out


def value(found: dict[str, dict[Labels, float]], name: str, **labels: str) -> float:
    wanted = frozenset(labels.items())
    hits = [v for key, v in found.get(name, {}).items() if wanted <= key]
    assert len(hits) == 1, (name, labels, found.get(name))
    return hits[0]


def gpu_job(ctl: Controller) -> tuple[str, str]:
    """Submit and start a 2-core, 1-GPU job; (job id, task id)."""
    request = JobRequest.model_validate(
        {
            "name": "train",
            "queue": "ai",
            "groups": [
                {
                    "name": "main",
                    "resources": {"cpu": "2", "memory": "1Gi", "nvidia.com/gpu": "1"},
                    "argv": ["sleep", "60"],
                }
            ],
        }
    )
    (job_id,) = ctl.submit([request])
    ctl.run_cycle()
    (task_id,) = ctl.jobs[job_id].tasks
    return job_id, task_id


def beat(
    ctl: Controller, task_id: str, at: float, cpu: float, power: float | None, util: float
) -> None:
    """A full heartbeat of gpu-1: the task running, its sample, and both GPUs' readings;
    fed to the metrics as failures.observe's hook does."""
    task = ctl.tasks[task_id][1]
    sample = TaskSampleWire(
        task_id=task_id,
        time=at,
        cpu_seconds=cpu,
        rss_bytes=300_000_000,
        processes=1,
        gpu_indices=list(task.grant.gpu_indices),
        gpu_util_mean=util,
        gpu_memory_bytes=10 * 2**30,
    )
    gpus: list[GpuHealthWire] = [
        GpuWithReadings(
            index=i,
            uuid=f"GPU-{'ab'[i]}",
            utilization_pct=util if i in task.grant.gpu_indices else 0.0,
            power_w=power if i in task.grant.gpu_indices else 80.0,
            temperature_c=60.0 + i,
        )
        for i in (0, 1)
    ]
    heartbeat = Heartbeat(
        node="gpu-1",
        reports=[TaskReport(task_id=task_id, state=TaskState.RUNNING, pid=42)],
        running=[task_id],
        samples=[sample],
        health=NodeHealthWire(gpus=gpus),
    )
    ctl.heartbeat(heartbeat, wait_s=0)
    with ctl.lock:
        metrics_for(ctl).observe(heartbeat, ctl.clock())


def test_an_idle_controller_shows_nodes_pools_and_jobs(ctl: Controller) -> None:
    found = scrape(ctl)
    assert value(found, "fusesched_pool_capacity", pool="cpu", resource="cpu") == 4
    assert value(found, "fusesched_pool_capacity", pool="gpu", resource="cpu") == 8
    assert value(found, "fusesched_pool_capacity", pool="gpu", resource="nvidia.com/gpu") == 2
    assert value(found, "fusesched_pool_capacity", pool="cpu", resource="memory") == 8 * 2**30
    assert value(found, "fusesched_pool_allocated", pool="gpu", resource="cpu") == 0
    assert value(found, "fusesched_node_up", node="cpu-1", pool="cpu", state="up") == 1
    assert value(found, "fusesched_node_up", node="gpu-1", pool="gpu", state="up") == 1
    assert {dict(k)["state"] for k in found["fusesched_jobs"]} == {
        "Pending",
        "Running",
        "Completed",
        "Failed",
        "Cancelled",
    }
    assert sum(found["fusesched_jobs"].values()) == 0
    assert "fusesched_queue_jobs" not in found  # no live job, no queue
    assert "fusesched_job_energy_joules" not in found
    # idle: the power model's idle watts (cores, and both H200s without a reading)
    idle = 8 * DEFAULT_POWER.cpu_core.idle + 2 * DEFAULT_POWER.gpu["H200"].idle
    assert value(found, "fusesched_node_power_watts", node="gpu-1", source="estimated") == idle
    assert value(found, "fusesched_cycles_total") >= 1
    assert "fusesched_gpu_power_watts" not in found  # nothing measured yet


def test_a_running_gpu_job_measured_and_estimated(ctl: Controller, clock: Clock) -> None:
    job_id, task_id = gpu_job(ctl)
    start = clock.now
    found = scrape(ctl)
    assert value(found, "fusesched_queue_jobs", queue="ai", state="Running") == 1
    assert value(found, "fusesched_queue_jobs", queue="ai", state="Pending") == 0
    assert value(found, "fusesched_jobs", state="Running") == 1
    assert value(found, "fusesched_pool_allocated", pool="gpu", resource="nvidia.com/gpu") == 1
    assert value(found, "fusesched_pool_allocated", pool="gpu", resource="cpu") == 2
    assert value(found, "fusesched_node_allocated", node="gpu-1", resource="memory") == 2**30
    assert value(found, "fusesched_job_energy_joules", job_id=job_id, source="estimated") == 0

    gpu = ctl.tasks[task_id][1].grant.gpu_indices[0]
    clock.now = start + 10
    beat(ctl, task_id, clock.now, cpu=10.0, power=400.0, util=90.0)
    clock.now = start + 20
    beat(ctl, task_id, clock.now, cpu=25.0, power=500.0, util=80.0)  # 1.5 cores busy
    clock.now = start + 30
    found = scrape(ctl)

    labels = {"node": "gpu-1", "gpu": str(gpu), "uuid": f"GPU-{'ab'[gpu]}", "model": "H200"}
    assert value(found, "fusesched_gpu_power_watts", **labels) == 500
    assert value(found, "fusesched_gpu_temperature_celsius", **labels) == 60 + gpu
    assert value(found, "fusesched_gpu_utilization_ratio", **labels) == pytest.approx(0.8)
    assert value(found, "fusesched_gpu_energy_joules_total", **labels) == pytest.approx(4500)
    other = {"node": "gpu-1", "gpu": str(1 - gpu)}
    assert value(found, "fusesched_gpu_energy_joules_total", **other) == pytest.approx(800)
    assert value(found, "fusesched_node_used", node="gpu-1", resource="cpu") == 1.5
    assert value(found, "fusesched_node_used", node="gpu-1", resource="memory") == 300_000_000
    assert value(found, "fusesched_node_used", node="gpu-1", resource="nvidia.com/gpu") == (
        pytest.approx(0.8)
    )
    assert value(found, "fusesched_pool_used", pool="gpu", resource="cpu") == 1.5
    assert value(found, "fusesched_node_power_watts", node="gpu-1", source="measured") == 580
    cpu_w = DEFAULT_POWER.cpu_core
    busy = 2 * cpu_w.at(DEFAULT_POWER.load) + 6 * cpu_w.idle
    assert value(found, "fusesched_node_power_watts", node="gpu-1", source="estimated") == (
        pytest.approx(busy)
    )
    # the job: 4500 J measured on its GPU over 10 s; 30 s of 2 cores and 20 s of GPU modelled
    measured = value(found, "fusesched_job_energy_joules", job_id=job_id, source="measured")
    estimated = value(found, "fusesched_job_energy_joules", job_id=job_id, source="estimated")
    assert measured == pytest.approx(4500)
    h200 = DEFAULT_POWER.gpu["H200"].at(DEFAULT_POWER.load)
    assert estimated == pytest.approx(2 * 30 * cpu_w.at(DEFAULT_POWER.load) + 20 * h200)
    with ctl.lock:
        energy = metrics_for(ctl).job_energy(ctl.jobs[job_id], clock.now)
    assert energy.total_j == pytest.approx(measured + estimated)


def test_the_job_leaves_the_live_series_when_it_ends(ctl: Controller, clock: Clock) -> None:
    _, task_id = gpu_job(ctl)
    clock.now += 5
    beat(ctl, task_id, clock.now, cpu=1.0, power=300.0, util=50.0)
    done = Heartbeat(
        node="gpu-1",
        reports=[TaskReport(task_id=task_id, state=TaskState.EXITED, exit_code=0)],
        running=[],
    )
    ctl.heartbeat(done, wait_s=0)
    ctl.run_cycle()
    with ctl.lock:
        metrics_for(ctl).observe(done, clock.now)
    found = scrape(ctl)
    assert value(found, "fusesched_jobs", state="Completed") == 1
    assert value(found, "fusesched_jobs", state="Running") == 0
    assert "fusesched_job_energy_joules" not in found
    assert value(found, "fusesched_pool_allocated", pool="gpu", resource="cpu") == 0
    assert "fusesched_node_used" not in found or (
        value(found, "fusesched_node_used", node="gpu-1", resource="cpu") == 0
    )
    assert not metrics_for(ctl)._task_energy  # nothing kept for ended tasks


def test_cycle_latency_histogram(ctl: Controller) -> None:
    metrics = metrics_for(ctl)
    ctl.run_cycle()  # the controller times its own cycles
    before = scrape(ctl)
    count = value(before, "fusesched_cycle_seconds_count")
    assert count >= 1
    with ctl.work, metrics.cycle_timer():
        pass
    metrics.observe_cycle(0.003)
    found = scrape(ctl)
    assert value(found, "fusesched_cycle_seconds_count") == count + 2
    assert value(found, "fusesched_cycle_seconds_sum") >= 0.003


def test_one_metrics_object_per_controller(ctl: Controller, tmp_path: Path) -> None:
    assert metrics_for(ctl) is metrics_for(ctl)
    other = Controller(Persistence(f"sqlite:///{tmp_path / 'b.sqlite'}"), LogStore(tmp_path))
    assert metrics_for(other) is not metrics_for(ctl)
    assert isinstance(metrics_for(other), ControllerMetrics)


def test_readings_are_taken_by_name_and_only_when_finite() -> None:
    assert gpu_reading(GpuHealthWire(index=0)) == GpuReading()
    full = GpuWithReadings(index=0, utilization_pct=50.0, power_w=123.5, temperature_c=41.0)
    assert gpu_reading(full) == GpuReading(50.0, None, 123.5, 41.0, None)
    assert gpu_reading(GpuWithReadings(index=0, power_w=float("nan"))).power_w is None
    assert gpu_reading(GpuWithReadings(index=0, power_w=-1.0)).power_w is None


def dashboard_exprs() -> list[str]:
    board = json.loads(DASHBOARD.read_text())
    return [t["expr"] for p in board["panels"] for t in p.get("targets", ())]


def test_the_dashboard_uses_only_metrics_the_controller_exposes(
    ctl: Controller, clock: Clock
) -> None:
    _, task_id = gpu_job(ctl)
    for step in (1, 2):
        clock.now += 10
        beat(ctl, task_id, clock.now, cpu=5.0 * step, power=300.0, util=50.0)
    metrics_for(ctl).observe_cycle(0.001)
    exposed = set(scrape(ctl))
    used = {m for e in dashboard_exprs() for m in re.findall(r"\b(?:fusesched|process)_\w+", e)}
    assert len(used) >= 15
    assert used <= exposed, sorted(used - exposed)
