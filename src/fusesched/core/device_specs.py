"""What devices a node offers and what a task asks of them, in typed, frozen form.

A :class:`Device` is one accelerator of a node (a whole GPU, a MIG instance, another vendor's
accelerator) as its agent reports it; a :class:`DeviceDemand` is what one task needs from the
devices of its node (:func:`device_demand` derives it from the task's resources). The
:class:`~fusesched.core.devices.DeviceLedger` does the accounting; this module also links the
devices to the aggregate columns of :class:`~fusesched.core.cluster.ClusterArrays`
(:func:`aggregate_capacity`, :meth:`DeviceDemand.aggregate`).
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, replace
from typing import Final

from fusesched.model.job import LabelOp, Placement
from fusesched.model.node import LABEL_GPU_MODEL
from fusesched.model.resources import GPU, GPU_MILLI, Resources, canonical_name

#: Capacity of one device in milli (a whole GPU, a whole MIG instance, a whole accelerator).
WHOLE: Final = 1000
MIG_PREFIX: Final = "nvidia.com/mig-"
#: Device kinds whose devices may be shared in milli, and the resource their shares count as.
SHARE_RESOURCES: Final[Mapping[str, str]] = {GPU: GPU_MILLI}
# last path segment of a vendor resource name that denotes an accelerator device
_ACCELERATOR_NAMES: Final = frozenset(
    {"gpu", "tpu", "gaudi", "neuron", "neuroncore", "npu", "xpu", "i915"}
)
_PROFILE_RE: Final = re.compile(r"^([0-9]+c\.)?[0-9]+g\.[0-9]+gb(\.[a-z0-9]+)*$")  # 1c.3g.20gb


class DeviceError(ValueError):
    """A device description or a device request that cannot be understood."""


def mig_resource(profile: str) -> str:
    """The resource name of a MIG profile: ``"1g.10gb"`` → ``"nvidia.com/mig-1g.10gb"``."""
    return MIG_PREFIX + profile


def is_device_kind(name: str) -> bool:
    """Whether a resource name counts devices the ledger tracks one by one.

    ``nvidia.com/gpu``, MIG profiles and vendor accelerators (``amd.com/gpu``,
    ``gpu.intel.com/i915``, ``google.com/tpu``, ``habana.ai/gaudi``, ``aws.amazon.com/neuron``…);
    not shares (``fusesched.io/gpu-milli``) nor plain counts such as ``fpga`` or ``rdma``.
    """
    if name == GPU or name.startswith(MIG_PREFIX):
        return True
    domain, _, last = name.rpartition("/")
    return bool(domain) and last in _ACCELERATOR_NAMES


# ============================================================================ descriptions


@dataclass(frozen=True, slots=True)
class Device:
    """One device of a node, as its agent reports it (cf. ``api.wire.DeviceInfo``).

    ``index`` is the parent GPU's index, the one ``CUDA_VISIBLE_DEVICES`` (or the vendor's
    equivalent) uses; MIG instances share their parent's index and are told apart by ``uuid``
    (``-1``: parent unknown, allowed only for MIG instances made up by a simulator).
    ``link`` names the NVLink island of the device inside its node ("" when unknown).
    """

    kind: str
    index: int
    model: str = ""
    uuid: str = ""
    mig_profile: str = ""
    link: str = ""

    def __post_init__(self) -> None:
        try:
            kind = canonical_name(self.kind)
        except ValueError as exc:
            raise DeviceError(str(exc)) from exc
        if not is_device_kind(kind):
            raise DeviceError(f"{kind!r} is not a device resource")
        object.__setattr__(self, "kind", kind)
        if kind.startswith(MIG_PREFIX):
            profile = kind.removeprefix(MIG_PREFIX)
            if self.mig_profile and self.mig_profile != profile:
                raise DeviceError(f"MIG profile {self.mig_profile!r} does not match kind {kind!r}")
            object.__setattr__(self, "mig_profile", profile)
        elif self.mig_profile:
            raise DeviceError(f"a MIG instance counts towards {mig_resource(self.mig_profile)!r}")
        if self.index < (-1 if self.mig_profile else 0):
            raise DeviceError(f"{kind} device index must not be negative ({self.index})")

    @classmethod
    def mig(cls, index: int, profile: str, uuid: str = "", model: str = "") -> Device:
        """A MIG instance of ``profile`` on parent GPU ``index``."""
        if not _PROFILE_RE.fullmatch(profile):
            raise DeviceError(f"invalid MIG profile {profile!r} (example: 1g.10gb)")
        return cls(mig_resource(profile), index, model, uuid, profile)

    @property
    def shareable(self) -> bool:
        """Whether fractional (milli) requests may share this device."""
        return self.kind in SHARE_RESOURCES

    @property
    def visible_id(self) -> str:
        """How ``CUDA_VISIBLE_DEVICES`` names it: the UUID of a MIG instance, else the index."""
        return self.uuid if self.mig_profile and self.uuid else str(self.index)


@dataclass(frozen=True, slots=True)
class DeviceRequest:
    """Per task: ``count`` devices of ``kind``, or (``milli`` < 1000) a share of one device.

    ``models`` lists the acceptable device models; empty accepts any.
    """

    kind: str = GPU
    count: int = 1
    milli: int = WHOLE
    models: tuple[str, ...] = ()

    def __post_init__(self) -> None:
        if self.count < 1:
            raise DeviceError(f"{self.kind}: a device request needs at least one device")
        if not 1 <= self.milli <= WHOLE:
            raise DeviceError(f"{self.kind}: a share is 1-{WHOLE} milli of one device")
        if self.milli < WHOLE:
            if self.count != 1:
                raise DeviceError(f"{self.kind}: a fractional request takes exactly one device")
            if self.kind not in SHARE_RESOURCES:
                raise DeviceError(f"{self.kind} devices cannot be shared")

    @property
    def whole(self) -> bool:
        return self.milli == WHOLE


@dataclass(frozen=True, slots=True)
class DeviceDemand:
    """Everything one task needs from the ledger: one request per device kind."""

    requests: tuple[DeviceRequest, ...]

    def __post_init__(self) -> None:
        kinds = [r.kind for r in self.requests]
        if not kinds:
            raise DeviceError("a device demand needs at least one request")
        if len(set(kinds)) != len(kinds):
            raise DeviceError(f"a task asks for {kinds} (one request per device kind)")

    @property
    def counted(self) -> bool:
        """Whether the aggregate columns alone decide it while no device is shared: one
        request of whole devices of any model (then the free whole devices of a node are
        exactly its aggregate count)."""
        return len(self.requests) == 1 and self.requests[0].whole and not self.requests[0].models

    def aggregate(self) -> Resources:
        """The task's amounts in the aggregate columns (see :func:`aggregate_capacity`)."""
        out: dict[str, int] = {}
        for req in self.requests:
            if req.whole:
                out[req.kind] = req.count
            share = SHARE_RESOURCES.get(req.kind)
            if share is not None:
                out[share] = out.get(share, 0) + req.milli * req.count
        return Resources(out)


def device_demand(resources: Mapping[str, int], models: Sequence[str] = ()) -> DeviceDemand | None:
    """The device part of a task's resources, or None if it asks for no device.

    ``nvidia.com/gpu: k`` → k whole GPUs; ``fusesched.io/gpu-milli: m`` → a share of one GPU
    (m = 1000: one whole GPU); MIG profiles and vendor accelerators → whole devices of that kind.
    ``models`` (from :func:`models_from_placement`) constrain every request.
    """
    allowed = tuple(dict.fromkeys(models))
    requests: list[DeviceRequest] = []
    share = resources.get(GPU_MILLI, 0)
    if share:
        if resources.get(GPU, 0):
            raise DeviceError(f"a task asks for both {GPU} and {GPU_MILLI}; use one of them")
        if share > WHOLE:
            raise DeviceError(
                f"{GPU_MILLI} is a share of one GPU (at most {WHOLE}); ask for whole {GPU}"
            )
        requests.append(DeviceRequest(GPU, 1, share, allowed))
    for name, amount in resources.items():
        if amount and is_device_kind(name):
            requests.append(DeviceRequest(name, amount, WHOLE, allowed))
    return DeviceDemand(tuple(requests)) if requests else None


def models_from_placement(placement: Placement) -> tuple[str, ...]:
    """GPU models a job accepts, from its node selector or required ``In`` terms on
    ``fusesched.io/gpu-model`` (their intersection); empty when it names none."""
    allowed: set[str] | None = None
    chosen = placement.node_selector.get(LABEL_GPU_MODEL)
    if chosen is not None:
        allowed = {chosen}
    for req in placement.required:
        if req.key == LABEL_GPU_MODEL and req.op is LabelOp.IN:
            allowed = set(req.values) if allowed is None else allowed & set(req.values)
    # an empty intersection leaves () too: the label filter then already excludes every node
    return tuple(sorted(allowed)) if allowed else ()


def aggregate_capacity(devices: Iterable[Device]) -> Resources:
    """A node's capacity in the aggregate columns, derived from its devices.

    One unit per device of each kind, plus :data:`WHOLE` milli per shareable device in the
    share column (``fusesched.io/gpu-milli``). The aggregate is a linear relaxation of the
    ledger: a whole-device task takes ``k`` devices and ``1000·k`` milli, a share takes its
    milli only, so the aggregate free never goes below what the ledger holds and it decides
    nothing the ledger has to undo.
    """
    out: dict[str, int] = {}
    for device in devices:
        out[device.kind] = out.get(device.kind, 0) + 1
        share = SHARE_RESOURCES.get(device.kind)
        if share is not None:
            out[share] = out.get(share, 0) + WHOLE
    return Resources(out)


def with_device_capacity(capacity: Resources, devices: Sequence[Device]) -> Resources:
    """``capacity`` with its device and share columns replaced by the devices' aggregate.

    Raises :class:`DeviceError` when ``capacity`` declares a different count of a device kind.
    """
    derived = aggregate_capacity(devices)
    for name, amount in capacity.items():
        counted = is_device_kind(name) or name in SHARE_RESOURCES.values()
        if counted and amount != derived.get(name, 0):
            raise DeviceError(
                f"capacity says {name}={amount} but the devices give {derived.get(name, 0)}"
            )
    kept = {k: v for k, v in capacity.items() if k not in derived}
    return Resources(kept) + derived


def devices_from_capacity(capacity: Mapping[str, int], labels: Mapping[str, str]) -> list[Device]:
    """Devices for a node that declares only counts (traces, tests): indices 0, 1, … per kind,
    the model from the ``fusesched.io/gpu-model`` label; MIG instances with parent unknown."""
    model = labels.get(LABEL_GPU_MODEL, "")
    out: list[Device] = []
    for name in sorted(capacity):
        if not is_device_kind(name):
            continue
        mig = name.startswith(MIG_PREFIX)
        out.extend(Device(name, -1 if mig else i, model) for i in range(capacity[name]))
    return out


def fill_models(devices: Sequence[Device], labels: Mapping[str, str]) -> list[Device]:
    """The devices with an unknown model given the node's ``fusesched.io/gpu-model`` label,
    so a job that selects the node by that label also accepts its devices."""
    model = labels.get(LABEL_GPU_MODEL, "")
    return [replace(d, model=model) if model and not d.model else d for d in devices]


def check_node_devices(devices: Sequence[Device]) -> None:
    """One node's devices must be distinguishable: one whole device per (kind, index), unique
    UUIDs, and no GPU offered whole while partitioned into MIG instances."""
    whole: set[tuple[str, int]] = set()
    uuids: set[str] = set()
    parents: set[int] = set()
    for device in devices:
        if device.mig_profile:
            parents.add(device.index)
        elif (device.kind, device.index) in whole:
            raise DeviceError(f"two {device.kind} devices with index {device.index}")
        else:
            whole.add((device.kind, device.index))
        if device.uuid:
            if device.uuid in uuids:
                raise DeviceError(f"two devices with UUID {device.uuid!r}")
            uuids.add(device.uuid)
    clash = sorted(i for kind, i in whole if kind == GPU and i in parents)
    if clash:
        raise DeviceError(f"GPU {clash[0]} is offered whole and as MIG instances")
