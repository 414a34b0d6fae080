"""The waiting jobs' demand and the demand signal, in node-equivalents (pure).

A waiting job needs, of a pool, the larger of its shares of one node's CPUs and GPUs, against
the pool's largest node (a 1-GPU job on 8-GPU nodes is 1/8 of a node; a gang of two full
nodes is 2). Per pool these shares are summed unrounded; the policies round the sum up
(:attr:`fusesched.power.saving.PoolFacts.needed_now`), so small jobs that fit one node
together wake one node, not one each. (It is a lower bound: three 5-GPU jobs on 8-GPU nodes
are 1.875 nodes, two are woken, and the third node once the first two are busy.)

The forecasters (``forecast``, ``predictive``, ``surge``, ``surge-room``) are fed, per pool,
the running demand (busy nodes, or ``surge-room``'s work) plus these waiting shares
(:func:`demand_signal`), so that a small job's arrival is a small rise, not a whole node.

Shared by the simulator (:mod:`fusesched.sim.power`) and the live controller
(:mod:`fusesched.controller.power`), both through :mod:`fusesched.power.pool_demand` (which
pool each waiting job counts against, and how much), so the two feed the policies the same
quantities.
"""

from __future__ import annotations

from collections.abc import Mapping

import numpy as np
import numpy.typing as npt

#: a job asking for none of the counted resources (memory only, say) still needs a node
NOTHING_COUNTED = 1.0


def largest_node(
    capacity: npt.NDArray[np.float64] | npt.NDArray[np.int64],
) -> npt.NDArray[np.float64]:
    """Per column (CPUs, GPUs), the largest capacity over a pool's nodes (rows); zeros for
    a pool without nodes."""
    if not len(capacity):
        return np.zeros(capacity.shape[1] if capacity.ndim == 2 else 0)
    return np.asarray(capacity.max(axis=0), np.float64)


def node_equivalents(
    totals: npt.NDArray[np.float64] | npt.NDArray[np.int64], scale: npt.NDArray[np.float64]
) -> float:
    """The node-equivalents of waiting jobs: per job (a row of ``totals``: what it asks for,
    in ``scale``'s columns), its largest share of ``scale`` (the pool's largest node; a
    column it lacks, scale 0, is left out), summed. A job with no share at all counts
    :data:`NOTHING_COUNTED`."""
    keep = scale > 0
    if not len(totals) or not keep.any():
        return 0.0
    shares = (totals[:, keep] / scale[keep]).max(axis=1)
    if not shares.all():
        shares = np.where(shares > 0, shares, NOTHING_COUNTED)
    return float(shares.sum())


def demand_signal(running: Mapping[str, float], waiting: Mapping[str, float]) -> dict[str, float]:
    """Per pool (name order), what the forecasters observe: the running demand (busy nodes,
    or ``surge-room``'s work) plus the waiting jobs' node-equivalents."""
    return {
        pool: running.get(pool, 0.0) + waiting.get(pool, 0.0)
        for pool in sorted(set(running) | set(waiting))
    }
