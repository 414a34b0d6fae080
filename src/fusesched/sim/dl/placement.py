"""GPU locality: put a job's GPUs on as few nodes as possible.

* A job that fits one node goes to the fullest node that still has room (best fit), leaving
  whole nodes free for large jobs.
* A larger job takes the nodes with the most free GPUs first, so it uses the fewest nodes.
* A placement is *consolidated* when it uses ceil(GPUs / GPUs per node) nodes, the minimum;
  otherwise it is *spread* and the job runs slower (``DlCluster.spread_speed``). Spread
  placement is allowed whenever enough GPUs are free: waiting for consolidation would idle GPUs.
"""

from __future__ import annotations

import math

import numpy as np

from fusesched.policies.dl_base import IntArray

Allocation = list[tuple[int, int]]  # (node, GPUs)


def place(free: IntArray, gpus: int, per_node: int) -> tuple[Allocation, bool] | None:
    """GPUs to take from which nodes, and whether it is consolidated; None if they do not fit.

    ``free`` (free GPUs per node) is not changed.
    """
    if gpus > int(free.sum()):
        return None
    if gpus <= per_node:
        fits = np.flatnonzero(free >= gpus)
        if len(fits):
            node = int(fits[np.argmin(free[fits])])  # best fit; argmin keeps the lowest index
            return [(node, gpus)], True
    order = np.lexsort((np.arange(len(free)), -free))  # most free first, ties by index
    alloc: Allocation = []
    left = gpus
    for node in order.tolist():
        take = min(left, int(free[node]))
        if take <= 0:
            break
        alloc.append((node, take))
        left -= take
        if left == 0:
            break
    return alloc, len(alloc) <= math.ceil(gpus / per_node)
