"""Node-local pools of CPU ids and accelerator devices, handed to tasks at launch.

The core decides *how much* each task gets on each node; the pool picks *which* logical CPUs
(for affinity) and *which* devices (for ``CUDA_VISIBLE_DEVICES`` or MIG UUIDs), as a kubelet's
CPU and device managers do. A task whose request cannot be pinned exactly (the node advertises
more CPUs than it listed ids, say) runs unpinned rather than not at all.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from fusesched.api.wire import DeviceInfo, NodeInventory
from fusesched.model.resources import CPU, Resources


@dataclass(frozen=True, slots=True)
class Grant:
    """What one task was given on its node."""

    cpu_ids: tuple[int, ...] = ()
    gpu_indices: tuple[int, ...] = ()
    gpu_uuids: tuple[str, ...] = ()


@dataclass(slots=True)
class NodePool:
    """Free CPU ids and devices of one node (devices grouped by resource name)."""

    cpu_free: list[int] = field(default_factory=list)
    devices_free: dict[str, list[DeviceInfo]] = field(default_factory=dict)

    @classmethod
    def of(cls, inventory: NodeInventory) -> NodePool:
        devices: dict[str, list[DeviceInfo]] = {}
        for device in inventory.devices:
            devices.setdefault(device.kind, []).append(device)
        return cls(sorted(inventory.cpu_ids), devices)

    def take(self, request: Resources) -> Grant:
        cpus = -(-request.get(CPU) // 1000)  # whole CPUs, rounded up
        cpu_ids: tuple[int, ...] = ()
        if 0 < cpus <= len(self.cpu_free):
            cpu_ids = tuple(self.cpu_free[:cpus])
            del self.cpu_free[:cpus]
        indices: list[int] = []
        uuids: list[str] = []
        for kind, free in self.devices_free.items():
            want = request.get(kind)
            if want <= 0 or want > len(free):
                continue
            taken, self.devices_free[kind] = free[:want], free[want:]
            if kind.startswith("nvidia.com/mig-"):
                uuids.extend(d.uuid for d in taken)
            else:
                indices.extend(d.index for d in taken)
        return Grant(cpu_ids, tuple(sorted(indices)), tuple(uuids))

    def claim(self, grant: Grant) -> None:
        """Mark what ``grant`` names as taken (a task found running after a restart)."""
        taken = set(grant.cpu_ids)
        self.cpu_free = [c for c in self.cpu_free if c not in taken]
        for kind, free in self.devices_free.items():
            self.devices_free[kind] = [
                d
                for d in free
                if not (
                    d.uuid in grant.gpu_uuids
                    if kind.startswith("nvidia.com/mig-")
                    else d.index in grant.gpu_indices
                )
            ]

    def give(self, grant: Grant, inventory: NodeInventory) -> None:
        self.cpu_free = sorted(set(self.cpu_free) | set(grant.cpu_ids))
        for device in inventory.devices:
            returned = (
                device.uuid in grant.gpu_uuids
                if device.kind.startswith("nvidia.com/mig-")
                else device.index in grant.gpu_indices
            )
            if returned and device not in self.devices_free.setdefault(device.kind, []):
                self.devices_free[device.kind].append(device)
                self.devices_free[device.kind].sort(key=lambda d: (d.index, d.uuid))
