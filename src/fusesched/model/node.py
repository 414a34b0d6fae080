"""Nodes: capacity, labels and schedulable state."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from enum import StrEnum
from types import MappingProxyType
from typing import TYPE_CHECKING, Final

from fusesched.model.resources import Resources

if TYPE_CHECKING:
    from fusesched.core.device_specs import Device

# Well-known label keys. Selectors and affinity may use any label; these are the ones the
# platform itself sets or reads.
LABEL_HOSTNAME: Final = "kubernetes.io/hostname"
LABEL_ARCH: Final = "kubernetes.io/arch"
LABEL_GPU_MODEL: Final = "fusesched.io/gpu-model"
LABEL_POOL: Final = "fusesched.io/pool"
LOCAL_POOL: Final = "local"  # the pool of local agents' nodes without a pool label
LABEL_NVLINK: Final = "topology.fusesched.io/nvlink-domain"
LABEL_SWITCH: Final = "topology.fusesched.io/switch"
LABEL_RACK: Final = "topology.fusesched.io/rack"


class NodeState(StrEnum):
    """Observed node state. Only ``UP`` nodes take new work."""

    UP = "up"
    DRAINING = "draining"  # running work continues, nothing new is placed
    DRAINED = "drained"
    DOWN = "down"
    SUSPENDED = "suspended"  # powered down by power saving; can be resumed


def _frozen_labels(labels: Mapping[str, str]) -> Mapping[str, str]:
    return MappingProxyType(dict(labels))


@dataclass(frozen=True, slots=True)
class NodeSpec:
    """Desired description of a node: what it offers and how it is labelled.

    ``devices`` lists its accelerators one by one when known (a live agent reports them);
    otherwise the core makes them up from the device counts in ``capacity``.
    """

    name: str
    capacity: Resources
    labels: Mapping[str, str] = field(default_factory=dict)
    devices: tuple[Device, ...] = ()

    def __post_init__(self) -> None:
        if not self.name:
            raise ValueError("a node needs a name")
        labels = dict(self.labels)
        labels.setdefault(LABEL_HOSTNAME, self.name)
        object.__setattr__(self, "labels", _frozen_labels(labels))

    def __hash__(self) -> int:
        return hash(self.name)
