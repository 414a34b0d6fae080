"""What this node offers: CPUs, memory, architecture, GPUs, plus what the config file adds."""

from __future__ import annotations

import os
import platform
import socket
from collections import Counter
from typing import Any

import psutil

from fusesched.agent.cgroups import own_memory_limit
from fusesched.agent.config import AgentConfig
from fusesched.agent.gpus import discover_gpus, load_nvml
from fusesched.api.wire import NodeInventory
from fusesched.model.node import LABEL_ARCH, LABEL_GPU_MODEL, LABEL_HOSTNAME
from fusesched.model.resources import canonical_name, format_quantity, parse_quantity

LABEL_OS = "kubernetes.io/os"

#: ``platform.machine()`` → Kubernetes' (Go's GOARCH) architecture names.
_ARCH = {
    "x86_64": "amd64",
    "amd64": "amd64",
    "aarch64": "arm64",
    "arm64": "arm64",
    "armv7l": "arm",
    "armv6l": "arm",
    "i386": "386",
    "i686": "386",
    "ppc64le": "ppc64le",
    "s390x": "s390x",
    "riscv64": "riscv64",
}


def kubernetes_arch(machine: str) -> str:
    """``"x86_64"`` → ``"amd64"``, ``"aarch64"`` → ``"arm64"`` (unknown names pass through)."""
    return _ARCH.get(machine.lower(), machine.lower())


def default_address() -> str:
    """The address of the interface holding the default route (no packet is sent)."""
    try:
        with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as probe:
            probe.connect(("192.0.2.1", 9))  # TEST-NET-1: only selects a route
            address = str(probe.getsockname()[0])
            if address and not address.startswith("0."):
                return address
    except OSError:
        pass
    try:
        return socket.gethostbyname(socket.gethostname())
    except OSError:
        return "127.0.0.1"


def _allowed_cpus() -> list[int]:
    try:
        return sorted(psutil.Process().cpu_affinity() or [])
    except (AttributeError, psutil.Error):  # pragma: no cover - platforms without affinity
        return list(range(psutil.cpu_count(logical=True) or 1))


def _memory_bytes() -> int:
    total = int(psutil.virtual_memory().total)
    limit = own_memory_limit()
    return min(total, limit) if limit else total


def discover(config: AgentConfig, *, nvml: Any | None = None) -> NodeInventory:
    """Describe this node for registration.

    * ``cpu``: the logical CPUs this agent may run on (its affinity mask, which is every logical
      CPU on an unrestricted host), or ``config.cpu``; ``cpu_ids`` lists them. A ``cpu``
      override larger than the machine advertises no ``cpu_ids`` (tasks are then not pinned).
    * ``memory``: physical memory (or the agent's own cgroup limit if lower), or
      ``config.memory``.
    * GPUs through NVML (``nvml``: a ``pynvml``-like module; ``None`` imports the real one
      unless ``config.nvml`` is false), then ``config.fake_devices``; each device kind
      (``nvidia.com/gpu``, ``nvidia.com/mig-1g.18gb``, …) becomes a resource count.
    * labels: ``kubernetes.io/arch`` (amd64/arm64/… as Kubernetes names them),
      ``kubernetes.io/os``, ``kubernetes.io/hostname``, ``fusesched.io/gpu-model`` (model of
      the first device), then ``config.labels`` on top.
    """
    name = config.name or socket.gethostname()
    allowed = _allowed_cpus()
    if config.cpu_ids is not None:
        cpu_ids = sorted(config.cpu_ids)
        cpu_count = config.cpu if config.cpu is not None else len(cpu_ids)
    elif config.cpu is not None:
        cpu_count = config.cpu
        cpu_ids = allowed[:cpu_count] if cpu_count <= len(allowed) else []
    else:
        cpu_ids = allowed
        cpu_count = len(allowed)
    memory = config.memory_bytes()
    if memory is None:
        memory = _memory_bytes()

    module = nvml if nvml is not None else (load_nvml() if config.nvml else None)
    devices = discover_gpus(module) + list(config.fake_devices)

    resources: dict[str, str] = {
        "cpu": str(cpu_count),
        "memory": format_quantity("memory", memory),
    }
    for kind, count in sorted(Counter(device.kind for device in devices).items()):
        resources[kind] = str(count)
    for key, amount in config.resources.items():
        canon = canonical_name(key)
        resources[canon] = format_quantity(canon, parse_quantity(canon, amount))

    labels = {
        LABEL_HOSTNAME: name,
        LABEL_ARCH: kubernetes_arch(platform.machine()),
        LABEL_OS: "linux" if os.name == "posix" else os.name,
    }
    models = [device.model for device in devices if device.model]
    if models:
        labels[LABEL_GPU_MODEL] = models[0]
    labels.update(config.labels)

    return NodeInventory(
        name=name,
        address=config.address or default_address(),
        resources=resources,
        labels=labels,
        devices=devices,
        cpu_ids=cpu_ids,
    )


def describe(inventory: NodeInventory) -> str:
    """A few human-readable lines (for ``fusesched agent --show`` and bench/device_check.py)."""
    lines = [f"node {inventory.name} at {inventory.address}"]
    lines += [f"  {key}: {value}" for key, value in inventory.resources.items()]
    lines += [f"  label {key}={value}" for key, value in inventory.labels.items()]
    for device in inventory.devices:
        extra = f" {device.mig_profile}" if device.mig_profile else ""
        lines.append(
            f"  device {device.kind} index={device.index} uuid={device.uuid or '-'} "
            f"model={device.model or '-'}{extra} memory={device.memory_bytes}"
        )
    cpus = ",".join(map(str, inventory.cpu_ids)) or "(no pinning)"
    lines.append(f"  cpu_ids: {cpus}")
    return "\n".join(lines)


__all__ = ["LABEL_OS", "default_address", "describe", "discover", "kubernetes_arch"]
