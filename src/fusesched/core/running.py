"""Running jobs with their estimated ends and totals, as arrays for reservation arithmetic."""

from __future__ import annotations

import bisect
from dataclasses import dataclass
from itertools import pairwise

import numpy as np
import numpy.typing as npt

from fusesched.core.cluster import BoolArray, IntArray
from fusesched.core.placement import Allocation

FloatArray = npt.NDArray[np.float64]

#: Releasing more jobs than this at once goes through the :class:`Ledger`.
BULK_RELEASE = 64


@dataclass(frozen=True, slots=True)
class RunningView:
    """Running jobs sorted by estimated end (ties: start order, or the previous view's order
    after a re-estimate); valid until the running set
    changes."""

    ends: FloatArray
    slots: IntArray
    names: list[str | None]  # job id per slot
    allocs: list[Allocation | None]  # allocation per slot
    slot_totals: IntArray  # each slot's job total per column
    ledger: Ledger  # every allocation's rows, for releasing many jobs at once

    def __len__(self) -> int:
        return len(self.ends)

    def column(self, col: int) -> IntArray:
        """The jobs' totals of one column, in end order."""
        out: IntArray = self.slot_totals[self.slots, col]
        return out

    def job_id(self, k: int) -> str:
        """The id of the k-th job in end order."""
        name = self.names[int(self.slots[k])]
        assert name is not None
        return name

    def allocations(self, start: int, stop: int) -> list[Allocation]:
        """The allocations of the jobs ``start`` to ``stop - 1`` in end order."""
        allocs = self.allocs
        out = [allocs[slot] for slot in self.slots[start:stop].tolist()]
        return [a for a in out if a is not None]

    def release(self, free: IntArray, start: int, stop: int) -> None:
        """Add to ``free`` what the jobs ``start`` to ``stop - 1`` in end order hold."""
        if stop - start > BULK_RELEASE:
            self.ledger.release(free, self.slots[start:stop], len(self.allocs))
            return
        allocs = self.allocations(start, stop)
        if allocs:
            nodes = np.concatenate([a.nodes for a in allocs])
            np.add.at(free, nodes, np.concatenate([a.amounts for a in allocs]))


class RunningSet:
    """Running jobs in slots, in order of estimated end (ties: start order).

    A start or an exit touches one slot and inserts into (or deletes from) a sorted list by
    binary search, which :meth:`release_time` walks; no array is touched. The array view
    that node-exact reservations need is built only when asked for (and cached until the
    next change): it writes the new jobs' ends and totals into the slot arrays and re-sorts
    the previous view's order, minus the jobs that ended and plus the ones that started
    since (appended in start order), with a stable sort, which is cheap on such nearly
    sorted input and keeps ties in start order.
    """

    def __init__(self, width: int) -> None:
        self._ids: list[str | None] = []
        self._allocs: list[Allocation | None] = []
        self._amounts: list[list[int]] = []  # the job's total per column, per slot
        self._slot: dict[str, int] = {}
        self._free_slots: list[int] = []
        self._ends: FloatArray = np.zeros(0, dtype=np.float64)  # per slot, as of the view
        self._totals: IntArray = np.zeros((0, width), dtype=np.int64)  # likewise
        self._started = 0  # starts so far: the tie-break of equal ends
        self._entry: list[tuple[float, int, int]] = []  # per slot, its entry in ``_sorted``
        # (estimated end, start number, slot) of every running job, sorted
        self._sorted: list[tuple[float, int, int]] = []
        self._order: IntArray = np.zeros(0, dtype=np.int64)  # slots in end order at last view
        self._in_order: BoolArray = np.zeros(0, dtype=np.bool_)  # still valid in ``_order``
        self._added: dict[int, None] = {}  # slots started since the last view, in start order
        self._ended: list[int] = []  # slots whose jobs ended since the last view
        # made by the first view (a workload whose heads are all fluid never asks for one):
        # until then a start or an exit does not touch it
        self._ledger: Ledger | None = None
        self._view: RunningView | None = None

    def __len__(self) -> int:
        return len(self._slot)

    def __contains__(self, job_id: object) -> bool:
        return job_id in self._slot

    def widen(self, width: int) -> None:
        extra = width - self._totals.shape[1]
        if extra > 0:
            self._totals = np.pad(self._totals, [(0, 0), (0, extra)])
            for amounts in self._amounts:
                amounts.extend([0] * (width - len(amounts)))
            if self._ledger is not None:
                self._ledger.widen(width)
            self._view = None

    def add(self, job_id: str, est_end: float, total: IntArray, alloc: Allocation) -> None:
        if not self._free_slots:
            self._grow()
        slot = self._free_slots.pop()
        self._slot[job_id] = slot
        self._ids[slot] = job_id
        self._allocs[slot] = alloc
        self._amounts[slot] = total.tolist()
        self._started += 1
        entry = self._entry[slot] = (est_end, self._started, slot)
        bisect.insort_right(self._sorted, entry)
        self._added[slot] = None
        if self._ledger is not None:
            self._ledger.started(slot, alloc)
        self._view = None

    def remove(self, job_id: str) -> None:
        slot = self._slot.pop(job_id)
        del self._sorted[bisect.bisect_left(self._sorted, self._entry[slot])]
        self._added.pop(slot, None)
        if self._ledger is not None:  # (made by the first view: before it, nothing to note)
            self._ended.append(slot)
            self._ledger.ended(slot)
        self._ids[slot] = None
        self._allocs[slot] = None
        self._free_slots.append(slot)
        self._view = None

    def reestimate(self, job_id: str, est_end: float) -> None:
        """A running job's estimated end changed (a prediction corrected); its start order
        still breaks ties."""
        slot = self._slot[job_id]
        old = self._entry[slot]
        del self._sorted[bisect.bisect_left(self._sorted, old)]
        entry = self._entry[slot] = (est_end, old[1], slot)
        self._sorted.insert(bisect.bisect_right(self._sorted, entry), entry)
        if slot not in self._added:  # else the next view reads it from ``_entry``
            self._ends[slot] = est_end
        self._view = None

    def ids(self) -> list[str]:
        """The running job ids (in start order)."""
        return list(self._slot)

    def release_time(self, col: int, deficit: int) -> tuple[float, int] | None:
        """The earliest estimated end by which the jobs ending release at least ``deficit``
        of column ``col``, and how much they release by then (every job ending at that very
        time included); None if all of them together release less."""
        amounts = self._amounts
        released = 0
        entries = iter(self._sorted)
        for entry in entries:
            released += amounts[entry[2]][col]
            if released >= deficit:
                found = entry[0]
                break
        else:
            return None
        for end, _, slot in entries:  # the jobs ending at that very time too
            if end != found:
                break
            released += amounts[slot][col]
        return found, released

    def view(self) -> RunningView:
        """The running jobs sorted by (estimated end, start order)."""
        if self._view is None:
            if self._ended:
                self._in_order[self._ended] = False
                self._ended.clear()
            slots = self._order[self._in_order[self._order]]
            if self._added:
                started = list(self._added)
                added = np.array(started, dtype=np.int64)
                self._ends[added] = [self._entry[slot][0] for slot in started]
                self._totals[added] = [self._amounts[slot] for slot in started]
                slots = np.concatenate([slots, added])
            order = slots[self._ends[slots].argsort(kind="stable")]
            self._order = order
            self._in_order[order] = True
            self._added.clear()
            ledger = self._ledger
            if ledger is None:  # the first view: every running job, in start order
                ledger = self._ledger = Ledger(self._totals.shape[1])
                for slot in self._slot.values():
                    alloc = self._allocs[slot]
                    assert alloc is not None  # (a running job's slot holds its allocation)
                    ledger.started(slot, alloc)
            self._view = RunningView(
                self._ends[order], order, self._ids, self._allocs, self._totals, ledger
            )
        return self._view

    def _grow(self) -> None:
        old = len(self._ends)
        new = max(16, 2 * old)
        self._ids.extend([None] * (new - old))
        self._allocs.extend([None] * (new - old))
        self._amounts.extend([] for _ in range(new - old))
        self._entry.extend([(np.inf, 0, 0)] * (new - old))
        self._ends = np.concatenate([self._ends, np.full(new - old, np.inf)])
        self._in_order = np.concatenate([self._in_order, np.zeros(new - old, np.bool_)])
        self._totals = np.vstack(
            [self._totals, np.zeros((new - old, self._totals.shape[1]), np.int64)]
        )
        self._free_slots.extend(range(new - 1, old - 1, -1))


class Ledger:
    """Every running job's allocation rows in flat arrays (node, amounts, slot), so that the
    release of thousands of jobs is a few array operations instead of a loop over them.

    It is brought up to date only when used: starts and exits since then are applied in
    one go, so a workload that never needs it (fluid heads) pays nothing.
    """

    def __init__(self, width: int) -> None:
        self._nodes: IntArray = np.zeros(0, dtype=np.int64)
        self._amounts: IntArray = np.zeros((0, width), dtype=np.int64)
        self._slots: IntArray = np.zeros(0, dtype=np.int64)
        self._live: BoolArray = np.zeros(0, dtype=np.bool_)
        self._size = 0  # rows in use
        self._dead = 0  # rows in use whose job ended
        self._span: dict[int, tuple[int, int]] = {}  # slot -> its rows, once recorded
        self._added: dict[int, Allocation] = {}  # started since the last update
        self._ended: list[int] = []  # slots recorded here whose jobs ended since

    def widen(self, width: int) -> None:
        extra = width - self._amounts.shape[1]
        if extra > 0:
            self._amounts = np.pad(self._amounts, [(0, 0), (0, extra)])

    def started(self, slot: int, alloc: Allocation) -> None:
        self._added[slot] = alloc

    def ended(self, slot: int) -> None:
        if self._added.pop(slot, None) is None:
            self._ended.append(slot)

    def release(self, free: IntArray, slots: IntArray, capacity: int) -> None:
        """Add to ``free`` what the running jobs in ``slots`` (of ``capacity``) hold."""
        self._update()
        size = self._size
        chosen = np.zeros(capacity, dtype=np.bool_)
        chosen[slots] = True
        take = self._live[:size] & chosen[self._slots[:size]]
        np.add.at(free, self._nodes[:size][take], self._amounts[:size][take])

    def _update(self) -> None:
        for slot in self._ended:
            first, stop = self._span.pop(slot)
            self._live[first:stop] = False
            self._dead += stop - first
        self._ended.clear()
        if self._dead > max(1024, self._size // 2):
            self._compact()
        if self._added:
            self._append(list(self._added), list(self._added.values()))
            self._added.clear()

    def _append(self, slots: list[int], allocs: list[Allocation]) -> None:
        lengths = [len(a.nodes) for a in allocs]
        first = self._size
        stop = first + sum(lengths)
        if stop > len(self._nodes):
            grow = max(1024, stop, 2 * len(self._nodes))
            self._nodes = np.resize(self._nodes, grow)
            self._slots = np.resize(self._slots, grow)
            self._live = np.resize(self._live, grow)
            self._amounts = np.resize(self._amounts, (grow, self._amounts.shape[1]))
        self._nodes[first:stop] = np.concatenate([a.nodes for a in allocs])
        self._amounts[first:stop] = np.concatenate([a.amounts for a in allocs])
        self._slots[first:stop] = np.repeat(slots, lengths)
        self._live[first:stop] = True
        self._size = stop
        bounds = np.cumsum([first, *lengths]).tolist()
        self._span.update(zip(slots, pairwise(bounds), strict=True))

    def _compact(self) -> None:
        keep = self._live[: self._size].nonzero()[0]
        self._nodes = self._nodes[keep]
        self._amounts = self._amounts[keep]
        self._slots = self._slots[keep]
        self._live = np.ones(len(keep), dtype=np.bool_)
        self._size = len(keep)
        self._dead = 0
        # each job's rows stay together and in order, so a job starts where the slot changes
        slots = self._slots
        starts = np.flatnonzero(np.diff(slots, prepend=-1))
        bounds = [*starts.tolist(), len(slots)]
        self._span = dict(zip(slots[starts].tolist(), pairwise(bounds), strict=True))
