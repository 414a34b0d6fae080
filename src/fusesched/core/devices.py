"""Per-device accelerator accounting: which GPU (or MIG instance, or other accelerator) of which
node every task holds.

:class:`ClusterArrays` keeps one aggregate number per node and resource; that cannot tell two
half-used GPUs from one free GPU, nor a V100 from an A100 on a mixed node. The
:class:`DeviceLedger` keeps the devices themselves: node rows × device slots, each slot with
its kind (the resource it counts towards: ``nvidia.com/gpu``, ``nvidia.com/mig-1g.10gb``,
``amd.com/gpu``, …), model, parent GPU index, capacity (1000 milli) and free milli.

Rules (see ``docs/GPU_DEVICES.md``):

* a whole-device request takes only devices that are entirely free, and holds them
  exclusively; among them it prefers one NVLink island (MIG instances: one parent GPU), the
  tightest island that still fits, and otherwise spans as few islands as possible;
* a fractional request (``milli < 1000``, one device per task, shareable kinds only) takes the
  tightest device that fits (best fit), so shares pack and whole devices stay whole;
* the shares on one device never exceed its capacity, and a device held whole has no sharers.

Device descriptions and requests live in :mod:`fusesched.core.device_specs`. Feasibility
(:meth:`DeviceLedger.slots`) is vectorised over candidate node rows; the choice of
devices on one chosen node (:meth:`DeviceLedger.assign`) is a small loop over its slots.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, TypeVar, cast

import numpy as np
import numpy.typing as npt

from fusesched.core.device_specs import (
    MIG_PREFIX,
    SHARE_RESOURCES,
    WHOLE,
    Device,
    DeviceDemand,
    DeviceError,
    DeviceRequest,
    check_node_devices,
)
from fusesched.model.resources import GPU, Resources

IntArray = npt.NDArray[np.int64]
BoolArray = npt.NDArray[np.bool_]


class DevicesUnavailable(RuntimeError):
    """The node's free devices cannot hold the request now."""


class LedgerCorrupt(AssertionError):
    """An invariant of the ledger does not hold (a bug, never a scheduling outcome)."""


# ============================================================================ assignments


@dataclass(frozen=True, slots=True)
class TaskDevices:
    """The devices one task holds on node ``row`` (all tuples aligned, one entry a device)."""

    row: int
    kinds: tuple[str, ...]
    indices: tuple[int, ...]  # parent GPU index (what CUDA_VISIBLE_DEVICES uses)
    uuids: tuple[str, ...]
    milli: tuple[int, ...]  # held per device; WHOLE = exclusively
    slots: tuple[int, ...]  # ledger slots, for release
    generation: int  # the row's device generation when assigned

    @property
    def cuda_visible_devices(self) -> str:
        """The ``CUDA_VISIBLE_DEVICES`` value for the NVIDIA devices: indices, MIG UUIDs."""
        ids = [
            uuid if kind.startswith(MIG_PREFIX) and uuid else str(index)
            for kind, index, uuid in zip(self.kinds, self.indices, self.uuids, strict=True)
            if kind == GPU or kind.startswith(MIG_PREFIX)
        ]
        return ",".join(ids)


@dataclass(frozen=True, slots=True)
class DeviceAssignment:
    """The devices of some tasks, in task order (what a ``StartJob`` can carry per group)."""

    tasks: tuple[TaskDevices, ...] = ()

    def __add__(self, other: DeviceAssignment) -> DeviceAssignment:
        return DeviceAssignment(self.tasks + other.tasks)

    def __len__(self) -> int:
        return len(self.tasks)


# ============================================================================ the ledger


ArrayT = TypeVar("ArrayT", bound=npt.NDArray[Any])


def _grown(array: ArrayT, rows: int, cols: int, fill: object) -> ArrayT:
    """A copy of ``array`` enlarged to ``rows × cols``, new cells set to ``fill``."""
    out = np.full((rows, cols), fill, dtype=array.dtype)
    out[: array.shape[0], : array.shape[1]] = array
    return cast(ArrayT, out)


class DeviceLedger:
    """Devices of many nodes as ``rows × slots`` arrays (rows: the core's node rows).

    Empty slots have kind ``-1``. ``free`` is in milli; ``holders`` counts the tasks holding a
    device; ``exclusive`` marks a device held whole.
    """

    def __init__(self, width: int = 8) -> None:
        self._kind_codes: dict[str, int] = {}
        self._model_codes: dict[str, int] = {"": 0}
        self._link_codes: dict[str, int] = {}
        self._devices: list[tuple[Device, ...]] = []
        self._generation: list[int] = []
        self.kind: npt.NDArray[np.int32] = np.full((0, width), -1, np.int32)
        self.model: npt.NDArray[np.int32] = np.zeros((0, width), np.int32)
        self.index: IntArray = np.zeros((0, width), np.int64)
        self.affinity: IntArray = np.full((0, width), -1, np.int64)  # island / parent GPU
        self.capacity: IntArray = np.zeros((0, width), np.int64)
        self.free: IntArray = np.zeros((0, width), np.int64)
        self.holders: IntArray = np.zeros((0, width), np.int64)
        self.exclusive: BoolArray = np.zeros((0, width), np.bool_)
        self.shares = 0  # fractional holdings in use, over all devices

    # ------------------------------------------------------------------ nodes

    @property
    def size(self) -> int:
        """Rows known (rows without devices included)."""
        return len(self._devices)

    @property
    def width(self) -> int:
        return int(self.kind.shape[1])

    def devices(self, row: int) -> tuple[Device, ...]:
        """The devices of node ``row``, in slot order."""
        return self._devices[row] if row < self.size else ()

    def free_milli(self, row: int) -> IntArray:
        """Free milli of each device of ``row``, aligned with :meth:`devices`."""
        out: IntArray = self.free[row, : len(self.devices(row))].copy()
        return out

    def add_node(self, row: int, devices: Sequence[Device]) -> None:
        """Register the devices of node ``row`` (all free). A row holds one device list."""
        if row < 0:
            raise DeviceError(f"invalid node row {row}")
        if self.devices(row):
            raise DeviceError(f"node row {row} already has devices")
        check_node_devices(devices)
        self._reserve(row + 1, len(devices))
        self._devices[row] = tuple(devices)
        self._generation[row] += 1
        for slot, device in enumerate(devices):
            self.kind[row, slot] = self._kind_codes.setdefault(device.kind, len(self._kind_codes))
            self.model[row, slot] = self._model_codes.setdefault(
                device.model, len(self._model_codes)
            )
            self.index[row, slot] = device.index
            if device.mig_profile:
                self.affinity[row, slot] = device.index  # instances of one parent GPU
            elif device.link:
                self.affinity[row, slot] = self._link_codes.setdefault(
                    device.link, len(self._link_codes)
                )
            self.capacity[row, slot] = WHOLE
            self.free[row, slot] = WHOLE

    def remove_node(self, row: int) -> tuple[Device, ...]:
        """Forget the devices of ``row`` (none may be held); returns them."""
        gone = self.devices(row)
        if not gone:
            return ()
        if self.holders[row].any():
            raise DeviceError(f"node row {row} still has devices in use")
        self.kind[row] = -1
        self.model[row] = 0
        self.index[row] = 0
        self.affinity[row] = -1
        self.capacity[row] = 0
        self.free[row] = 0
        self._devices[row] = ()
        self._generation[row] += 1
        return gone

    def _reserve(self, rows: int, cols: int) -> None:
        """Room for ``rows`` rows and ``cols`` slots (rows grow geometrically)."""
        have_rows, have_cols = self.kind.shape
        new_rows = max(rows, 2 * have_rows, 16) if rows > have_rows else have_rows
        new_cols = max(cols, have_cols)
        if (new_rows, new_cols) != (have_rows, have_cols):
            self.kind = _grown(self.kind, new_rows, new_cols, -1)
            self.model = _grown(self.model, new_rows, new_cols, 0)
            self.index = _grown(self.index, new_rows, new_cols, 0)
            self.affinity = _grown(self.affinity, new_rows, new_cols, -1)
            self.capacity = _grown(self.capacity, new_rows, new_cols, 0)
            self.free = _grown(self.free, new_rows, new_cols, 0)
            self.holders = _grown(self.holders, new_rows, new_cols, 0)
            self.exclusive = _grown(self.exclusive, new_rows, new_cols, False)
        while len(self._devices) < rows:
            self._devices.append(())
            self._generation.append(0)

    def copy(self) -> DeviceLedger:
        """An independent copy (for what-if planning, e.g. a reservation in the future)."""
        out = DeviceLedger.__new__(DeviceLedger)
        out._kind_codes = dict(self._kind_codes)
        out._model_codes = dict(self._model_codes)
        out._link_codes = dict(self._link_codes)
        out._devices = list(self._devices)
        out._generation = list(self._generation)
        out.kind = self.kind.copy()
        out.model = self.model.copy()
        out.index = self.index.copy()
        out.affinity = self.affinity.copy()
        out.capacity = self.capacity.copy()
        out.free = self.free.copy()
        out.holders = self.holders.copy()
        out.exclusive = self.exclusive.copy()
        out.shares = self.shares
        return out

    # ------------------------------------------------------------------ feasibility

    def _matching(self, rows: IntArray | int, request: DeviceRequest) -> BoolArray:
        """Slots of ``rows`` holding a device of the request's kind and an allowed model."""
        code = self._kind_codes.get(request.kind)
        if code is None:
            return np.zeros(np.shape(self.kind[rows]), np.bool_)
        ok: BoolArray = self.kind[rows] == code
        if request.models:
            model = self.model[rows]
            allowed = np.zeros(model.shape, np.bool_)
            for name in request.models:  # a few models: cheaper than np.isin
                found = self._model_codes.get(name)
                if found is not None:
                    allowed |= model == found
            ok &= allowed
        return ok

    def slots(self, rows: IntArray, demand: DeviceDemand) -> IntArray:
        """How many tasks of ``demand`` each node row can hold now (exact, vectorised)."""
        rows = np.asarray(rows, dtype=np.int64)
        out: IntArray | None = None
        for request in demand.requests:
            ok = self._matching(rows, request)
            if request.whole:
                tasks: IntArray = (ok & (self.holders[rows] == 0)).sum(axis=1) // request.count
            else:
                tasks = np.where(
                    ok & ~self.exclusive[rows], self.free[rows] // request.milli, 0
                ).sum(axis=1)
            out = tasks if out is None else np.minimum(out, tasks)
        assert out is not None
        return out.astype(np.int64, copy=False)

    def fits(self, rows: IntArray, demand: DeviceDemand, count: int = 1) -> BoolArray:
        """Whether each row can hold ``count`` tasks of ``demand`` now."""
        out: BoolArray = self.slots(rows, demand) >= count
        return out

    def capacity_slots(self, rows: IntArray, demand: DeviceDemand) -> IntArray:
        """How many tasks each row could hold with all its devices free (for 'never fits')."""
        rows = np.asarray(rows, dtype=np.int64)
        out: IntArray | None = None
        for request in demand.requests:
            ok = self._matching(rows, request)
            per_device = 1 if request.whole else WHOLE // request.milli
            tasks: IntArray = ok.sum(axis=1) * per_device // (request.count if request.whole else 1)
            out = tasks if out is None else np.minimum(out, tasks)
        assert out is not None
        return out.astype(np.int64, copy=False)

    # ------------------------------------------------------------------ assignment

    def assign(
        self, row: int, demand: DeviceDemand, count: int = 1, only: BoolArray | None = None
    ) -> DeviceAssignment:
        """Give ``count`` tasks of ``demand`` their devices on node ``row`` (all or none),
        among the slots ``only`` marks when given.

        Raises :class:`DevicesUnavailable` when they do not fit (the ledger is unchanged).
        """
        if count < 1:
            raise DeviceError("assign needs at least one task")
        matching = [self._matching(row, r) for r in demand.requests] if row < self.size else []
        if only is not None:
            matching = [ok & only for ok in matching]
        have = self._row_slots(row, demand, matching) if matching else 0
        if have < count:
            raise DevicesUnavailable(
                f"node row {row} holds {have} of {count} tasks of {demand.requests}"
            )
        per_task: list[list[int]] = [[] for _ in range(count)]
        milli: list[list[int]] = [[] for _ in range(count)]
        for request, ok in zip(demand.requests, matching, strict=True):
            picks = (
                self._pick_whole(row, request, count, ok)
                if request.whole
                else [[s] for s in self._pick_shares(row, request, count, ok)]
            )
            for task, slots in enumerate(picks):
                per_task[task].extend(slots)
                milli[task].extend([request.milli] * len(slots))
                if not request.whole:
                    cols = np.asarray(slots, dtype=np.int64)
                    self.free[row, cols] -= request.milli
                    self.holders[row, cols] += 1
                    self.shares += len(slots)
            if request.whole:  # distinct slots: one write for every task
                cols = np.asarray([slot for slots in picks for slot in slots], dtype=np.int64)
                self.free[row, cols] = 0
                self.holders[row, cols] = 1
                self.exclusive[row, cols] = True
        devices = self._devices[row]
        generation = self._generation[row]
        return DeviceAssignment(
            tuple(
                TaskDevices(
                    row,
                    tuple(devices[s].kind for s in slots),
                    tuple(devices[s].index for s in slots),
                    tuple(devices[s].uuid for s in slots),
                    tuple(held),
                    tuple(slots),
                    generation,
                )
                for slots, held in zip(per_task, milli, strict=True)
            )
        )

    def _row_slots(self, row: int, demand: DeviceDemand, matching: list[BoolArray]) -> int:
        """:meth:`slots` of one row (one-dimensional reads: cheaper for a single row), given
        each request's :meth:`_matching` slots."""
        out: int | None = None
        for request, ok in zip(demand.requests, matching, strict=True):
            if request.whole:
                tasks = int(np.count_nonzero(ok & (self.holders[row] == 0))) // request.count
            else:
                room = self.free[row][ok & ~self.exclusive[row]] // request.milli
                tasks = int(room.sum())
            out = tasks if out is None else min(out, tasks)
        assert out is not None
        return out

    def _pick_whole(
        self, row: int, request: DeviceRequest, count: int, matching: BoolArray
    ) -> list[list[int]]:
        """Per task, ``request.count`` entirely free slots: one island if one fits (the
        tightest such), else as few islands as possible (the largest, then the tightest that
        covers the rest). Lowest device index first inside an island."""
        ok = matching & (self.holders[row] == 0)
        cand = np.flatnonzero(ok)
        cand = cand[np.lexsort((cand, self.index[row, cand]))]
        affinity = self.affinity[row, cand]
        if not len(cand) or (affinity == affinity[0]).all():  # one island: in index order
            need = request.count
            order = cand.tolist()
            return [order[k * need : (k + 1) * need] for k in range(count)]
        islands: dict[int, list[int]] = {}
        for slot in cand.tolist():
            islands.setdefault(int(self.affinity[row, slot]), []).append(slot)
        first = {key: rank for rank, key in enumerate(islands)}  # by lowest device index
        out: list[list[int]] = []
        for _ in range(count):
            need = request.count
            chosen: list[int] = []
            while need:
                fitting = [k for k, v in islands.items() if len(v) >= need]
                if fitting:  # the tightest island that covers the rest
                    key = min(fitting, key=lambda k: (len(islands[k]), first[k]))
                else:  # no island covers it: take the largest whole
                    key = max(islands, key=lambda k: (len(islands[k]), -first[k]))
                take = islands[key][:need]
                islands[key] = islands[key][len(take) :]
                if not islands[key]:
                    del islands[key]
                chosen.extend(take)
                need -= len(take)
            out.append(sorted(chosen, key=lambda slot: (int(self.index[row, slot]), slot)))
        return out

    def _pick_shares(
        self, row: int, request: DeviceRequest, count: int, matching: BoolArray
    ) -> list[int]:
        """Per task, one slot, by best fit. Repeated best fit fills the tightest device until
        it no longer fits, then the next tightest: devices in (free, index) order, each
        taking ``free // milli`` tasks."""
        ok = matching & ~self.exclusive[row] & (self.free[row] >= request.milli)
        cand = np.flatnonzero(ok)
        free = self.free[row, cand]
        cand = cand[np.lexsort((self.index[row, cand], free))]
        takes = self.free[row, cand] // request.milli
        cum = takes.cumsum()
        last = int(cum.searchsorted(count))
        takes = takes[: last + 1].copy()
        takes[-1] -= int(cum[last]) - count
        picked: IntArray = np.repeat(cand[: last + 1], takes)
        return [int(s) for s in picked]

    def claim(
        self, row: int, demand: DeviceDemand, indices: Sequence[int], uuids: Sequence[str]
    ) -> TaskDevices:
        """One task's devices as a restarted controller finds it running: ``demand`` taken
        from the devices it was given (GPUs by index, MIG instances by UUID)."""
        if row >= self.size:
            raise DevicesUnavailable(f"node row {row} has no devices")
        only = np.zeros(self.width, np.bool_)
        for slot, device in enumerate(self._devices[row]):
            if device.kind.startswith(MIG_PREFIX):
                only[slot] = device.uuid in uuids
            else:
                only[slot] = device.index in indices
        return self.assign(row, demand, 1, only=only).tasks[0]

    def release(self, assignment: DeviceAssignment) -> None:
        """Give back what :meth:`assign` handed out (all of it, or nothing on error)."""
        whole: dict[tuple[int, int], int] = {}
        shares: dict[tuple[int, int], list[int]] = {}
        for task in assignment.tasks:
            if task.row >= self.size or task.generation != self._generation[task.row]:
                raise DeviceError(f"node row {task.row}: its devices changed since assignment")
            for slot, amount in zip(task.slots, task.milli, strict=True):
                if amount == WHOLE:
                    whole[task.row, slot] = whole.get((task.row, slot), 0) + 1
                else:
                    shares.setdefault((task.row, slot), []).append(amount)
        for (row, slot), times in whole.items():
            if times != 1 or not self.exclusive[row, slot]:
                raise DeviceError(f"node row {row} slot {slot} is not held whole once")
        for (row, slot), held in shares.items():
            if (
                self.exclusive[row, slot]
                or self.holders[row, slot] < len(held)
                or self.free[row, slot] + sum(held) > self.capacity[row, slot]
            ):
                raise DeviceError(f"node row {row} slot {slot} does not hold these shares")
        for row, slot in whole:
            self.free[row, slot] = self.capacity[row, slot]
            self.holders[row, slot] = 0
            self.exclusive[row, slot] = False
        for (row, slot), held in shares.items():
            self.free[row, slot] += sum(held)
            self.holders[row, slot] -= len(held)
            self.shares -= len(held)

    # ------------------------------------------------------------------ views and checks

    def aggregate_free(self, row: int) -> Resources:
        """What the aggregate columns of ``row`` hold free (see :func:`aggregate_capacity`):
        per kind the devices not held whole, per share resource the free milli."""
        out: dict[str, int] = {}
        free = self.free[row]
        for slot, device in enumerate(self.devices(row)):
            if not self.exclusive[row, slot]:
                out[device.kind] = out.get(device.kind, 0) + 1
            share = SHARE_RESOURCES.get(device.kind)
            if share is not None:
                out[share] = out.get(share, 0) + int(free[slot])
        return Resources(out)

    def check(self) -> None:
        """Raise :class:`LedgerCorrupt` unless every invariant holds."""
        n = self.size
        kind, cap, free = self.kind[:n], self.capacity[:n], self.free[:n]
        holders, exclusive = self.holders[:n], self.exclusive[:n]
        empty = kind < 0
        share_codes = [code for k, code in self._kind_codes.items() if k in SHARE_RESOURCES]
        shareable = np.isin(kind, share_codes)
        failures = {
            "empty slot in use": empty & ((cap != 0) | (free != 0) | (holders != 0) | exclusive),
            "free outside 0..capacity": (free < 0) | (free > cap),
            "whole device shared or not full": exclusive & ((holders != 1) | (free != 0)),
            "holders disagree with free": ~empty & ((holders == 0) != (free == cap)),
            "non-shareable device shared": ~empty & ~shareable & (holders > 0) & ~exclusive,
        }
        for what, bad in failures.items():
            if bad.any():
                row, slot = (int(x) for x in np.argwhere(bad)[0])
                raise LedgerCorrupt(f"{what} at node row {row} slot {slot}")
        for row, devices in enumerate(self._devices):
            if int((kind[row] >= 0).sum()) != len(devices):
                raise LedgerCorrupt(f"node row {row}: slots disagree with its device list")
