"""Filter → score → reserve for one job, with all-or-nothing gang semantics.

``Statement`` is the transaction (Volcano's idea): tentative allocations go straight into the
cluster arrays and are either committed or rolled back as a whole, so a gang never holds part
of its resources. When greedy placement misses, :mod:`fusesched.core.placement_search`
searches exhaustively.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import overload

import numpy as np
import numpy.typing as npt

from fusesched.core.cluster import BoolArray, ClusterArrays, IntArray, ones
from fusesched.core.device_specs import DeviceDemand
from fusesched.core.devices import DeviceAssignment, DeviceLedger, DevicesUnavailable
from fusesched.model.events import GroupPlacement
from fusesched.model.job import Placement
from fusesched.model.resources import Resources
from fusesched.policies.placement import FloatArray, PlacementPolicy

#: Nodes read first by first fit on one column (more while more are needed).
FIRST_FIT_CHUNK = 256

#: First fit on one column reads its rows from row 0 when it starts at most this far in (the
#: rows before its start have none free): cheaper than shifting the rows it found.
FROM_ZERO = 256

#: ``np.add.accumulate``: the cumulative sum without the ``cumsum`` method's dispatch (about a
#: third cheaper on the short windows of first fit).
_accumulate = np.add.accumulate

#: Weight of one unit of a preferred label term: far above any placement score, so label
#: preferences order nodes first and the policy's score breaks their ties.
PREFERENCE_SCALE = 1.0e6


@dataclass(slots=True)
class GroupShape:
    """A task group in array form (the core's compiled view of a ``TaskGroup``)."""

    name: str
    replicas: int
    per_task: IntArray
    resources: Resources
    demand: DeviceDemand | None = None  # per task, what the device ledger must hold
    # the group's own label filters, besides the job's (None: it has none; the common case,
    # which reads no mask of its own: see group_mask)
    placement: Placement | None = None
    cols: IntArray = field(init=False)  # the requested columns
    key: bytes = field(init=False)  # ``per_task`` as bytes: equal requests, equal keys

    def __post_init__(self) -> None:
        self.cols = self.per_task.nonzero()[0]
        self.key = self.per_task.tobytes()


@dataclass(slots=True)
class Allocation:
    """Where a job's tasks went: per group, node rows and task counts.

    A job that holds a single resource column may be stored in column form (``column`` and
    ``column_amounts``); :attr:`amounts` then builds the full rows only when asked for.
    """

    nodes: IntArray  # node row per entry
    rows: IntArray | None  # resources per entry (one row per node), or None in column form
    unique: bool  # no node appears twice in ``nodes``
    total: IntArray  # column sums of ``amounts``
    groups: list[tuple[GroupShape, IntArray, IntArray]] = field(default_factory=list)
    # (group, node rows, task counts) for the launch decision
    column: int = -1
    column_amounts: IntArray | None = None
    # per entry of ``groups``, the devices of its tasks (None: the group asks for none;
    # empty: no group asks for any)
    devices: Sequence[DeviceAssignment | None] = ()

    @property
    def amounts(self) -> IntArray:
        if self.rows is None:
            assert self.column_amounts is not None
            rows = np.zeros((len(self.nodes), len(self.total)), dtype=np.int64)
            rows[:, self.column] = self.column_amounts
            self.rows = rows
        return self.rows


@dataclass(slots=True)
class Statement:
    """Tentative allocations on the cluster, committed or discarded as one.

    With a ``ledger``, a group with a device demand also gets its devices, node by node;
    :class:`DevicesUnavailable` from :meth:`allocate` leaves that group unallocated (the
    caller discards the statement).
    """

    cluster: ClusterArrays
    ledger: DeviceLedger | None = None
    _nodes: list[IntArray] = field(default_factory=list)
    _amounts: list[IntArray] = field(default_factory=list)
    _groups: list[tuple[GroupShape, IntArray, IntArray]] = field(default_factory=list)
    _totals: list[IntArray] = field(default_factory=list)
    _devices: list[DeviceAssignment | None] = field(default_factory=list)

    def allocate(self, group: GroupShape, nodes: IntArray, counts: IntArray) -> None:
        devices = None
        if group.demand is not None and self.ledger is not None:
            devices = assign_devices(self.ledger, group.demand, nodes, counts)
        amounts = counts[:, None] * group.per_task[None, :]
        total = group.per_task * int(counts.sum())
        # choose_nodes never repeats a node within a group
        self.cluster.take(nodes, amounts, unique=True, total=total)
        self._nodes.append(nodes)
        self._amounts.append(amounts)
        self._groups.append((group, nodes, counts))
        self._totals.append(total)
        self._devices.append(devices)

    @property
    def tasks(self) -> int:
        return int(sum(int(c.sum()) for _, _, c in self._groups))

    def discard(self) -> None:
        for nodes, amounts, total in zip(self._nodes, self._amounts, self._totals, strict=True):
            self.cluster.give(nodes, amounts, unique=True, total=total)
        if self.ledger is not None:
            for devices in self._devices:
                if devices is not None:
                    self.ledger.release(devices)
        self._devices.clear()
        self._nodes.clear()
        self._amounts.clear()
        self._groups.clear()
        self._totals.clear()

    def commit(self) -> Allocation:
        if len(self._nodes) == 1:
            return Allocation(
                self._nodes[0],
                self._amounts[0],
                True,
                self._totals[0],
                list(self._groups),
                devices=list(self._devices),
            )
        width = len(self.cluster.columns)
        nodes = np.concatenate(self._nodes) if self._nodes else np.zeros(0, np.int64)
        amounts = np.concatenate(self._amounts) if self._amounts else np.zeros((0, width), np.int64)
        unique = len(np.unique(nodes)) == len(nodes)
        total = np.sum(self._totals, axis=0) if self._totals else np.zeros(width, np.int64)
        return Allocation(
            nodes, amounts, unique, total, list(self._groups), devices=list(self._devices)
        )


def assign_devices(
    ledger: DeviceLedger, demand: DeviceDemand, nodes: IntArray, counts: IntArray
) -> DeviceAssignment:
    """The devices of ``counts[k]`` tasks on each node row ``nodes[k]``, in task order (all or
    none: raises :class:`DevicesUnavailable` with the ledger unchanged)."""
    out = DeviceAssignment()
    try:
        for row, count in zip(nodes.tolist(), counts.tolist(), strict=True):
            if count:
                out = out + ledger.assign(row, demand, count)
    except DevicesUnavailable:
        if len(out):
            ledger.release(out)
        raise
    return out


def device_slots(
    ledger: DeviceLedger, demand: DeviceDemand, counts: IntArray, rows: IntArray | None
) -> IntArray:
    """``counts`` (aligned with ``rows``, or with every row when None) narrowed to how many
    tasks of ``demand`` the devices of each row can hold now."""
    hit = counts.nonzero()[0]
    if not len(hit):
        return counts
    target = hit if rows is None else rows[hit]
    size = int(target.max()) + 1
    if ledger.size < size:  # rows added without devices
        ledger.add_node(size - 1, ())
    out = counts.copy()
    out[hit] = np.minimum(counts[hit], ledger.slots(target, demand))
    return out


#: A plan: per group, the node rows and task counts (not yet applied to the cluster).
Plan = list[tuple[GroupShape, IntArray, IntArray]]


@overload
def group_mask(cluster: ClusterArrays, group: GroupShape, eligible: BoolArray) -> BoolArray: ...
@overload
def group_mask(
    cluster: ClusterArrays, group: GroupShape, eligible: BoolArray | None
) -> BoolArray | None: ...
def group_mask(
    cluster: ClusterArrays, group: GroupShape, eligible: BoolArray | None
) -> BoolArray | None:
    """``eligible`` (None: every row) narrowed to the nodes ``group``'s own label filters
    allow; ``eligible`` itself for a group without any."""
    if group.placement is None:
        return eligible
    own = cluster.allowed(group.placement)
    return own if eligible is None else eligible & own


def plan_groups(
    groups: list[GroupShape],
    free: IntArray,
    eligible: BoolArray | None,
    *,
    max_per_node: int | IntArray | None,
    min_tasks: int,
    partial: bool,
    policy: PlacementPolicy,
    cluster: ClusterArrays,
    preference: FloatArray | None,
    rows: IntArray | None = None,
    bounded: bool = False,
    ledger: DeviceLedger | None = None,
) -> Plan | None:
    """Filter and score every group in turn on ``free`` (left untouched).

    Succeeds when at least ``min_tasks`` tasks are placed; with ``partial`` False every group
    must be placed whole. ``max_per_node`` caps the tasks of the whole job on one node (an
    array: per node row, as :mod:`fusesched.core.node_count` gives each node its share).
    ``rows`` may list the eligible rows, so that a job confined to a small part of the
    cluster reads only that part. ``bounded`` promises ``free <= cluster.free``: then only
    the rows :meth:`ClusterArrays.rows_with_free` lists for a requested column can hold a task.
    With a ``ledger``, a group with a device demand is narrowed to what the devices hold now
    (the ledger does not see this plan's earlier groups: :class:`Statement` has the last word).
    """
    work = free
    used: IntArray | None = None  # tasks of this job per node, for max_per_node
    plan: Plan = []
    placed = 0
    for index, group in enumerate(groups):
        own = None if group.placement is None else cluster.allowed(group.placement)
        cand = _candidate_rows(group, len(free), eligible, rows, cluster if bounded else None, own)
        if cand is None:
            mask = eligible if own is None else own if eligible is None else eligible & own
            counts = task_slots(work, mask, group.per_task, None, group.cols)
        else:
            counts = task_slots(work, None, group.per_task, None, group.cols, rows=cand)
        demand = group.demand
        if ledger is not None and demand is not None and (ledger.shares or not demand.counted):
            counts = device_slots(ledger, demand, counts, cand)
        if max_per_node is not None:
            cap = _at(max_per_node, cand) if isinstance(max_per_node, np.ndarray) else max_per_node
            room = cap if used is None else cap - _at(used, cand)
            counts = np.minimum(counts, room)
        wanted = min(group.replicas, int(counts.sum())) if partial else group.replicas
        if wanted == 0:
            continue
        pick = choose_nodes(
            counts, wanted, policy, cluster, group.per_task, preference, work, rows=cand
        )
        if pick is None:
            return None
        plan.append((group, pick[0], pick[1]))
        placed += wanted
        if index + 1 < len(groups):
            if work is free:
                work = free.copy()
            work[pick[0]] -= pick[1][:, None] * group.per_task[None, :]
            if max_per_node is not None:
                used = np.zeros(len(free), np.int64) if used is None else used
                used[pick[0]] += pick[1]
    return plan if placed >= min_tasks else None


def slot_bound(group: GroupShape, free: IntArray, rows: IntArray, max_per_node: int | None) -> int:
    """How many tasks of ``group`` the ``rows`` of ``free`` hold together, each node capped
    at ``max_per_node``: with ``rows`` every row that may hold one of its tasks (a superset
    is fine), an upper bound of what :func:`plan_groups` can place of the group on ``free``
    (device demands, data locality, other groups and topology only narrow it), so a gang
    whose bound is below its size cannot be placed there."""
    if not len(group.cols):
        return group.replicas  # asks for nothing: no bound
    counts = task_slots(free, None, group.per_task, max_per_node, group.cols, rows=rows)
    return int(counts.sum())


def _at(values: IntArray, rows: IntArray | None) -> IntArray:
    """``values`` read at ``rows`` (all of them when None)."""
    return values if rows is None else values[rows]


def _candidate_rows(
    group: GroupShape,
    size: int,
    eligible: BoolArray | None,
    rows: IntArray | None,
    cluster: ClusterArrays | None,
    own: BoolArray | None = None,
) -> IntArray | None:
    """Ascending rows that may hold a task of ``group`` (None: read every row).

    With ``cluster`` given (the caller's free matrix is bounded by the cluster's), rows with
    none of a requested column free are left out; ``rows`` are the eligible rows if known.
    ``own``: the nodes the group's own label filters allow (None: it has none).
    """
    cand = rows
    if cluster is not None:
        live = cluster.rows_with_free(group.cols, eligible)
        if cand is None or len(live) < len(cand):
            cand = live
    if own is not None and cand is not None:
        cand = cand[own[cand]]
    return cand if cand is not None and 2 * len(cand) < size else None


def task_slots(
    free: IntArray,
    eligible: BoolArray | None,
    per_task: IntArray,
    max_per_node: int | None,
    cols: IntArray | None = None,
    rows: IntArray | None = None,
) -> IntArray:
    """How many tasks of shape ``per_task`` each node can take now (0 where not eligible;
    ``eligible`` None means every node; ``cols`` the requested columns if known). With
    ``rows``, only those rows are read and the result is aligned with them."""
    if cols is None:
        cols = per_task.nonzero()[0]
    first, *others = cols.tolist()
    # one column at a time, read as a column view first (much cheaper than free[rows, col])
    column = free[:, first]
    counts: IntArray = (column if rows is None else column[rows]) // per_task[first]
    for col in others:
        column = free[:, col]
        room = (column if rows is None else column[rows]) // per_task[col]
        np.minimum(counts, room, out=counts)
    if eligible is not None:
        counts = np.where(eligible, counts, 0)
    if max_per_node is not None:
        counts = np.minimum(counts, max_per_node)
    return counts


def choose_nodes(
    counts: IntArray,
    wanted: int,
    policy: PlacementPolicy,
    cluster: ClusterArrays,
    per_task: IntArray,
    preference: FloatArray | None,
    free: IntArray | None = None,
    rows: IntArray | None = None,
) -> tuple[IntArray, IntArray] | None:
    """Pick nodes for ``wanted`` tasks given per-node slot ``counts``; None if they do not fit.

    ``counts[k]`` belongs to row ``rows[k]`` (ascending; None: to row k). Returns distinct
    node rows and the number of tasks each takes.
    """
    if policy.node_order and preference is None:
        # first fit: the shortest prefix of the node order that holds the tasks
        cum = counts.cumsum()
        if not len(cum) or int(cum[-1]) < wanted:
            return None
        last = int(cum.searchsorted(wanted))
        prefix = counts[: last + 1]
        hit = prefix.nonzero()[0]
        takes = prefix[hit]
        takes[-1] -= int(cum[last]) - wanted
        return (hit if rows is None else rows[hit]), takes
    local = counts.nonzero()[0]
    cand_counts = counts[local]
    if int(cand_counts.sum()) < wanted:
        return None
    cand = local if rows is None else rows[local]
    source = cluster.free if free is None else free
    # score each node by what it would look like after taking its share of the tasks
    scores = policy.score(
        source[cand], cluster.capacity[cand], per_task, np.minimum(cand_counts, wanted)
    )
    key = np.zeros(len(cand)) if scores is None else scores.astype(np.float64)
    if preference is not None:  # a bonus per node: higher goes first
        key = key - preference[cand]
    k = min(len(cand), wanted)  # each candidate holds at least one task
    if k < len(cand):
        # only the k best can be needed; keep every candidate tied with the k-th
        cutoff = key[np.argpartition(key, k - 1)[k - 1]]
        part = np.flatnonzero(key <= cutoff)
    else:
        part = np.arange(len(cand))
    pick = part[np.lexsort((cand[part], key[part]))]
    order = cand[pick]
    ordered_counts = cand_counts[pick]
    cum = ordered_counts.cumsum()
    last = int(cum.searchsorted(wanted))
    nodes = order[: last + 1]
    takes = ordered_counts[: last + 1].copy()
    takes[-1] -= int(cum[last]) - wanted
    return nodes, takes


def first_fit_column(
    cluster: ClusterArrays,
    group: GroupShape,
    col: int,
    need: int,
    amount: int,
    total: IntArray,
) -> Allocation:
    """First fit of a job of one task group that asks for one divisible resource only
    (column ``col``, ``amount`` per task, ``need`` in all, ``total`` its request row): the
    fast path of ``SchedulerCore.try_place``, allocated on the cluster.

    The caller has checked that every node is up and that the free sum suffices, which for
    such a job means it fits; the result is what planning + :class:`Statement` would
    produce. Every node's free amount is a multiple of the task size, so the nodes taken are
    the shortest run from the first node with any of the resource free whose free amounts
    add up to the need; it is found by a cumulative sum over a window that grows until it
    holds the need, so a small job on a big cluster does not read every node.
    """
    column = cluster.free_columns[col]
    start = cluster.first_free(col)
    width = FIRST_FIT_CHUNK
    cum = _accumulate(column[start : start + width])
    # (a window to the last row holds the need: the caller checked the sum)
    have = cum.item(-1) if start + width < len(column) else need
    while have < need:  # a busy cluster: read further ahead, at least twice as far and
        # as far as the free amount seen so far suggests (with a quarter to spare)
        width = max(2 * width, width * need // max(have, 1) * 5 // 4)
        cum = _accumulate(column[start : start + width])
        have = cum.item(-1)
    last = int(cum.searchsorted(need))
    stop = start + last + 1
    if start <= FROM_ZERO:
        nodes = column[:stop].nonzero()[0]
        held = column[nodes]
    else:
        window = column[start:stop]
        nodes = window.nonzero()[0]
        held = window[nodes]
        nodes += start
    left = cum.item(last) - need
    if left:
        held[-1] -= left
    cluster.take_prefix(col, start, start + last, left, need)
    # one task per node (each holds at least one): no division needed
    counts = ones(len(nodes)) if len(nodes) == group.replicas else held // amount
    return Allocation(nodes, None, True, total, [(group, nodes, counts)], col, held)


def group_placements(
    alloc: Allocation, declared: list[str], names: npt.NDArray[np.object_]
) -> tuple[GroupPlacement, ...]:
    """Where each task group of ``alloc`` went, in the order the job declared its groups
    (``declared``: their names); ``names`` is the cluster's table of node names."""
    placed = alloc.groups
    devices: Sequence[DeviceAssignment | None] = alloc.devices or [None] * len(placed)
    order = sorted(range(len(placed)), key=lambda k: declared.index(placed[k][0].name))
    return tuple(
        GroupPlacement(
            placed[k][0].name,
            placed[k][0].resources,
            placed[k][1],
            placed[k][2],
            names,
            devices[k],
        )
        for k in order
    )
