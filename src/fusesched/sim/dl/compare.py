"""The DL protocol behind ``fusesched simulate TRACE --protocol dl``: load a Philly or ITP job
list, size its cluster, and run every named policy on it side by side."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from fusesched.policies.dl_registry import DL_POLICIES, DlPolicyError, make_dl_policy
from fusesched.sim.dl.model import DlCluster, DlJob
from fusesched.sim.dl.runner import run_dl
from fusesched.sim.dl.workloads import DEFAULT_LOAD, itp_dl_jobs, philly_dl_jobs, sized_cluster
from fusesched.traces.itp import load_itp_jobs
from fusesched.traces.philly import load_philly_jobs

DEFAULT_DL_POLICIES = "fifo,sjf-oracle,tiresias,gittins"

#: Short names (relative to ../shared): ``philly`` and ``itp-clusterNN``.
DL_TRACES = {
    "philly": "traces/philly/philly.csv",
    **{
        f"itp-cluster{n:02d}": f"traces/microsoft-itp-elasticflow/raw-traces/cluster{n:02d}.csv"
        for n in (1, 2, 3, 4, 5, 7, 8, 9, 10)
    },
}


@dataclass(frozen=True)
class DlRun:
    policy: str
    metrics: dict[str, float | int]
    extra: dict[str, Any]


def parse_dl_policies(text: str) -> list[str]:
    names = [p.strip() for p in text.split(",") if p.strip()]
    if not names:
        raise DlPolicyError("--policy needs at least one policy name")
    for name in names:
        if name not in DL_POLICIES:
            raise DlPolicyError(
                f"unknown policy {name!r} for --protocol dl; choose from: " + ", ".join(DL_POLICIES)
            )
    return names


def resolve_dl_trace(name: str, shared: Path | None) -> Path:
    path = Path(name)
    if path.exists():
        return path
    if name in DL_TRACES:
        if shared is None:
            raise FileNotFoundError(f"trace {name!r} lives in ../shared, which is absent here")
        return shared / DL_TRACES[name]
    raise FileNotFoundError(
        f"no such trace file: {name} (--protocol dl takes a Philly or ITP CSV, or one of: "
        + ", ".join(DL_TRACES)
        + ")"
    )


def load_dl_jobs(path: Path, limit: int | None = None) -> list[DlJob]:
    """A Philly job list (header ``timestamp,…``) or an ITP cluster file (``job_id,…``)."""
    try:
        with path.open(encoding="utf-8") as handle:
            header = handle.readline()
    except OSError as exc:
        raise FileNotFoundError(f"{path}: cannot read: {exc.strerror}") from None
    except UnicodeDecodeError:
        raise ValueError(f"{path}: not UTF-8 text (a Philly or ITP job list)") from None
    if header.startswith("timestamp"):
        jobs = philly_dl_jobs(load_philly_jobs(path))
    else:
        jobs = itp_dl_jobs(load_itp_jobs(path), path.stem)
    return jobs[:limit] if limit else jobs


def compare_dl(
    jobs: Sequence[DlJob],
    policies: Sequence[str],
    load: float = DEFAULT_LOAD,
    progress: Callable[[int], None] | None = None,
) -> tuple[DlCluster, list[DlRun]]:
    """Every policy over the same jobs and cluster; ratios against FIFO and ``tiresias``."""
    cluster = sized_cluster(jobs, load=load)
    durations = np.array([j.duration_s for j in jobs])
    runs = []
    for done, name in enumerate(policies):
        result = run_dl(jobs, cluster, make_dl_policy(name, durations))
        runs.append(DlRun(name, result.metrics(), {"total_gpus": cluster.total_gpus}))
        if progress is not None:
            progress(done + 1)
    by_name = {r.policy: r.metrics["avg_jct_s"] for r in runs}
    for run in runs:
        for ref in ("fifo", "tiresias"):
            if ref in by_name and run.metrics["avg_jct_s"] > 0:
                run.extra[f"{ref}_over_this"] = by_name[ref] / run.metrics["avg_jct_s"]
    return cluster, runs
