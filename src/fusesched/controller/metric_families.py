"""The per-node, per-pool and per-GPU metric families one scrape of a controller fills
(see :mod:`fusesched.controller.metrics` and docs/METRICS.md for what each one means)."""

from __future__ import annotations

from dataclasses import dataclass, field

from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, Metric

from fusesched.api.wire import NodeLoadWire

NODE_LABELS = ["node", "pool"]
GPU_LABELS = ["node", "pool", "gpu", "uuid", "model"]


@dataclass(slots=True)
class Families:
    """The node, pool and GPU metric families of one scrape."""

    up: GaugeMetricFamily = field(
        default_factory=lambda: GaugeMetricFamily(
            "fusesched_node_up",
            "1 when the node takes work (state up), else 0; its state is a label.",
            labels=["node", "pool", "state"],
        )
    )
    age: GaugeMetricFamily = field(
        default_factory=lambda: GaugeMetricFamily(
            "fusesched_node_heartbeat_age_seconds",
            "Seconds since the node's agent last heartbeated.",
            labels=NODE_LABELS,
        )
    )
    capacity: GaugeMetricFamily = field(
        default_factory=lambda: GaugeMetricFamily(
            "fusesched_node_capacity",
            "Schedulable capacity (cpu in cores, memory in bytes, devices counted).",
            labels=[*NODE_LABELS, "resource"],
        )
    )
    allocated: GaugeMetricFamily = field(
        default_factory=lambda: GaugeMetricFamily(
            "fusesched_node_allocated",
            "Capacity allocated to running tasks (units as fusesched_node_capacity).",
            labels=[*NODE_LABELS, "resource"],
        )
    )
    used: GaugeMetricFamily = field(
        default_factory=lambda: GaugeMetricFamily(
            "fusesched_node_used",
            "Measured use by the node's tasks: cpu busy cores, memory resident bytes, "
            "nvidia.com/gpu busy GPUs (sum of utilisation ratios).",
            labels=[*NODE_LABELS, "resource"],
        )
    )
    power: GaugeMetricFamily = field(
        default_factory=lambda: GaugeMetricFamily(
            "fusesched_node_power_watts",
            "Node power: measured (GPU power readings) and estimated (power model for the "
            "CPU cores and the GPUs without a reading); sum both for the node's total.",
            labels=[*NODE_LABELS, "source"],
        )
    )
    free_memory: GaugeMetricFamily = field(
        default_factory=lambda: GaugeMetricFamily(
            "fusesched_node_free_memory_bytes",
            "The node's free memory (the kernel's MemFree) as its agent last reported it.",
            labels=NODE_LABELS,
        )
    )
    load1: GaugeMetricFamily = field(
        default_factory=lambda: GaugeMetricFamily(
            "fusesched_node_load1",
            "The node's 1-minute load average as its agent last reported it.",
            labels=NODE_LABELS,
        )
    )
    load5: GaugeMetricFamily = field(
        default_factory=lambda: GaugeMetricFamily(
            "fusesched_node_load5",
            "The node's 5-minute load average as its agent last reported it.",
            labels=NODE_LABELS,
        )
    )
    pool_capacity: GaugeMetricFamily = field(
        default_factory=lambda: GaugeMetricFamily(
            "fusesched_pool_capacity",
            "Schedulable capacity of the pool's nodes that are up or draining.",
            labels=["pool", "resource"],
        )
    )
    pool_allocated: GaugeMetricFamily = field(
        default_factory=lambda: GaugeMetricFamily(
            "fusesched_pool_allocated",
            "Capacity allocated to running tasks on the pool's nodes that are up or draining.",
            labels=["pool", "resource"],
        )
    )
    pool_used: GaugeMetricFamily = field(
        default_factory=lambda: GaugeMetricFamily(
            "fusesched_pool_used",
            "Measured use in the pool (fusesched_node_used summed over its nodes).",
            labels=["pool", "resource"],
        )
    )
    gpu_util: GaugeMetricFamily = field(
        default_factory=lambda: GaugeMetricFamily(
            "fusesched_gpu_utilization_ratio",
            "GPU utilisation, 0-1 (the GPU's reading, else the mean its task reports).",
            labels=GPU_LABELS,
        )
    )
    gpu_memory: GaugeMetricFamily = field(
        default_factory=lambda: GaugeMetricFamily(
            "fusesched_gpu_memory_used_bytes", "GPU memory in use (measured).", labels=GPU_LABELS
        )
    )
    gpu_power: GaugeMetricFamily = field(
        default_factory=lambda: GaugeMetricFamily(
            "fusesched_gpu_power_watts", "GPU power draw (measured).", labels=GPU_LABELS
        )
    )
    gpu_temperature: GaugeMetricFamily = field(
        default_factory=lambda: GaugeMetricFamily(
            "fusesched_gpu_temperature_celsius", "GPU temperature (measured).", labels=GPU_LABELS
        )
    )
    gpu_energy: CounterMetricFamily = field(
        default_factory=lambda: CounterMetricFamily(
            "fusesched_gpu_energy_joules",
            "GPU energy measured since this controller first heard of the GPU.",
            labels=GPU_LABELS,
        )
    )

    def add_load(self, labels: list[str], load: NodeLoadWire | None) -> None:
        """A node's free memory and load averages, those its agent reported (none: none)."""
        if load is None:
            return
        for family, value in (
            (self.free_memory, load.free_memory_bytes),
            (self.load1, load.load1),
            (self.load5, load.load5),
        ):
            if value is not None:
                family.add_metric(labels, float(value))

    def all(self) -> list[Metric]:
        return [
            self.up,
            self.age,
            self.capacity,
            self.allocated,
            self.used,
            self.power,
            self.free_memory,
            self.load1,
            self.load5,
            self.pool_capacity,
            self.pool_allocated,
            self.pool_used,
            self.gpu_util,
            self.gpu_memory,
            self.gpu_power,
            self.gpu_temperature,
            self.gpu_energy,
        ]


def license_families(rows: list[tuple[str, int, int]]) -> list[Metric]:
    """The cluster licenses' gauges: ``fusesched_license_total`` and
    ``fusesched_license_in_use`` per license, from (name, total, in use) rows."""
    total = GaugeMetricFamily(
        "fusesched_license_total",
        "Cluster licenses configured (controller --licenses), per license.",
        labels=["license"],
    )
    in_use = GaugeMetricFamily(
        "fusesched_license_in_use",
        "Cluster licenses held by running jobs, per license.",
        labels=["license"],
    )
    for name, count, used in rows:
        total.add_metric([name], count)
        in_use.add_metric([name], used)
    return [total, in_use]
