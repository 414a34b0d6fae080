"""The core's own mutable record of a job, and the ordered queue of waiting jobs."""

from __future__ import annotations

import bisect
import copy
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import numpy.typing as npt

from fusesched.core.cluster import IntArray
from fusesched.core.placement import Allocation, GroupShape
from fusesched.core.quota_verdicts import Admission
from fusesched.model.job import JobSpec, LabelRequirement
from fusesched.model.phases import TRANSITIONS, JobPhase, Transition, check_transition
from fusesched.policies.queue_order import FactArrays, JobFacts, QueueOrder


@dataclass(slots=True, eq=False)
class JobRecord:
    """Everything the core tracks about one job. Only the core mutates it."""

    spec: JobSpec
    seq: int
    phase: JobPhase
    groups: list[GroupShape] | None  # None: asks for a resource no node has
    total: IntArray
    bound: IntArray  # what it needs at least to start (total, or less with min_member)
    estimate: float
    facts: JobFacts
    # what its compiled shape says (first, so that intake passes them by position: a call
    # with keywords costs about twice as much)
    never_fits: str = ""
    shape_id: int = 0  # jobs with the same id have the same feasibility everywhere
    family: int = -1  # see Shape.family
    single_column: int = -1  # see SchedulerCore.fluid_column
    single_amount: int = 0
    single_total: int = 0  # what the job needs of ``single_column`` in all
    fluid: bool = False
    # its phase changes as (time, old, new, reason), as they happen (see :attr:`history`)
    steps: list[tuple[float, JobPhase, JobPhase, str]] = field(default_factory=list)
    waiting_on: set[str] = field(default_factory=set)
    held: str | None = None  # why it is held (JobHoldRequested); None: not held
    key: tuple[float, ...] = ()
    start_time: float | None = None
    est_end: float | None = None
    end_time: float | None = None
    allocation: Allocation | None = None
    exit_code: int | None = None
    stop_requested: str | None = None
    # tenancy and restarts (see core/tenants.py)
    admission: Admission | None = None  # the quota check that let it start
    parked_by: Admission | None = None  # the quota check that parked it (its wait's reason)
    preempt_reason: str | None = None  # asked to make room; requeued when it exits
    attempts: int = 0  # runs that ended in a requeue (preemption or failure)
    preemptions: int = 0
    last_checkpoint: float | None = None  # reported by the shell (JobCheckpointed)
    not_before: float = 0.0  # requeued with a backoff: not eligible before this time
    data_wait_until: float = 0.0  # until then, only nodes caching its data (delay scheduling)
    base_spec: JobSpec | None = None  # the spec before its quota flavours' node labels
    flavour_key: tuple[tuple[str, str, str], ...] = ()  # its flavours' node terms now
    # the node terms advance reservations put on it now (core/reservations.py), or None
    booked: tuple[LabelRequirement | None, LabelRequirement | None] | None = None

    @property
    def id(self) -> str:
        return self.spec.id

    @property
    def history(self) -> list[Transition]:
        """Every phase change so far, oldest first, each with its time and reason (a new
        list: reading it changes nothing)."""
        return [_transition(Transition, step) for step in self.steps]

    def __deepcopy__(self, memo: dict[int, Any]) -> JobRecord:
        """A copy for a projection (:mod:`fusesched.core.forecast`): what the core changes in
        place (its history, what it waits on, its compiled groups — a new resource column
        pads them — and its allocation) is copied, the groups once for all jobs of a shape;
        the rest — its spec, totals, sort key and facts, which the core replaces rather than
        changes — is shared (copying every waiting job's arrays was most of a copy's cost)."""
        new = object.__new__(JobRecord)
        for name in _RECORD_SLOTS:
            object.__setattr__(new, name, getattr(self, name))
        memo[id(self)] = new
        new.steps = list(self.steps)
        new.waiting_on = set(self.waiting_on)
        new.groups = copy.deepcopy(self.groups, memo)
        new.allocation = copy.deepcopy(self.allocation, memo)
        return new

    def move(self, new: JobPhase, now: float, reason: str) -> None:
        old = self.phase
        if new not in TRANSITIONS[old]:
            check_transition(self.id, old, new)  # raises with the full story
        # (a plain tuple: a Transition costs several times more to make, and is made when
        # the history is read)
        self.steps.append((now, old, new, reason))
        self.phase = new


#: ``Transition(*fields)`` without the Python-level ``__new__`` of a named tuple.
_transition = tuple.__new__
#: every field of a record (its slots), for :meth:`JobRecord.__deepcopy__`
_RECORD_SLOTS: tuple[str, ...] = JobRecord.__slots__


class RowBuffer:
    """A growable float matrix with cheap appends and cheap removal at the front.

    :attr:`rows` is a view of the live rows. Inserting at the end or dropping a prefix costs
    O(1) amortised; inserting or deleting in the middle moves only the rows after it.
    """

    def __init__(self, width: int) -> None:
        self._buf: npt.NDArray[np.float64] = np.zeros((16, width), dtype=np.float64)
        self._start = 0
        self._n = 0

    def __len__(self) -> int:
        return self._n

    @property
    def rows(self) -> npt.NDArray[np.float64]:
        return self._buf[self._start : self._start + self._n]

    def widen(self, width: int) -> None:
        extra = width - self._buf.shape[1]
        if extra > 0:
            self._buf = np.pad(self._buf, [(0, 0), (0, extra)])

    def insert(self, pos: int, first: float, second: float, rest: IntArray) -> None:
        """Insert the row ``[first, second, *rest, 0...]`` before row ``pos``."""
        n = self._n
        if self._start + n == len(self._buf):  # no room at the end: compact or grow
            live = self._buf[self._start : self._start + n]
            if n + 1 > len(self._buf) // 2:
                self._buf = np.zeros((2 * len(self._buf), self._buf.shape[1]), np.float64)
            self._buf[:n] = live.copy()
            self._start = 0
        buf = self._buf
        at = self._start + pos
        if pos < n:
            end = self._start + n
            buf[at + 1 : end + 1] = buf[at:end].copy()
        row = buf[at]
        row[0] = first
        row[1] = second
        filled = 2 + len(rest)
        row[2:filled] = rest
        if filled < buf.shape[1]:
            row[filled:] = 0.0
        self._n = n + 1

    def delete(self, positions: list[int]) -> None:
        """Remove rows at ``positions`` (sorted ascending, distinct)."""
        if positions[-1] == len(positions) - 1:
            self._start += len(positions)  # a prefix: just move the start
        elif positions[0] == self._n - len(positions):
            pass  # a suffix: just drop it (below)
        elif len(positions) == 1:  # one row: move the shorter side over it
            at = self._start + positions[0]
            if positions[0] < self._n // 2:
                self._buf[self._start + 1 : at + 1] = self._buf[self._start : at]
                self._start += 1
            else:
                end = self._start + self._n
                self._buf[at : end - 1] = self._buf[at + 1 : end]
        else:  # close the gaps: only the rows after the first one removed move
            first = positions[0]
            keep = np.ones(self._n - first, dtype=np.bool_)
            keep[[pos - first for pos in positions]] = False
            at = self._start + first
            live = self._buf[at : self._start + self._n][keep]
            self._buf[at : at + len(live)] = live
        self._n -= len(positions)

    def permute(self, order: npt.NDArray[np.int64]) -> None:
        self._buf[self._start : self._start + self._n] = self.rows[order]


class WaitingQueue:
    """Waiting jobs in policy order, with array columns for vectorised scans.

    ``records[i]`` and ``rows[i]`` describe the i-th job in order: ``rows`` is one float
    matrix ``[estimate, shape, total...]`` (its estimate, its compiled shape's number and what
    it needs at least to start), so that a push or a removal is one array operation. Static
    orders insert by binary search; dynamic ones are re-sorted by :meth:`reorder`.
    """

    def __init__(self, order: QueueOrder, width: int) -> None:
        self.order = order
        self.records: list[JobRecord] = []
        self._keys: list[tuple[tuple[float, ...], int]] = []
        self._rows = RowBuffer(width + 2)

    @property
    def rows(self) -> npt.NDArray[np.float64]:
        """The matrix ``[estimate, shape, total...]``, one row per job in order."""
        return self._rows.rows

    def __len__(self) -> int:
        return len(self.records)

    def widen(self, width: int) -> None:
        self._rows.widen(width + 2)

    def push(self, rec: JobRecord, now: float) -> None:
        if self.order.dynamic:
            pos = len(self.records)
            self._keys.append(((), rec.seq))
        else:
            sort_key = (rec.key, rec.seq)
            keys = self._keys
            if not keys or keys[-1] < sort_key:  # after every waiting job (as in FCFS): no
                pos = len(keys)  # binary search needed
                keys.append(sort_key)
            else:
                pos = bisect.bisect_right(keys, sort_key)
                keys.insert(pos, sort_key)
        self.records.insert(pos, rec)
        self._rows.insert(pos, rec.estimate, rec.shape_id, rec.bound)

    def remove_at(self, positions: list[int]) -> None:
        """Drop the jobs at ``positions`` (distinct)."""
        if not positions:
            return
        positions = sorted(positions)
        for pos in reversed(positions):  # a shift of pointers each: cheaper than copying
            del self.records[pos]  # (a copy would touch every record's reference count)
            del self._keys[pos]
        self._rows.delete(positions)

    def remove_prefix(self, count: int) -> None:
        """Drop the first ``count`` jobs (those the cycle started in order)."""
        if count:
            del self.records[:count]
            del self._keys[:count]
            self._rows.delete(list(range(count)))

    def position(self, rec: JobRecord) -> int | None:
        """Where ``rec`` is in the queue (None if it is not queued)."""
        records = self.records
        if records and records[-1] is rec:  # (the last one queued, as often)
            return len(records) - 1
        if not self.order.dynamic:  # the keys are sorted: binary search
            pos = bisect.bisect_left(self._keys, (rec.key, rec.seq))
            return pos if pos < len(self.records) and self.records[pos] is rec else None
        try:
            return self.records.index(rec)
        except ValueError:
            return None

    def remove(self, rec: JobRecord) -> None:
        self.remove_at([self.records.index(rec)])

    def reestimate(self, rec: JobRecord, now: float) -> bool:
        """``rec``'s estimate (``rec.estimate`` and ``rec.facts``) changed while it waits: its
        row takes the new estimate and, in a static order, it moves to its new key's place
        (found by its old ``rec.key``). Returns whether it is in the queue."""
        pos = self.position(rec)
        if pos is None:
            return False
        if self.order.dynamic:  # re-sorted at the next cycle
            self._rows.rows[pos, 0] = rec.estimate
        else:
            self.remove_at([pos])
            rec.key = self.order.key(rec.facts, now)
            self.push(rec, now)
        return True

    def reorder(self, now: float, keys: tuple[npt.NDArray[np.float64], ...] | None = None) -> None:
        """Re-sort by the (time-dependent) policy key, or by ``keys`` (one array per key
        element, primary first, one entry per queued job) when given; ties by arrival."""
        if not self.order.dynamic or len(self) < 2:
            return
        if keys is None:
            keys = self._policy_keys(now)
        seq = np.array([r.seq for r in self.records])
        perm = np.lexsort((seq, *reversed(keys)))
        self.records = [self.records[i] for i in perm]
        self._keys = [self._keys[i] for i in perm]
        self._rows.permute(perm)

    def _policy_keys(self, now: float) -> tuple[npt.NDArray[np.float64], ...]:
        facts = FactArrays(
            submit=np.array([r.facts.submit for r in self.records]),
            estimate=np.array([r.facts.estimate for r in self.records]),
            procs=np.array([r.facts.procs for r in self.records]),
            priority=np.array([float(r.facts.priority) for r in self.records]),
            qos_rank=np.array([float(r.facts.qos_rank) for r in self.records]),
        )
        return self.order.keys(facts, now)
