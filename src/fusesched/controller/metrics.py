"""Prometheus metrics of a controller (``GET /metrics``; docs/METRICS.md lists every series).

One :class:`ControllerMetrics` per :class:`~fusesched.controller.service.Controller`
(:func:`metrics_for`), with its own :class:`~prometheus_client.CollectorRegistry`:

* a custom collector that reads the controller's live state *at scrape time*, under the
  controller's lock (queues, jobs, nodes, allocation by pool and resource, running jobs'
  energy so far) and, outside it, the store's job counts by state: nothing is counted on
  the scheduling or heartbeat paths;
* the latest sensor readings per node, fed from the agents' full heartbeats through one hook
  (:meth:`ControllerMetrics.observe`, called from ``failures.observe`` with the lock held):
  per task the CPU and memory counters, per GPU utilisation, memory, power, temperature
  and energy, and the measured GPU energy of each running task (power integrated between
  two readings, or the difference of the GPU's own energy counter where the agent sends
  one) (what they are, and how energy is measured:
  :mod:`fusesched.controller.metric_readings`);
* ``fusesched_cycle_seconds``, a histogram of scheduling-cycle latency
  (:meth:`ControllerMetrics.cycle_timer` around ``Controller.run_cycle``'s body).

What is *measured* comes from the agents' sensors (NVML on real GPUs); what is *estimated*
comes from the per-core and per-GPU-model :class:`~fusesched.store.usage.PowerModel` the
accounting uses, and says so in its ``source`` label.
"""

from __future__ import annotations

import threading
import time
import weakref
from collections.abc import Iterable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from typing import TYPE_CHECKING

from prometheus_client import CONTENT_TYPE_LATEST, CollectorRegistry, Histogram, generate_latest
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, Metric
from prometheus_client.process_collector import ProcessCollector
from prometheus_client.registry import Collector

from fusesched.api.wire import Heartbeat, NodeInventory
from fusesched.controller.metric_families import Families, license_families
from fusesched.controller.metric_readings import (
    GpuReading,
    GpuState,
    NodeReadings,
    gpu_energy,
    gpu_reading,
    take_sample,
)
from fusesched.model.node import LABEL_GPU_MODEL, LABEL_POOL, LOCAL_POOL, NodeSpec, NodeState
from fusesched.model.resources import CPU, GPU, GPU_MILLI, MEMORY, Resources
from fusesched.store.records import JobState
from fusesched.store.usage import DEFAULT_POWER, UNKNOWN_MODEL, PowerModel

if TYPE_CHECKING:
    from fusesched.controller.records import LiveJob, LiveTask
    from fusesched.controller.service import Controller

__all__ = [
    "CONTENT_TYPE",
    "CYCLE_BUCKETS",
    "ControllerMetrics",
    "JobEnergy",
    "exposition",
    "metrics_for",
]

#: The exposition format's media type (text format 0.0.4).
CONTENT_TYPE = CONTENT_TYPE_LATEST
#: Buckets of ``fusesched_cycle_seconds`` (a cycle takes milliseconds; seconds is trouble).
CYCLE_BUCKETS = (0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0)
#: States a running task holds its resources in.
_HOLDING = ("launching", "delivered", "running")


@dataclass(frozen=True, slots=True)
class JobEnergy:
    """A job's energy so far, in joules: measured (GPU power) and estimated (the rest)."""

    measured_j: float
    estimated_j: float

    @property
    def total_j(self) -> float:
        return self.measured_j + self.estimated_j


def _pool(spec: NodeSpec) -> str:
    return spec.labels.get(LABEL_POOL, LOCAL_POOL)


def _amount(resource: str, value: int) -> float:
    """A core resource column in the metrics' unit: cores for ``cpu``, else as counted."""
    return value / 1000.0 if resource == CPU else float(value)


def _gpu_models(inventory: NodeInventory) -> dict[int, tuple[str, str]]:
    """Whole GPUs (MIG instances left out) by index: (uuid, model)."""
    label = inventory.labels.get(LABEL_GPU_MODEL, "")
    out: dict[int, tuple[str, str]] = {}
    for d in inventory.devices:
        if d.kind == GPU and d.mig_profile is None and d.index not in out:
            out[d.index] = (d.uuid, d.model or label or UNKNOWN_MODEL)
    return out


def group_of(task_id: str) -> str:
    """The task group of ``<job>.<group>.<index>`` (job ids hold no dot)."""
    parts = task_id.split(".", 1)
    return parts[1].rsplit(".", 1)[0] if len(parts) == 2 else ""


class ControllerMetrics:
    """The metrics of one controller: its registry, the sensors' latest readings, the cycle
    histogram. Every method that touches controller state runs with the controller's lock
    held (:meth:`observe` is called with it; :meth:`collect` takes it)."""

    def __init__(self, ctl: Controller, power: PowerModel = DEFAULT_POWER) -> None:
        self._ctl = weakref.ref(ctl)
        self.power = power
        self.registry = CollectorRegistry()
        self._nodes: dict[str, NodeReadings] = {}
        self._task_energy: dict[str, list[float]] = {}  # task -> [measured J, GPU-seconds]
        self.cycle_seconds = Histogram(
            "fusesched_cycle_seconds",
            "Wall time of one scheduling cycle (events, core cycle, applying decisions).",
            buckets=CYCLE_BUCKETS,
            registry=self.registry,
        )
        self.registry.register(_Collector(self))
        ProcessCollector(registry=self.registry)

    # ------------------------------------------------------------------ hooks

    def observe(self, beat: Heartbeat, now: float) -> None:
        """Take a full heartbeat's samples and GPU readings (controller lock held)."""
        ctl = self._ctl()
        if ctl is None:
            return
        node = self._nodes.setdefault(beat.node, NodeReadings())
        for sample in beat.samples:
            if ctl.on_node(sample.task_id, beat.node):
                take_sample(node, sample)
        for task_id in [t for t in node.tasks if t not in ctl.tasks]:
            del node.tasks[task_id]  # ended: its counters are no longer current
            self._task_energy.pop(task_id, None)
        if beat.health is None:
            return
        owners = {i: t for t, use in node.tasks.items() for i in use.gpus}
        for gpu in beat.health.gpus:
            reading = gpu_reading(gpu)
            if gpu.lost:
                reading = GpuReading()
            known = node.gpus.get(gpu.index)
            if known is None:
                node.gpus[gpu.index] = GpuState(reading, now)
                continue
            joules = gpu_energy(known, reading, now)
            known.reading, known.at = reading, now
            if joules is None:
                continue
            known.energy_j += joules[0]
            owner = owners.get(gpu.index)
            if owner is not None:
                spent = self._task_energy.setdefault(owner, [0.0, 0.0])
                spent[0] += joules[0]
                spent[1] += joules[1]

    def observe_cycle(self, seconds: float) -> None:
        self.cycle_seconds.observe(seconds)

    @contextmanager
    def cycle_timer(self) -> Iterator[None]:
        """Times its body into ``fusesched_cycle_seconds``."""
        started = time.perf_counter()
        try:
            yield
        finally:
            self.cycle_seconds.observe(time.perf_counter() - started)

    # ------------------------------------------------------------------ reading

    def exposition(self) -> bytes:
        """Every metric in Prometheus's text format (what ``GET /metrics`` answers)."""
        return generate_latest(self.registry)

    def job_energy(self, live: LiveJob, now: float) -> JobEnergy:
        """``live``'s energy so far (controller lock held): its GPUs' measured energy, and
        the power model's estimate for its cores and for GPU time not measured."""
        ctl = self._ctl()
        measured = estimated = 0.0
        if ctl is None:
            return JobEnergy(0.0, 0.0)
        groups = {g.name: g for g in live.spec.task_groups}
        cpu_w = self.power.cpu_core.at(self.power.load)
        for task_id, task in live.tasks.items():
            if task.remote or task.start_time is None:
                continue
            end = task.end_time if task.end_time is not None else now
            elapsed = max(0.0, end - task.start_time)
            if task.pool is not None:  # an external cluster runs the whole job as one task
                wanted = Resources()
                for g in live.spec.task_groups:
                    wanted = wanted + g.total
            else:
                group = groups.get(group_of(task_id))
                wanted = group.resources if group is not None else Resources()
            gpu_w = self._gpu_watts(ctl, task)
            gpus = float(len(task.grant.gpu_indices) or wanted.get(GPU, 0))
            gpus += wanted.get(GPU_MILLI, 0) / 1000.0
            spent = self._task_energy.get(task_id, [0.0, 0.0])
            measured += spent[0]
            gpu_seconds = max(0.0, gpus * elapsed - spent[1])
            estimated += wanted.get(CPU, 0) / 1000.0 * elapsed * cpu_w + gpu_seconds * gpu_w
        return JobEnergy(measured, estimated)

    def _gpu_watts(self, ctl: Controller, task: LiveTask) -> float:
        """Modelled watts of one of ``task``'s GPUs at the model's load."""
        node = ctl.nodes.get(task.node)
        model = UNKNOWN_MODEL
        if node is not None:
            models = _gpu_models(node.inventory)
            found = [models[i][1] for i in task.grant.gpu_indices if i in models]
            label = node.inventory.labels.get(LABEL_GPU_MODEL)
            if found:
                model = found[0]
            elif label:
                model = label
            elif models:
                model = next(iter(models.values()))[1]
        return self.power.gpu.get(model, self.power.other_gpu).at(self.power.load)

    def collect(self) -> list[Metric]:
        """Every series of the live state (the custom collector's body)."""
        ctl = self._ctl()
        if ctl is None:
            return []
        with ctl.lock:
            out = self._live(ctl)
        counts = ctl.persist.store.count_jobs_by_state()  # outside the lock: the store's
        jobs = GaugeMetricFamily(
            "fusesched_jobs",
            "Jobs in each state, as the store has them (finished ones included).",
            labels=["state"],
        )
        for state in JobState:
            jobs.add_metric([state.value], counts.get(state, 0))
        return [jobs, *out, *ctl.notices.families()]

    def _live(self, ctl: Controller) -> list[Metric]:
        now = ctl.clock()
        queue = GaugeMetricFamily(
            "fusesched_queue_jobs",
            "Live jobs per queue: Pending or Running.",
            labels=["queue", "state"],
        )
        per_queue: dict[str, list[int]] = {}
        for live in ctl.jobs.values():
            per_queue.setdefault(live.spec.queue, [0, 0])[1 if live.nodes else 0] += 1
        for name, (pending, running) in sorted(per_queue.items()):
            queue.add_metric([name, JobState.PENDING.value], pending)
            queue.add_metric([name, JobState.RUNNING.value], running)
        cycles = CounterMetricFamily(
            "fusesched_cycles", "Scheduling cycles run by this controller.", value=ctl.cycles
        )
        out = [queue, cycles, *self._nodes_metrics(ctl, now), self._jobs_energy(ctl, now)]
        pool = ctl.core.licenses
        if pool is not None:  # (cluster licenses: docs/LICENSES.md)
            rows = [(n, t, pool.used.get(n, 0)) for n, t in sorted(pool.total.items())]
            out.extend(license_families(rows))
        return out

    def _nodes_metrics(self, ctl: Controller, now: float) -> list[Metric]:
        f = Families()
        pools: dict[tuple[str, str], list[float]] = {}  # (pool, resource) -> cap, alloc, used
        held = self._held_gpus(ctl)
        specs: list[tuple[NodeSpec, NodeState, float]] = [
            (node.spec, node.state, node.last_seen) for node in ctl.nodes.values()
        ]
        specs += [(spec, ctl.remote_nodes[n][2], now) for n, spec in ctl.remote_specs.items()]
        for spec, state, seen in specs:
            name, pool = spec.name, _pool(spec)
            f.up.add_metric([name, pool, state.value], 1.0 if state is NodeState.UP else 0.0)
            f.age.add_metric([name, pool], max(0.0, now - seen))
            counted = state in (NodeState.UP, NodeState.DRAINING)
            cap_of, alloc_of = self._allocation(ctl, name)
            for resource, cap in cap_of.items():
                f.capacity.add_metric([name, pool, resource], cap)
                f.allocated.add_metric([name, pool, resource], alloc_of[resource])
                if counted:
                    entry = pools.setdefault((pool, resource), [0.0, 0.0, 0.0])
                    entry[0] += cap
                    entry[1] += alloc_of[resource]
            live_node = ctl.nodes.get(name)
            if live_node is None:
                continue  # an external cluster's node: no sensors, no power model
            f.add_load([name, pool], live_node.load)
            sensed = self._nodes.get(name)
            measured_w, modelled_w, busy_gpus = self._gpus(
                f, name, pool, live_node.inventory, sensed, held.get(name, set())
            )
            if sensed is not None:
                use_of = {
                    CPU: sum(u.rate or 0.0 for u in sensed.tasks.values()),
                    MEMORY: float(sum(u.rss_bytes for u in sensed.tasks.values())),
                }
                if busy_gpus is not None:
                    use_of[GPU] = busy_gpus
                for resource, value in use_of.items():
                    f.used.add_metric([name, pool, resource], value)
                    if counted:
                        pools.setdefault((pool, resource), [0.0, 0.0, 0.0])[2] += value
            cores = cap_of.get(CPU, 0.0)
            busy_cores = min(cores, alloc_of.get(CPU, 0.0))
            cpu_w = busy_cores * self.power.cpu_core.at(self.power.load)
            cpu_w += (cores - busy_cores) * self.power.cpu_core.idle
            if measured_w is not None:
                f.power.add_metric([name, pool, "measured"], measured_w)
            f.power.add_metric([name, pool, "estimated"], cpu_w + modelled_w)
        for (pool, resource), (cap, alloc, use) in sorted(pools.items()):
            f.pool_capacity.add_metric([pool, resource], cap)
            f.pool_allocated.add_metric([pool, resource], alloc)
            f.pool_used.add_metric([pool, resource], use)
        return f.all()

    @staticmethod
    def _allocation(ctl: Controller, name: str) -> tuple[dict[str, float], dict[str, float]]:
        """The node's capacity and allocation per resource it has (the core's arrays)."""
        cluster = ctl.core.cluster
        row = cluster.index.get(name)
        cap_of: dict[str, float] = {}
        alloc_of: dict[str, float] = {}
        if row is None:
            return cap_of, alloc_of
        for resource, col in cluster.columns.items():
            cap = int(cluster.capacity[row, col])
            if cap > 0:
                cap_of[resource] = _amount(resource, cap)
                alloc_of[resource] = _amount(resource, cap - int(cluster.free[row, col]))
        return cap_of, alloc_of

    def _gpus(
        self,
        f: Families,
        name: str,
        pool: str,
        inventory: NodeInventory,
        sensed: NodeReadings | None,
        held: set[int],
    ) -> tuple[float | None, float, float | None]:
        """Add the node's GPU series; returns (measured watts or None when no GPU reports
        power, modelled watts of the GPUs without a power reading, busy GPUs or None when
        no GPU reports utilisation)."""
        models = _gpu_models(inventory)
        readings = sensed.gpus if sensed is not None else {}
        from_tasks: dict[int, tuple[float | None, float | None]] = {}
        for use in sensed.tasks.values() if sensed is not None else ():
            for i in use.gpus:
                total = use.gpu_memory_bytes
                share = None if total is None else total / len(use.gpus)
                from_tasks[i] = (use.gpu_util_pct, share)
        measured: float | None = None
        modelled = 0.0
        busy: float | None = None
        for index in sorted(set(models) | set(readings)):
            uuid, model = models.get(index, ("", UNKNOWN_MODEL))
            labels = [name, pool, str(index), uuid, model]
            gpu = readings.get(index)
            reading = gpu.reading if gpu is not None else GpuReading()
            task_util, task_memory = from_tasks.get(index, (None, None))
            util = reading.utilization_pct if reading.utilization_pct is not None else task_util
            memory = (
                reading.memory_used_bytes if reading.memory_used_bytes is not None else task_memory
            )
            if util is not None:
                f.gpu_util.add_metric(labels, util / 100.0)
                busy = (busy or 0.0) + util / 100.0
            if memory is not None:
                f.gpu_memory.add_metric(labels, memory)
            if reading.temperature_c is not None:
                f.gpu_temperature.add_metric(labels, reading.temperature_c)
            if reading.power_w is not None:
                f.gpu_power.add_metric(labels, reading.power_w)
                measured = (measured or 0.0) + reading.power_w
            else:
                watts = self.power.gpu.get(model, self.power.other_gpu)
                modelled += watts.at(self.power.load) if index in held else watts.idle
            if gpu is not None and (reading.power_w is not None or gpu.energy_j > 0):
                f.gpu_energy.add_metric(labels, gpu.energy_j)
        return measured, modelled, busy

    @staticmethod
    def _held_gpus(ctl: Controller) -> dict[str, set[int]]:
        """The GPU indices running tasks hold, per node."""
        held: dict[str, set[int]] = {}
        for _, task in ctl.tasks.values():
            if task.grant.gpu_indices and task.state in _HOLDING and task.pool is None:
                held.setdefault(task.node, set()).update(task.grant.gpu_indices)
        return held

    def _jobs_energy(self, ctl: Controller, now: float) -> Metric:
        energy = GaugeMetricFamily(
            "fusesched_job_energy_joules",
            "Energy of each running job so far: measured (GPU power) and estimated (power "
            "model for its cores and unmeasured GPU time); sum both for the job's total.",
            labels=["job_id", "queue", "source"],
        )
        for live in ctl.jobs.values():
            if not live.tasks or live.exit_sent:
                continue
            spent = self.job_energy(live, now)
            if spent.measured_j > 0:
                energy.add_metric([live.id, live.spec.queue, "measured"], spent.measured_j)
            energy.add_metric([live.id, live.spec.queue, "estimated"], spent.estimated_j)
        return energy


class _Collector(Collector):
    def __init__(self, metrics: ControllerMetrics) -> None:
        self._metrics = metrics

    def collect(self) -> Iterable[Metric]:
        return self._metrics.collect()


_BY_CONTROLLER: weakref.WeakKeyDictionary[Controller, ControllerMetrics] = (
    weakref.WeakKeyDictionary()
)
_MAKING = threading.Lock()


def metrics_for(ctl: Controller) -> ControllerMetrics:
    """The metrics of ``ctl`` (made on first use; one per controller)."""
    with _MAKING:
        found = _BY_CONTROLLER.get(ctl)
        if found is None:
            found = _BY_CONTROLLER[ctl] = ControllerMetrics(ctl)
        return found


def exposition(ctl: Controller) -> bytes:
    """``ctl``'s metrics in the text exposition format."""
    return metrics_for(ctl).exposition()
