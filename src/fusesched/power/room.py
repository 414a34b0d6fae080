"""Work and free room per pool, in node-equivalents (for the ``surge-room`` policy).

A node's **share** in use is the larger of its allocated CPUs and GPUs over its capacity
(0 to 1). Per pool, the **work** is the sum of its nodes' shares (what the running jobs would
fill if packed), and the **room** is what is left free on its powered busy nodes: the sum of
1 − share over them. Idle nodes are not room: the policy counts them as its headroom.

Pure and shared: the simulator (:mod:`fusesched.sim.power`, from the allocations it tracks)
and the live controller (:mod:`fusesched.controller.power`, from the core's booked
resources) both compute the signal here, so the two count it the same way.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

import numpy as np
import numpy.typing as npt


def node_shares(
    cpu_used: npt.NDArray[np.float64],
    gpu_used: npt.NDArray[np.float64],
    cpu_cap: npt.NDArray[np.float64],
    gpu_cap: npt.NDArray[np.float64],
) -> npt.NDArray[np.float64]:
    """Each node's largest share of its CPUs or GPUs in use (a resource it lacks counts 0)."""
    cpu = np.divide(cpu_used, cpu_cap, out=np.zeros_like(cpu_used), where=cpu_cap > 0)
    gpu = np.divide(gpu_used, gpu_cap, out=np.zeros_like(gpu_used), where=gpu_cap > 0)
    return np.minimum(np.maximum(cpu, gpu), 1.0)


def work_and_room(
    shares: npt.NDArray[np.float64],
    powered: npt.NDArray[np.bool_],
    pool_rows: Mapping[str, npt.NDArray[np.int64]],
) -> tuple[dict[str, float], dict[str, float]]:
    """Per pool, (the work: its nodes' shares summed; the room: 1 − share summed over its
    powered nodes that run something)."""
    busy_room = np.where(powered & (shares > 0), 1.0 - shares, 0.0)
    work = {pool: float(shares[rows].sum()) for pool, rows in pool_rows.items()}
    room = {pool: float(busy_room[rows].sum()) for pool, rows in pool_rows.items()}
    return work, room


def rows_by_pool(pools: Sequence[str]) -> dict[str, npt.NDArray[np.int64]]:
    """Per pool (in name order), the positions of its nodes in ``pools`` (one per node)."""
    return {
        pool: np.array([i for i, p in enumerate(pools) if p == pool], np.int64)
        for pool in sorted(set(pools))
    }
