"""Store scale: answer times with a real centre's history in the store.

The issue's target: with 1,000,000 finished jobs stored (SQLite and PostgreSQL), listing one
user's recent jobs and showing one job each answer in **under 1 s**.

1. **fill** — ``--jobs`` finished jobs (default 1,000,000) through ``Store.add_jobs`` and
   ``Store.add_tasks`` in batches of ``--batch`` (the controller's own write path, not a
   special loader), then ``Store.optimize()`` (planner statistics; the controller runs it
   periodically). The workload is seeded: about 1,000 users with a Zipf-like spread (a few
   heavy users, a long tail), 20 tenants, 6 queues, the five job types with their own task
   counts (HPC gangs of 2–64 tasks, mostly small; training 2–16; the rest one:
   about 3 tasks per job on average), 3 % array members, 84 %
   Completed / 11 % Failed / 5 % Cancelled, submit times spread over two years, and a realistic
   submitted request (about 400 bytes of JSON) per job.
2. **query** — on a freshly opened ``Store`` (new connections, nothing cached by the store;
   the operating system's page cache is left alone, the machine is shared), each query runs
   once per sample (*cold*: first time those rows are read through this store) and then three
   more times (*warm*). Samples: ``--samples`` random users (uniform over users, so tail users
   and heavy users both appear) and random job ids (uniform over all jobs).

Queries timed: ``get_job(id)`` (the job and its tasks), ``list_jobs(users=[U], limit=50)``,
``list_jobs(users=[U], states=["Failed"], limit=50)``, the second page of a user's jobs
(``before_seq``), and ``count_jobs_by_state()`` (a full-table aggregate, for scale).

Run: ``.venv/bin/python bench/store_scale.py [--jobs N] [--backend sqlite|postgres|both]``.
SQLite writes a file under a temporary folder and deletes it afterwards (``--sqlite-path``
keeps it); PostgreSQL creates a scratch database on ``--pg-url``'s server and drops it
(``--keep`` keeps both).
"""

from __future__ import annotations

import argparse
import os
import random
import shutil
import signal
import statistics
import sys
import tempfile
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn
from rich.table import Table
from sqlalchemy import create_engine, make_url, text

from fusesched.store import JobRow, JobState, Store, TaskRow
from fusesched.store.job_filters import JobFilters
from machine_info import describe, machine

console = Console()

TWO_YEARS = 2 * 365 * 86400.0
START = 1_700_000_000.0
QUEUES = ["batch", "cpu", "gpu", "debug", "long", "infer"]
# type, share, (task counts, their probabilities), queue choices
TYPES = [
    ("batch", 0.45, ([1], [1.0]), ["batch", "cpu", "debug"]),
    ("hpc", 0.20, ([2, 4, 8, 16, 32, 64], [0.4, 0.25, 0.15, 0.1, 0.06, 0.04]), ["cpu", "long"]),
    ("ai-train", 0.15, ([2, 4, 8, 16], [0.5, 0.3, 0.15, 0.05]), ["gpu", "long"]),
    ("ai-infer", 0.12, ([1], [1.0]), ["infer", "gpu"]),
    ("service", 0.08, ([1], [1.0]), ["infer", "cpu"]),
]
STATES = [JobState.COMPLETED, JobState.FAILED, JobState.CANCELLED]
STATE_P = [0.84, 0.11, 0.05]


# --------------------------------------------------------------------------- workload


@dataclass(frozen=True)
class Workload:
    jobs: int
    users: int
    seed: int

    def user_weights(self) -> np.ndarray[Any, np.dtype[np.float64]]:
        ranks = np.arange(1, self.users + 1, dtype=np.float64)
        weights = 1.0 / ranks**1.07
        return weights / weights.sum()

    def batches(self, size: int) -> Iterator[tuple[list[JobRow], list[TaskRow]]]:
        """``size`` jobs at a time (the last batch may be smaller), with their tasks."""
        rng = np.random.default_rng(self.seed)
        weights = self.user_weights()
        type_p = np.array([t[1] for t in TYPES])
        seq = 0
        array_left = 0
        array_parent = ""
        while seq < self.jobs:
            n = min(size, self.jobs - seq)
            users = rng.choice(self.users, size=n, p=weights)
            kinds = rng.choice(len(TYPES), size=n, p=type_p / type_p.sum())
            states = rng.choice(3, size=n, p=STATE_P)
            waits = rng.exponential(600.0, size=n)
            runs = rng.lognormal(7.5, 1.5, size=n)
            starts_array = rng.random(n) < 0.002
            jobs: list[JobRow] = []
            tasks: list[TaskRow] = []
            for i in range(n):
                seq += 1
                kind, _, (sizes, size_p), queues = TYPES[kinds[i]]
                job_id = str(seq)
                parent = None
                if array_left > 0:
                    array_left -= 1
                    job_id, parent = f"{array_parent}_{15 - array_left}", array_parent
                elif starts_array[i]:
                    array_left, array_parent = 15, job_id  # this job and 15 members
                submit = START + TWO_YEARS * seq / self.jobs
                state = STATES[states[i]]
                started = state is not JobState.CANCELLED or rng.random() < 0.5
                start = submit + waits[i] if started else None
                end = (start if start is not None else submit) + (runs[i] if started else 30.0)
                count = sizes[0] if len(sizes) == 1 else int(rng.choice(sizes, p=size_p))
                nodes = [f"n{int(x):05d}" for x in rng.integers(0, 5000, size=max(1, count // 4))]
                exit_code = {JobState.COMPLETED: 0, JobState.FAILED: 1}.get(state)
                user = f"user{int(users[i]):04d}"
                jobs.append(
                    JobRow(
                        id=job_id,
                        seq=seq,
                        user=user,
                        state=state,
                        phase=state.value.lower(),
                        submit_time=submit,
                        request=_request(job_id, kind, count, queues[seq % len(queues)], user),
                        name=f"{kind}-{seq % 9973}",
                        tenant=f"tenant{int(users[i]) % 20:02d}",
                        queue=queues[seq % len(queues)],
                        type=kind,
                        reason="" if state is JobState.COMPLETED else "exit code 1",
                        exit_code=exit_code if started else None,
                        priority=int(users[i]) % 5,
                        start_time=start,
                        end_time=end,
                        nodes=tuple(nodes) if started else (),
                        array_parent=parent,
                    )
                )
                group = "main" if count == 1 else "rank"
                for t in range(count):
                    tasks.append(
                        TaskRow(
                            task_id=f"{job_id}.{group}.{t}",
                            job_id=job_id,
                            group=group,
                            index=t,
                            state=state,
                            node=nodes[t % len(nodes)] if started else None,
                            exit_code=exit_code if started else None,
                            pid=10_000 + t if started else None,
                            start_time=start,
                            end_time=end,
                            devices=("GPU-0", "GPU-1") if kind.startswith("ai") else (),
                            log_path=f"/var/lib/fusesched/logs/{job_id}/{group}.{t}.log",
                        )
                    )
            yield jobs, tasks


def _request(job_id: str, kind: str, count: int, queue: str, user: str) -> dict[str, Any]:
    resources = {"cpu": "8", "memory": "32Gi"}
    if kind.startswith("ai"):
        resources["nvidia.com/gpu"] = "2"
    return {
        "name": f"{kind}-{job_id}",
        "type": kind,
        "queue": queue,
        "user": user,
        "walltime_s": 86400 if kind == "service" else 14400,
        "tasks": [
            {
                "group": "main" if count == 1 else "rank",
                "count": count,
                "resources": resources,
                "command": ["/home/" + user + "/bin/run.sh", "--input", f"/data/{job_id}.in"],
                "env": {"OMP_NUM_THREADS": "8", "PROJECT": "p" + job_id[-3:]},
            }
        ],
        "placement": {"spread": count > 1, "selector": {"fusesched.io/pool": queue}},
    }


# --------------------------------------------------------------------------- backends


def sqlite_url(path: Path) -> str:
    return f"sqlite:///{path}"


def pg_scratch(server: str) -> tuple[str, Callable[[], None]]:
    """A fresh database on ``server``; returns its URL and a function that drops it."""
    name = f"fusesched_bench_{os.getpid()}"
    admin = create_engine(server, isolation_level="AUTOCOMMIT")
    with admin.connect() as conn:
        conn.execute(text(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)'))
        conn.execute(text(f'CREATE DATABASE "{name}"'))

    def drop() -> None:
        with admin.connect() as conn:
            conn.execute(text(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)'))
        admin.dispose()

    return make_url(server).set(database=name).render_as_string(hide_password=False), drop


def db_size(url: str, sqlite_path: Path | None) -> int:
    if sqlite_path is not None:
        return sum(p.stat().st_size for p in sqlite_path.parent.glob(sqlite_path.name + "*"))
    engine = create_engine(url)
    with engine.connect() as conn:
        size = conn.execute(text("SELECT pg_database_size(current_database())")).scalar_one()
    engine.dispose()
    return int(size)


# --------------------------------------------------------------------------- measuring


@dataclass
class Timing:
    query: str
    cold: list[float]
    warm: list[float]


def fill(
    store: Store, workload: Workload, batch: int, sample_seqs: set[int]
) -> tuple[float, int, list[str]]:
    """Fill the store. Returns the seconds it took (generating the workload excluded), the
    tasks added and the ids of the jobs numbered ``sample_seqs``."""
    spent = 0.0
    sample_ids: list[str] = []
    task_count = 0
    columns = (TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn())
    with Progress(*columns, TimeElapsedColumn(), console=console) as progress:
        bar = progress.add_task("filling", total=workload.jobs)
        for jobs, tasks in workload.batches(batch):
            t0 = time.perf_counter()
            store.add_jobs(jobs)
            store.add_tasks(tasks)
            spent += time.perf_counter() - t0
            task_count += len(tasks)
            sample_ids.extend(j.id for j in jobs if j.seq in sample_seqs)
            progress.update(bar, advance=len(jobs))
    return spent, task_count, sample_ids


def measure(url: str, users: list[str], job_ids: list[str], repeats: int = 3) -> list[Timing]:
    with Store(url, migrate=False) as store:
        queries: list[tuple[str, list[Callable[[], object]]]] = [
            ("get_job(id)", [lambda i=i: store.get_job(i) for i in job_ids]),
            (
                "list_jobs(user, limit=50)",
                [lambda u=u: store.list_jobs(JobFilters(users=[u])) for u in users],
            ),
            (
                "list_jobs(user, Failed)",
                [
                    lambda u=u: store.list_jobs(JobFilters(users=[u], states=["Failed"]))
                    for u in users
                ],
            ),
            ("list_jobs(user) page 2", [lambda u=u: _second_page(store, u) for u in users]),
            ("count_jobs_by_state()", [store.count_jobs_by_state] * 5),
        ]
        timings = []
        for name, calls in queries:
            cold = [_timed(call) for call in calls]
            warm = [min(_timed(call) for _ in range(repeats)) for call in calls]
            timings.append(Timing(name, cold, warm))
        return timings


def _second_page(store: Store, user: str) -> object:
    mine = JobFilters(users=[user])
    first = store.list_jobs(mine, limit=50)
    return store.list_jobs(mine, limit=50, before_seq=first[-1].seq) if first else []


def _timed(call: Callable[[], object]) -> float:
    t0 = time.perf_counter()
    call()
    return time.perf_counter() - t0


def run_backend(backend: str, args: argparse.Namespace, workload: Workload) -> dict[str, Any]:
    console.rule(f"[bold]{backend}")
    cleanup: Callable[[], None] = lambda: None  # noqa: E731
    sqlite_path: Path | None = None
    if backend == "sqlite":
        if args.sqlite_path:
            sqlite_path = Path(args.sqlite_path)
            if sqlite_path.exists():
                sys.exit(f"{sqlite_path} exists; the benchmark needs an empty store")
        else:
            folder = Path(tempfile.mkdtemp(prefix="fusesched-bench-"))
            sqlite_path = folder / "fusesched.db"
            cleanup = lambda: shutil.rmtree(folder, ignore_errors=True)  # noqa: E731
        url = sqlite_url(sqlite_path)
    else:
        url, cleanup = pg_scratch(args.pg_url)
    try:
        rng = random.Random(args.seed + 1)
        sample_seqs = set(rng.sample(range(1, workload.jobs + 1), args.samples))
        users = ["user0000"]  # the heaviest user, then uniformly over all users
        users += [f"user{rng.randrange(workload.users):04d}" for _ in range(args.samples - 1)]
        with Store(url) as store:
            fill_s, task_count, job_ids = fill(store, workload, args.batch, sample_seqs)
            t0 = time.perf_counter()
            store.optimize()
            optimize_s = time.perf_counter() - t0
            counts = store.count_jobs_by_state()
        timings = measure(url, users, job_ids)
        size = db_size(url, sqlite_path)
    finally:
        if args.keep:
            console.print(f"kept the store at {url}")
        else:
            cleanup()
    console.print(
        f"filled {workload.jobs:,} jobs and {task_count:,} tasks in {fill_s:.1f} s "
        f"({workload.jobs / fill_s:,.0f} jobs/s, {task_count / fill_s:,.0f} tasks/s), "
        f"optimize {optimize_s:.1f} s, size {size / 2**20:,.0f} MiB; "
        f"states {', '.join(f'{k.value} {v:,}' for k, v in counts.items() if v)}"
    )
    return {"backend": backend, "fill_s": fill_s, "tasks": task_count, "timings": timings}


def report(results: list[dict[str, Any]]) -> None:
    table = Table(title="answer times, milliseconds (target: < 1000 ms)")
    for column in ("backend", "query", "n", "cold median", "cold max", "warm median", "warm max"):
        table.add_column(column, justify="left" if column in ("backend", "query") else "right")
    for result in results:
        for t in result["timings"]:
            table.add_row(
                result["backend"],
                t.query,
                str(len(t.cold)),
                *(
                    f"{1000 * f(xs):.2f}"
                    for xs in (t.cold, t.warm)
                    for f in (statistics.median, max)
                ),
            )
    console.print(table)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--jobs", type=int, default=1_000_000)
    parser.add_argument("--users", type=int, default=1_000)
    parser.add_argument("--backend", choices=["sqlite", "postgres", "both"], default="both")
    parser.add_argument("--batch", type=int, default=10_000, help="jobs per add_jobs call")
    parser.add_argument("--samples", type=int, default=50)
    parser.add_argument("--seed", type=int, default=2026)
    parser.add_argument(
        "--pg-url",
        default=os.environ.get(
            "FUSESCHED_BENCH_PG_URL", "postgresql+psycopg://postgres@127.0.0.1:5432/test"
        ),
        help="a server (and a database to connect to) where a scratch database may be created",
    )
    parser.add_argument("--sqlite-path", help="write the SQLite store here and keep it")
    parser.add_argument("--keep", action="store_true", help="keep the stores afterwards")
    args = parser.parse_args()
    # A stopped run still deletes its scratch stores (the ``finally`` in run_backend).
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))
    console.print(describe(machine()))
    console.print(f"command: {' '.join(sys.argv)}")
    workload = Workload(args.jobs, args.users, args.seed)
    backends = ["sqlite", "postgres"] if args.backend == "both" else [args.backend]
    report([run_backend(b, args, workload) for b in backends])


if __name__ == "__main__":
    main()
