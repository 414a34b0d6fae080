"""Fair share after a restart: what reading back the usage of the runs that ended costs a
controller's start (docs/TENANCY.md, "Usage across restarts").

The issue's target: with 100,000 finished jobs within the recalled window (20 half-lives), a
controller's start is not slower by more than about a second.

1. **fill** — a SQLite (or PostgreSQL) store with ``--jobs`` jobs that ended within the
   window and ``--old`` jobs that ended before it, through ``Store.add_jobs`` (the
   controller's write path), then ``Store.optimize()``. Seeded: about 1,000 users with a
   Zipf-like spread over 6 queues; requests in the controller's stored form
   (``JobRequest.model_dump``) of a few shapes — CPU jobs, GPU jobs, gangs, a two-group job —
   each with its own argv and environment (about 500 bytes of JSON), so no two texts are
   equal; 84 % Completed, 11 % Failed, 5 % Cancelled.
2. **measure** — ``--repeats`` times, alternating: a controller started on the store with a
   tenancy policy (it reads the runs back: ``controller/past_usage.py``) and one without
   (it reads nothing); the difference is what the recall adds to a start. Then the recall's
   two parts alone: ``ended_runs`` on a freshly opened store (the read) and the core taking
   the ``UsageRecalled`` event (the charge).

Run: ``.venv/bin/python bench/fairshare_recall.py [--jobs N] [--old N] [--backend sqlite|postgres]
[--sqlite-path FILE]`` (a store kept at ``FILE`` is measured again without filling it).
"""

from __future__ import annotations

import argparse
import os
import shutil
import statistics
import sys
import tempfile
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import numpy as np
from rich.console import Console
from rich.table import Table

from fusesched.controller.logs import LogStore
from fusesched.controller.persist import Persistence
from fusesched.controller.records import ControllerConfig
from fusesched.controller.service import Controller
from fusesched.core.past_usage import recalled_since
from fusesched.core.scheduler import SchedulerCore
from fusesched.model.events import UsageRecalled
from fusesched.model.tenancy import TenancyConfig
from fusesched.policies.registry import CoreConfig
from fusesched.policies.tenancy_policy import TenancyPolicy
from fusesched.store import JobRow, JobState, Store
from fusesched.store.past_runs import ended_runs
from fusesched.submit.request import JobRequest
from machine_info import describe, machine
from store_scale import pg_scratch

console = Console()

HALF_LIFE = 7 * 86400.0
NOW = 1_800_000_000.0
WINDOW = 20 * HALF_LIFE
QUEUES = ["batch", "cpu", "gpu", "debug", "long", "infer"]
STATES = [JobState.COMPLETED, JobState.FAILED, JobState.CANCELLED]
STATE_P = [0.84, 0.11, 0.05]
# shapes: (share, groups as (replicas, resources))
SHAPES: list[tuple[float, list[tuple[int, dict[str, str]]]]] = [
    (0.45, [(1, {"cpu": "8", "memory": "32Gi"})]),
    (0.15, [(1, {"cpu": "2", "memory": "8Gi"})]),
    (0.15, [(4, {"cpu": "8", "memory": "32Gi", "nvidia.com/gpu": "2"})]),
    (0.10, [(1, {"cpu": "4", "memory": "16Gi", "nvidia.com/gpu": "1"})]),
    (0.10, [(16, {"cpu": "32", "memory": "64Gi"})]),
    (0.05, [(1, {"cpu": "2"}), (8, {"cpu": "4", "nvidia.com/gpu": "1"})]),
]


def tenancy() -> TenancyPolicy:
    queues = [
        {
            "name": q,
            "flavors": [{"name": "any", "resources": {"cpu": {"nominal": 10**6}}}],
        }
        for q in QUEUES
    ]
    config = TenancyConfig.from_dict(
        {
            "flavors": [{"name": "any", "resources": ["cpu"]}],
            "organisations": [{"name": "centre", "tenants": [{"name": "all", "queues": queues}]}],
        }
    )
    return TenancyPolicy(config, half_life_s=HALF_LIFE)


def request(seq: int, user: str, queue: str, groups: list[tuple[int, dict[str, str]]]) -> Any:
    body = {
        "name": f"job-{seq}",
        "queue": queue,
        "user": user,
        "walltime_s": 14400,
        "groups": [
            {
                "name": f"g{i}",
                "replicas": replicas,
                "resources": resources,
                "argv": [f"/home/{user}/bin/run.sh", "--input", f"/data/{seq}.in"],
                "env": {"OMP_NUM_THREADS": "8", "PROJECT": f"p{seq % 997}"},
            }
            for i, (replicas, resources) in enumerate(groups)
        ],
    }
    return JobRequest.model_validate(body).model_dump(mode="json", exclude_none=True)


def batches(jobs: int, old: int, users: int, seed: int, size: int) -> Iterator[list[JobRow]]:
    rng = np.random.default_rng(seed)
    ranks = np.arange(1, users + 1, dtype=np.float64)
    weights = 1.0 / ranks**1.07
    weights /= weights.sum()
    shape_p = np.array([s[0] for s in SHAPES])
    total = jobs + old
    seq = 0
    while seq < total:
        n = min(size, total - seq)
        who = rng.choice(users, size=n, p=weights)
        shapes = rng.choice(len(SHAPES), size=n, p=shape_p / shape_p.sum())
        states = rng.choice(3, size=n, p=STATE_P)
        runs = rng.lognormal(7.5, 1.5, size=n)
        rows = []
        for i in range(n):
            seq += 1
            # the old ones end before the window, the others within it, oldest first
            if seq <= old:
                end = NOW - WINDOW - (old - seq + 1) * 60.0
            else:
                end = NOW - WINDOW + WINDOW * (seq - old) / (jobs + 1)
            user = f"user{int(who[i]):04d}"
            queue = QUEUES[seq % len(QUEUES)]
            state = STATES[states[i]]
            rows.append(
                JobRow(
                    id=str(seq),
                    seq=seq,
                    user=user,
                    state=state,
                    phase=state.value.lower(),
                    submit_time=end - runs[i] - 60.0,
                    request=request(seq, user, queue, SHAPES[shapes[i]][1]),
                    name=f"job-{seq}",
                    tenant="all",
                    queue=queue,
                    start_time=end - runs[i],
                    end_time=end,
                    nodes=(f"n{seq % 5000:05d}",),
                    exit_code=0 if state is JobState.COMPLETED else 1,
                )
            )
        yield rows


def timed(call: Callable[[], Any]) -> tuple[Any, tuple[float, float]]:
    """What ``call`` returns, and its wall and CPU seconds (the CPU time leaves out what
    other work on a shared machine took from it)."""
    t0, c0 = time.perf_counter(), time.process_time()
    result = call()
    return result, (time.perf_counter() - t0, time.process_time() - c0)


def start(url: str, logs: Path, policy: TenancyPolicy | None) -> None:
    """A controller starting on the store (then closed)."""
    config = ControllerConfig(core=CoreConfig(tenancy=policy))
    ctl = Controller(Persistence(url), LogStore(logs), config, clock=lambda: NOW)
    ctl.persist.close()


def measure(url: str, logs: Path, repeats: int) -> dict[str, list[tuple[float, float]]]:
    policy = tenancy()
    out: dict[str, list[tuple[float, float]]] = {
        "with": [],
        "without": [],
        "read": [],
        "charge": [],
    }
    since = recalled_since(HALF_LIFE, NOW)
    runs: list[Any] = []
    for _ in range(repeats):
        out["without"].append(timed(lambda: start(url, logs, None))[1])
        out["with"].append(timed(lambda: start(url, logs, policy))[1])
        with Store(url, migrate=False) as store:
            runs, took = timed(lambda s=store: ended_runs(s, since))
        out["read"].append(took)
        core = SchedulerCore(CoreConfig(tenancy=policy))
        event = UsageRecalled(tuple(runs))
        out["charge"].append(timed(lambda c=core, e=event: c.handle(e, NOW))[1])
    counted = sum(len(r.spans) for r in runs)
    console.print(f"runs read back: {counted:,} in {len(runs):,} groups (account × shape)")
    return out


def fill(url: str, args: argparse.Namespace) -> None:
    with Store(url) as store:
        t0 = time.perf_counter()
        for rows in batches(args.jobs, args.old, args.users, args.seed, 10_000):
            store.add_jobs(rows)
        store.optimize()
        console.print(
            f"filled {args.jobs:,} jobs in the window and {args.old:,} before it "
            f"in {time.perf_counter() - t0:.0f} s"
        )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--jobs", type=int, default=100_000, help="ended within the window")
    parser.add_argument("--old", type=int, default=400_000, help="ended before the window")
    parser.add_argument("--users", type=int, default=1_000)
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--seed", type=int, default=2026)
    parser.add_argument("--backend", choices=["sqlite", "postgres"], default="sqlite")
    parser.add_argument(
        "--pg-url",
        default=os.environ.get(
            "FUSESCHED_BENCH_PG_URL", "postgresql+psycopg://postgres@127.0.0.1:5432/test"
        ),
    )
    parser.add_argument(
        "--sqlite-path", help="keep the SQLite store here; one already there is measured as it is"
    )
    args = parser.parse_args()
    console.print(describe(machine()))
    console.print(f"command: {' '.join(sys.argv)}")
    folder = Path(tempfile.mkdtemp(prefix="fusesched-bench-"))
    drop: Callable[[], None] = lambda: None  # noqa: E731
    try:
        kept = Path(args.sqlite_path) if args.sqlite_path else None
        if args.backend == "postgres":
            url, drop = pg_scratch(args.pg_url)
        else:
            url = f"sqlite:///{kept or folder / 'fusesched.db'}"
        if kept is None or not kept.exists():
            fill(url, args)
        found = measure(url, folder / "logs", args.repeats)
    finally:
        drop()
        shutil.rmtree(folder, ignore_errors=True)
    table = Table(title=f"{args.backend}: seconds over {args.repeats} runs (wall, and CPU)")
    for column in ("what", "wall median", "wall min", "wall max", "CPU median", "CPU min"):
        table.add_column(column, justify="left" if column == "what" else "right")
    added = [
        (w[0] - wo[0], w[1] - wo[1]) for w, wo in zip(found["with"], found["without"], strict=True)
    ]
    rows: list[tuple[str, list[tuple[float, float]]]] = [
        ("controller start, with tenancy (recall)", found["with"]),
        ("controller start, without tenancy", found["without"]),
        ("what the recall adds to a start", added),
        ("  ended_runs (read, fresh store)", found["read"]),
        ("  core takes UsageRecalled (charge)", found["charge"]),
    ]
    for name, values in rows:
        wall, cpu = [v[0] for v in values], [v[1] for v in values]
        cells = [statistics.median(wall), min(wall), max(wall), statistics.median(cpu), min(cpu)]
        table.add_row(name, *(f"{v:.3f}" for v in cells))
    console.print(table)
    console.print(f"load average after: {os.getloadavg()[0]:.2f}")


if __name__ == "__main__":
    main()
