"""The twin against the real thing: a workload of real processes on three real agents, then a
snapshot of the store, replayed in the twin; per-job start times and overall metrics must be
close to what happened (docs/TWIN.md has the measured figures).

Set ``FUSESCHED_TWIN_VALIDATION_OUT`` to a file name to keep the snapshot beside it
(``<name>.json.gz``) and the figures (``<name>``, JSON).
"""

from __future__ import annotations

import json
import os
import time
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from fusesched.cli.local import LocalCluster
from fusesched.policies.registry import CoreConfig
from fusesched.sdk import Client
from fusesched.store.store import Store
from fusesched.twin.runner import TwinResult
from fusesched.twin.snapshot import Snapshot, save, take_snapshot
from fusesched.twin.validate import Validation, markdown, validate

from .conftest import local_cluster

# the twin's waits are compared with those measured here: a concurrent test would upset
# them; run alone, after the others (Makefile)
pytestmark = pytest.mark.serial

JOBS = 36


def workload(seed: int) -> list[tuple[float, dict[str, Any]]]:
    """(gap before submitting, request): short sleeps of 1–2 CPUs, some GPU jobs, bursts."""
    rng = np.random.default_rng(seed)
    out = []
    for i in range(JOBS):
        gap = float(rng.choice([0.0, 0.05, 0.1, 0.3]))
        seconds = float(rng.choice([0.6, 1.0, 1.5, 2.0]))
        resources: dict[str, Any] = {"cpu": str(int(rng.integers(1, 3))), "memory": "64Mi"}
        if i % 4 == 0:
            resources["nvidia.com/gpu"] = "1"
        request = {
            "name": f"v{i}",
            "walltime_s": 30,
            "tenant": "research" if i % 4 == 0 else "ops",
            "queue": "gpu" if i % 4 == 0 else "cpu",
            "groups": [{"resources": resources, "argv": ["sleep", f"{seconds:g}"]}],
        }
        out.append((gap, request))
    return out


def _attempt(cluster: LocalCluster) -> tuple[Validation, TwinResult, TwinResult, str]:
    """Run the workload on ``cluster``, replay its snapshot: (validation, live, twin, report)."""
    client = Client(cluster.url)
    started = time.monotonic()
    ids = []
    for gap, request in workload(7):
        time.sleep(gap)
        ids.append(client.submit(request))
    for job_id in ids:
        assert client.wait(job_id, timeout=60)["state"] == "Completed"
    live_s = time.monotonic() - started
    with Store(cluster.server.db_url, migrate=False) as store:
        snap = take_snapshot(store, CoreConfig(placement="best-fit"), source="live test")
    assert len(snap.jobs) == JOBS and len(snap.nodes) == 3

    result, live, twin = validate(snap)
    text = f"live run {live_s:.1f} s, load {os.getloadavg()[0]:.2f}\n{markdown(result)}"
    text += "\n" + _worst(snap, live, twin)
    out = os.environ.get("FUSESCHED_TWIN_VALIDATION_OUT")
    if out:
        save(snap, Path(out + ".json.gz"))
        Path(out).write_text(json.dumps({"live_run_s": live_s, **result.as_dict()}, indent=1))
    return result, live, twin, text


def _worst(snap: Snapshot, live: TwinResult, twin: TwinResult, count: int = 6) -> str:
    """The jobs whose start the twin missed most: what a failure needs to be understood."""
    jobs = {j.id: j for j in snap.jobs}
    common = sorted(set(live.starts) & set(twin.starts))
    common.sort(key=lambda j: -abs(twin.starts[j] - live.starts[j]))
    lines = ["Worst starts (seconds from the first submission):", ""]
    lines.append("| job | submit | live start | twin start | run time | resources |")
    lines.append("|---|---:|---:|---:|---:|---|")
    t0 = min(j.submit for j in snap.jobs)
    for job_id in common[:count]:
        job = jobs[job_id]
        resources = job.request["groups"][0]["resources"]
        lines.append(
            f"| {job.request.get('name', job_id)} | {job.submit - t0:.3f} "
            f"| {live.starts[job_id] - t0:.3f} | {twin.starts[job_id] - t0:.3f} "
            f"| {job.runtime or 0:.3f} | {resources} |"
        )
    return "\n".join(lines)


def _close(result: Validation) -> bool:
    """The goals (docs/TWIN.md: per-job start error under 5 % of the mean wait, aggregates
    within 2 %), asserted with headroom against a loaded test machine."""
    return result.start_error_share < 0.10 and all(
        result.aggregates[name][2] < 0.05
        for name in ("avg_wait_s", "avg_response_s", "utilization", "makespan_s")
    )


def test_the_twin_replays_a_live_run_closely(cluster: LocalCluster, tmp_path: Path) -> None:
    result, live, twin, text = _attempt(cluster)
    print(f"\n{text}")
    if not _close(result):
        # one live run disturbed by the machine (a delayed agent report on a loaded CI
        # machine reorders two endings, and best-fit places the rest differently) gets one
        # more run on a fresh cluster; a twin that is wrong misses both
        with local_cluster(tmp_path / "again") as again:
            result, live, twin, second = _attempt(again)
        print(f"\nsecond run\n{second}")
        text = f"first run\n{text}\n\nsecond run\n{second}"

    assert result.jobs == JOBS
    assert live.overall["avg_wait_s"] > 1.0  # the workload queued: waits worth comparing
    assert _close(result), text
    assert twin.overall["jobs"] == live.overall["jobs"]
