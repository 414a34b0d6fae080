"""DL workloads from the Philly and ITP traces, and the rule that sizes their clusters.

Neither trace says how many GPUs served it (Philly's processed job list lost the placement;
ITP's SOURCE.md: "does not state the number of GPUs/nodes"), so the protocol sizes the cluster
from the offered load: ``nodes = ceil(offered GPUs / (load × GPUs per node))``, with offered
GPUs = the jobs' total GPU-seconds divided by the span of their submit times, and at least
enough nodes for the largest job. Default ``load`` 0.8, 8 GPUs per node.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

from fusesched.sim.dl.model import DlCluster, DlJob
from fusesched.traces.itp import ItpJob
from fusesched.traces.philly import PhillyJob

DAY = 86400.0
DEFAULT_LOAD = 0.8


def philly_dl_jobs(
    jobs: Sequence[PhillyJob], window_days: tuple[float, float] | None = None
) -> list[DlJob]:
    """Philly jobs submitted in ``[start, end)`` days from the first submission (all if None),
    submit times rebased to the window's first job."""
    picked = [
        j
        for j in jobs
        if window_days is None or window_days[0] * DAY <= j.submit_s < window_days[1] * DAY
    ]
    if not picked:
        raise ValueError(f"no Philly jobs in the window {window_days} (days)")
    base = picked[0].submit_s
    return [
        DlJob(f"philly-{j.line}", j.submit_s - base, j.duration_s, j.gpus, j.vc) for j in picked
    ]


def itp_dl_jobs(jobs: Sequence[ItpJob], cluster: str) -> list[DlJob]:
    if not jobs:
        raise ValueError(f"ITP {cluster}: no jobs")
    base = jobs[0].submit_s
    return [DlJob(j.job_id, j.submit_s - base, j.duration_s, j.gpus, cluster) for j in jobs]


def offered_gpus(jobs: Sequence[DlJob]) -> float:
    """Mean GPUs the jobs ask for over the span of their submissions."""
    span = max(j.submit_s for j in jobs) - min(j.submit_s for j in jobs)
    work = sum(j.duration_s * j.gpus for j in jobs)
    return work / span if span > 0 else float(max(j.gpus for j in jobs))


def sized_cluster(
    jobs: Sequence[DlJob], load: float = DEFAULT_LOAD, gpus_per_node: int = 8, **costs: float
) -> DlCluster:
    """A cluster on which the jobs' offered load is ``load`` (see the module text)."""
    if not 0 < load <= 1.5:
        raise ValueError("load must be in (0, 1.5]")
    need = math.ceil(offered_gpus(jobs) / (load * gpus_per_node))
    largest = math.ceil(max(j.gpus for j in jobs) / gpus_per_node)
    return DlCluster(nodes=max(need, largest, 1), gpus_per_node=gpus_per_node, **costs)
