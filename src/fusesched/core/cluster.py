"""The core's array view of the cluster: capacity and free resources as NumPy matrices.

Rows are nodes, columns are resource names. Filtering and scoring over thousands of nodes are
array operations on these matrices, never a Python loop per node.
"""

from __future__ import annotations

from collections.abc import Mapping
from math import gcd

import numpy as np
import numpy.typing as npt

from fusesched.model.job import Placement
from fusesched.model.node import NodeSpec, NodeState
from fusesched.model.resources import Resources

IntArray = npt.NDArray[np.int64]
BoolArray = npt.NDArray[np.bool_]


class ClusterArrays:
    """Nodes, their capacity and what is still free, in array form."""

    def __init__(self) -> None:
        self.names: list[str] = []
        self.index: dict[str, int] = {}
        self.specs: list[NodeSpec] = []
        self.states: list[NodeState] = []
        self.columns: dict[str, int] = {}
        self.capacity: IntArray = np.zeros((0, 0), dtype=np.int64)
        self.free: IntArray = np.zeros((0, 0), dtype=np.int64)
        self.up: BoolArray = np.zeros(0, dtype=np.bool_)
        self.free_total: IntArray = np.zeros(0, dtype=np.int64)  # free on UP nodes, per column
        # gcd of every capacity and every per-task amount seen, per column: when a request
        # divides it, "sum of free" is an exact fit test (no per-node fragmentation).
        self.quantum: list[int] = []
        self._mask_cache: dict[tuple[object, ...], BoolArray] = {}
        self._everywhere: BoolArray = np.ones(0, dtype=np.bool_)
        self.all_up = True

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
            pad = np.zeros((self.size, 1), dtype=np.int64)
            self.capacity = np.hstack([self.capacity, pad])
            self.free = np.hstack([self.free, pad.copy()])
            self.free_total = np.append(self.free_total, 0)
            self.quantum.append(0)
        return col

    def add_node(self, spec: NodeSpec, state: NodeState) -> None:
        if spec.name in self.index:
            raise ValueError(f"node {spec.name!r} is already registered")
        for name in spec.capacity:
            self.column(name)
        row = np.zeros((1, len(self.columns)), dtype=np.int64)
        for name, amount in spec.capacity.items():
            col = self.columns[name]
            row[0, col] = amount
            self.quantum[col] = gcd(self.quantum[col], amount)
        self.index[spec.name] = self.size
        self.names.append(spec.name)
        self.specs.append(spec)
        self.states.append(state)
        self.capacity = np.vstack([self.capacity, row])
        self.free = np.vstack([self.free, row.copy()])
        self.up = np.append(self.up, state is NodeState.UP)
        self._refresh_totals()

    def set_state(self, name: str, state: NodeState) -> None:
        i = self.index[name]
        self.states[i] = state
        self.up[i] = state is NodeState.UP
        self._refresh_totals()

    def _refresh_totals(self) -> None:
        self.free_total = self.free[self.up].sum(axis=0) if self.size else self.free_total
        self._everywhere = np.ones(self.size, dtype=np.bool_)
        self.all_up = bool(self.up.all())
        self._mask_cache.clear()

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

    def is_fluid(self, per_task: IntArray) -> bool:
        """True when summing free amounts decides exactly whether tasks of this shape fit."""
        cols = np.flatnonzero(per_task)
        if len(cols) != 1:
            return False
        col = int(cols[0])
        q = self.quantum[col]
        return q > 0 and q % int(per_task[col]) == 0

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

    def take(self, nodes: IntArray, amounts: IntArray, unique: bool = False) -> None:
        """Allocate ``amounts[k]`` (a row) on node ``nodes[k]`` for every k.

        ``unique`` promises that no node appears twice, which allows a faster update.
        """
        if unique:
            self.free[nodes] -= amounts
        else:
            np.subtract.at(self.free, nodes, amounts)
        self.free_total -= self._up_sum(nodes, amounts)

    def give(self, nodes: IntArray, amounts: IntArray, unique: bool = False) -> None:
        if unique:
            self.free[nodes] += amounts
        else:
            np.add.at(self.free, nodes, amounts)
        self.free_total += self._up_sum(nodes, amounts)

    def _up_sum(self, nodes: IntArray, amounts: IntArray) -> IntArray:
        if self.all_up:
            total: IntArray = amounts.sum(axis=0)
            return total
        up_total: IntArray = amounts[self.up[nodes]].sum(axis=0)
        return up_total

    def resources_of(self, amounts: IntArray) -> Resources:
        names = list(self.columns)
        return Resources({names[c]: int(amounts[c]) for c in np.flatnonzero(amounts)})
