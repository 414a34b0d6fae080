"""The core's array view of the cluster: capacity and free resources as NumPy matrices.

Rows are nodes, columns are resource names. Filtering and scoring over thousands of nodes are
array operations on these matrices, never a Python loop per node.
"""

from __future__ import annotations

import copy
from collections.abc import Mapping
from math import gcd
from typing import Any

import numpy as np
import numpy.typing as npt

from fusesched.model.job import Placement
from fusesched.model.node import NodeSpec, NodeState

IntArray = npt.NDArray[np.int64]
BoolArray = npt.NDArray[np.bool_]


def rows_within(matrix: npt.NDArray[Any], limit: npt.NDArray[Any]) -> BoolArray:
    """``(matrix <= limit).all(axis=1)``, one column at a time: NumPy's reduction along a
    short second axis is many times slower than a few whole-column comparisons."""
    if matrix.shape[1] == 0:
        return np.ones(len(matrix), dtype=np.bool_)
    out: BoolArray = matrix[:, 0] <= limit[0]
    for col in range(1, matrix.shape[1]):
        out &= matrix[:, col] <= limit[col]
    return out


def covers(have: IntArray, need: IntArray) -> bool:
    """``(need <= have).all()``: counting the shortfalls is several times cheaper than
    NumPy's general reduction on rows this short."""
    return not np.count_nonzero(need > have)


_ONES: list[IntArray] = []  # one shared read-only array of ones (grown when needed)


def ones(n: int) -> IntArray:
    """``np.ones(n, np.int64)``, read-only: a view of one shared array (a slice is several
    times cheaper than a new array)."""
    if not _ONES or len(_ONES[0]) < n:
        grown = np.ones(max(n, 4096), dtype=np.int64)
        grown.setflags(write=False)
        _ONES[:] = [grown]
    return _ONES[0][:n]


def _resized(buf: IntArray, rows: int, cols: int) -> IntArray:
    """A zero-padded copy in column-major order: a resource column is contiguous in memory,
    which is what per-resource filtering over all nodes reads."""
    out = np.zeros((rows, cols), dtype=np.int64, order="F")
    out[: buf.shape[0], : buf.shape[1]] = buf
    return out


class ClusterArrays:
    """Nodes, their capacity and what is still free, in array form."""

    def __init__(self) -> None:
        self.names: list[str] = []
        self.index: dict[str, int] = {}
        self.specs: list[NodeSpec] = []
        self.states: list[NodeState] = []
        self.columns: dict[str, int] = {}
        # row buffers grow geometrically; capacity/free/up are views of their first `size` rows
        self._cap_buf: IntArray = np.zeros((0, 0), dtype=np.int64)
        self._free_buf: IntArray = np.zeros((0, 0), dtype=np.int64)
        self._up_buf: BoolArray = np.zeros(0, dtype=np.bool_)
        self.capacity: IntArray = self._cap_buf
        self.free: IntArray = self._free_buf
        self.free_columns: list[IntArray] = []  # views of free's columns (contiguous)
        self.up: BoolArray = self._up_buf
        self._name_array: npt.NDArray[np.object_] | None = None  # built when asked for
        self.free_total: IntArray = np.zeros(0, dtype=np.int64)  # free on UP nodes, per column
        # the same as Python ints, kept in step (changed in place: a caller may hold it):
        # reading one column of a list is several times cheaper than of an array
        self.free_sums: list[int] = []
        # gcd of every capacity and every per-task amount seen, per column: when a request
        # divides it, "sum of free" is an exact fit test (no per-node fragmentation).
        self.quantum: list[int] = []
        self._mask_cache: dict[tuple[object, ...], npt.NDArray[Any]] = {}
        self._filters: dict[tuple[object, ...], tuple[BoolArray, IntArray]] = {}
        self._shape_filters: dict[int, tuple[BoolArray | None, IntArray | None]] = {}
        # per column, a row before which every node has none of it free (a lower bound)
        self._first_free: dict[int, int] = {}
        # see rows_with_free: per column, and per (mask id, columns...)
        self._free_rows: dict[int, IntArray] = {}
        self._free_rows_within: dict[
            tuple[int, int], tuple[BoolArray | None, IntArray, IntArray]
        ] = {}
        self._everywhere: BoolArray = np.ones(0, dtype=np.bool_)
        self.all_up = True

    def __deepcopy__(self, memo: dict[int, Any]) -> ClusterArrays:
        """A copy whose ``capacity``/``free``/``up`` are views of its own buffers again (a deep
        copy of a view is a separate array) and whose caches are empty (they are keyed by the
        ids of arrays, which the copy does not share)."""
        new = ClusterArrays.__new__(ClusterArrays)
        memo[id(self)] = new
        for name, value in vars(self).items():
            setattr(new, name, copy.deepcopy(value, memo))
        new._views()
        new._refresh_masks()
        return new

    # ------------------------------------------------------------------ building

    @property
    def size(self) -> int:
        return len(self.names)

    def column(self, name: str) -> int:
        """The column of a resource, added (zero everywhere) if unseen."""
        col = self.columns.get(name)
        if col is None:
            col = len(self.columns)
            self.columns[name] = col
            self._cap_buf = _resized(self._cap_buf, len(self._cap_buf), col + 1)
            self._free_buf = _resized(self._free_buf, len(self._free_buf), col + 1)
            self.free_total = np.append(self.free_total, 0)
            self.free_sums.append(0)
            self.quantum.append(0)
            self._views()
        return col

    def add_node(self, spec: NodeSpec, state: NodeState) -> None:
        if spec.name in self.index:
            raise ValueError(f"node {spec.name!r} is already registered")
        for name in spec.capacity:
            self.column(name)
        row = self.size
        if row == len(self._cap_buf):  # grow the buffers geometrically
            grow = max(16, row)
            width = len(self.columns)
            self._cap_buf = _resized(self._cap_buf, row + grow, width)
            self._free_buf = _resized(self._free_buf, row + grow, width)
            self._up_buf = np.concatenate([self._up_buf, np.zeros(grow, np.bool_)])
        for name, amount in spec.capacity.items():
            col = self.columns[name]
            self._cap_buf[row, col] = amount
            self._free_buf[row, col] = amount
            self.quantum[col] = gcd(self.quantum[col], amount)
        self._up_buf[row] = state is NodeState.UP
        self.index[spec.name] = row
        self.names.append(spec.name)
        self._name_array = None
        self.specs.append(spec)
        self.states.append(state)
        self._views()
        if state is NodeState.UP:
            self.free_total += self.free[row]
            self.free_sums[:] = self.free_total.tolist()
        self._refresh_masks()

    def set_state(self, name: str, state: NodeState) -> None:
        i = self.index[name]
        self.states[i] = state
        self.up[i] = state is NodeState.UP
        self.free_total = self.free[self.up].sum(axis=0)
        self.free_sums[:] = self.free_total.tolist()
        self._refresh_masks()

    @property
    def name_array(self) -> npt.NDArray[np.object_]:
        """Node names as an (append-only) object array, for lookups by row."""
        names = self._name_array
        if names is None:
            names = self._name_array = np.array(self.names, dtype=object)
        return names

    def _views(self) -> None:
        n = len(self.names)
        self.capacity = self._cap_buf[:n]
        self.free = self._free_buf[:n]
        self.up = self._up_buf[:n]
        self.free_columns = [self.free[:, col] for col in range(self.free.shape[1])]

    def _refresh_masks(self) -> None:
        self._first_free.clear()
        self._free_rows.clear()
        self._free_rows_within.clear()
        if len(self._everywhere) != self.size:
            self._everywhere = np.ones(self.size, dtype=np.bool_)
        self.all_up = bool(self.up.all())
        self._mask_cache.clear()
        self._filters.clear()
        self._shape_filters.clear()

    # ------------------------------------------------------------------ requests

    def vector(self, resources: Mapping[str, int]) -> IntArray | None:
        """The request as a row over the columns, or None if it names an unknown resource."""
        vec = np.zeros(len(self.columns), dtype=np.int64)
        for name, amount in resources.items():
            col = self.columns.get(name)
            if col is None:
                return None
            vec[col] = amount
        return vec

    def note_request(self, per_task: IntArray) -> None:
        """Fold a per-task request into the per-column quantum (see ``quantum``)."""
        for col in np.flatnonzero(per_task):
            self.quantum[col] = gcd(self.quantum[col], int(per_task[col]))

    def allowed(self, placement: Placement) -> BoolArray:
        """Nodes whose labels the placement allows, whatever their state (cached)."""
        if not placement.constrained:
            return self._everywhere
        key = ("allowed", *placement.cache_key())
        mask = self._mask_cache.get(key)
        if mask is None:
            mask = np.fromiter(
                (placement.allows(spec.labels) for spec in self.specs),
                dtype=np.bool_,
                count=self.size,
            )
            self._mask_cache[key] = mask
        return mask

    def filter(self, placement: Placement) -> tuple[BoolArray | None, IntArray | None]:
        """:meth:`eligible` and its row numbers for a constrained placement; for one without
        label constraints, ``(None, None)`` if every node is up (else the up mask and None).
        Cached like the masks."""
        if not placement.constrained:
            return (None, None) if self.all_up else (self.up, None)
        key = placement.cache_key()
        found = self._filters.get(key)
        if found is None:
            mask = self.eligible(placement)
            found = self._filters[key] = (mask, mask.nonzero()[0])
        return found

    def shape_filter(
        self, number: int, placement: Placement
    ) -> tuple[BoolArray | None, IntArray | None]:
        """:meth:`filter` of a job shape's placement, cached by the shape's number (unique
        for its compiler's lifetime: no placement is hashed again)."""
        found = self._shape_filters.get(number)
        if found is None:
            found = self._shape_filters[number] = self.filter(placement)
        return found

    def eligible(self, placement: Placement) -> BoolArray:
        """UP nodes whose labels the placement allows (cached per placement shape)."""
        if not placement.constrained:
            return self.up
        key = ("eligible", *placement.cache_key())
        mask = self._mask_cache.get(key)
        if mask is None:
            mask = self.allowed(placement) & self.up
            self._mask_cache[key] = mask
        return mask

    def preference(self, placement: Placement) -> IntArray | None:
        """Sum of matching preferred-term weights per node, or None without preferences."""
        if not placement.preferred:
            return None
        score = np.zeros(self.size, dtype=np.int64)
        for term in placement.preferred:
            hits = np.fromiter(
                (term.requirement.matches(s.labels) for s in self.specs),
                dtype=np.bool_,
                count=self.size,
            )
            score += hits * term.weight
        return score

    # ------------------------------------------------------------------ accounting

    def take(
        self,
        nodes: IntArray,
        amounts: IntArray,
        unique: bool = False,
        total: IntArray | None = None,
    ) -> None:
        """Allocate ``amounts[k]`` (a row) on node ``nodes[k]`` for every k.

        ``unique`` promises that no node appears twice, which allows a faster update;
        ``total`` may pass the column sums of ``amounts`` when the caller knows them.
        """
        self._change(nodes, -amounts, unique, None if total is None else -total)

    def give(
        self,
        nodes: IntArray,
        amounts: IntArray,
        unique: bool = False,
        total: IntArray | None = None,
    ) -> None:
        """Release what :meth:`take` allocated (same arguments)."""
        self._change(nodes, amounts, unique, total)
        self._released(int(nodes.min()) if len(nodes) else self.size)

    def _change(
        self, nodes: IntArray, delta: IntArray, unique: bool, total: IntArray | None
    ) -> None:
        if unique:
            self.free[nodes] += delta
        else:
            np.add.at(self.free, nodes, delta)
        self.free_total += self._up_sum(nodes, delta, total)
        self.free_sums[:] = self.free_total.tolist()

    def take_prefix(self, col: int, start: int, last: int, left: int, amount: int) -> None:
        """First fit's allocation of ``amount`` of column ``col`` (every node up): the rows
        from ``start`` to ``last - 1`` give all they have free, row ``last`` keeps ``left``."""
        column = self.free_columns[col]
        if last > start:
            column[start:last] = 0
        column[last] = left
        sums = self.free_sums
        sums[col] -= amount
        self.free_total[col] = sums[col]  # (setting an element: cheaper than subtracting)
        if last > self._first_free.get(col, 0):  # see note_full_before
            self._first_free[col] = last

    def give_column(self, nodes: IntArray, col: int, amounts: IntArray, total: IntArray) -> None:
        """:meth:`give` for an allocation of one column (distinct nodes in ascending order;
        ``total`` its sums)."""
        self.free_columns[col][nodes] += amounts
        sums = self.free_sums
        if self.all_up:
            sums[col] += total.item(col)
        else:
            sums[col] += int(amounts[self.up[nodes]].sum())
        self.free_total[col] = sums[col]
        self._released(nodes.item(0) if len(nodes) else self.size)

    def _released(self, low: int) -> None:
        """Resources came back on rows ``low`` and after: the per-column row bounds may be
        too tight."""
        if self._free_rows:
            self._free_rows.clear()
        if self._free_rows_within:
            self._free_rows_within.clear()
        first_free = self._first_free
        for col, first in first_free.items():
            if low < first:
                first_free[col] = low

    def rows_with_free(self, cols: IntArray, mask: BoolArray | None = None) -> IntArray:
        """Ascending rows (within ``mask`` if given) that may have some of every column in
        ``cols`` free: a superset, kept until resources are released (allocating only
        shrinks the true set). Cached per columns and mask."""
        key = (id(mask), id(cols))
        found = self._free_rows_within.get(key)
        if found is not None and found[0] is mask and found[1] is cols:
            return found[2]
        live = min((self._rows_with_free(col) for col in cols.tolist()), key=len)
        rows = live if mask is None else live[mask[live]]
        self._free_rows_within[key] = (mask, cols, rows)  # holding the keys' objects
        return rows

    def _rows_with_free(self, col: int) -> IntArray:
        rows = self._free_rows.get(col)
        if rows is None:
            rows = self._free_rows[col] = self.free_columns[col].nonzero()[0]
        return rows

    def first_free(self, col: int) -> int:
        """A row before which no node has any of column ``col`` free (a lower bound)."""
        return self._first_free.get(col, 0)

    def note_full_before(self, col: int, row: int) -> None:
        """The caller knows every row before ``row`` has none of column ``col`` free."""
        self._first_free[col] = max(row, self._first_free.get(col, 0))

    def _up_sum(self, nodes: IntArray, amounts: IntArray, total: IntArray | None) -> IntArray:
        if self.all_up:
            if total is not None:
                return total
            whole: IntArray = amounts.sum(axis=0)
            return whole
        up_total: IntArray = amounts[self.up[nodes]].sum(axis=0)
        return up_total
