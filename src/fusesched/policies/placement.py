"""Placement scoring policies: which of the feasible nodes a task group goes to first.

A policy turns the candidate nodes into an order. Lower score is taken first; ties go to the
lower node index, so every policy is deterministic.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass

import numpy as np
import numpy.typing as npt

FloatArray = npt.NDArray[np.float64]
IntArray = npt.NDArray[np.int64]

#: (candidate free rows, candidate capacity rows, per-task request, tasks per candidate) → score
Scorer = Callable[[IntArray, IntArray, IntArray, IntArray], FloatArray | None]


def _leftover(free: IntArray, capacity: IntArray, request: IntArray, take: IntArray) -> FloatArray:
    """Fraction of each requested resource left on the node after placing ``take`` tasks."""
    cols = np.flatnonzero(request)
    left = free[:, cols] - take[:, None] * request[cols]
    cap = np.maximum(capacity[:, cols], 1)
    out: FloatArray = (left / cap).sum(axis=1)
    return out


def _first_fit(free: IntArray, capacity: IntArray, request: IntArray, take: IntArray) -> None:
    return None  # node order


def _best_fit(free: IntArray, capacity: IntArray, request: IntArray, take: IntArray) -> FloatArray:
    return _leftover(free, capacity, request, take)


def _worst_fit(free: IntArray, capacity: IntArray, request: IntArray, take: IntArray) -> FloatArray:
    return -_leftover(free, capacity, request, take)


@dataclass(frozen=True)
class PlacementPolicy:
    name: str
    description: str
    score: Scorer
    node_order: bool = False  # True: no scoring, nodes are taken in index order


PLACEMENT_POLICIES: Mapping[str, PlacementPolicy] = {
    p.name: p
    for p in (
        PlacementPolicy(
            "first-fit", "lowest-numbered feasible nodes first", _first_fit, node_order=True
        ),
        PlacementPolicy(
            "best-fit", "nodes left with the least free capacity first (packing)", _best_fit
        ),
        PlacementPolicy(
            "worst-fit", "nodes left with the most free capacity first (spread)", _worst_fit
        ),
    )
}
