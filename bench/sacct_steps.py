"""What ``fusesched sacct``'s job steps cost: ``GET /v1/jobs`` with every task (``detail=true``)
against steps summarised by the controller (``steps=true``), and sacct over all the jobs.

A controller in process (its API through FastAPI's test client, no network) on a SQLite store
of ``--jobs`` ended batch jobs of ``--tasks`` tasks each (the script and ``srun`` steps of 3
ranks' worth), and one job of ``--big`` tasks. Prints, for a page of 1,000 jobs and for the big
job alone, each answer's time and size and the peak memory of making it; then sacct's time,
bytes read and peak memory over all the jobs (``-a -P``, its steps shown). With an older
controller's answers (no ``steps``) sacct reads ``detail=true``: ``--older`` measures that.

    .venv/bin/python bench/sacct_steps.py
    .venv/bin/python bench/sacct_steps.py --older --out older.txt   # the same lines
"""

from __future__ import annotations

import argparse
import contextlib
import io
import tempfile
import time
import tracemalloc
from collections.abc import Callable
from pathlib import Path
from typing import Any

from fastapi.testclient import TestClient

from fusesched.api.app import create_app
from fusesched.cli import sacct as sacct_cli
from fusesched.controller.logs import LogStore
from fusesched.controller.persist import Persistence
from fusesched.controller.service import Controller
from fusesched.sdk import Client
from fusesched.store import JobRow, JobState, Store, TaskRow

T0 = 1_700_000_000.0
FORMAT = "JobID,JobName,State,ExitCode,Start,End,NodeList,NNodes,AllocCPUS,Elapsed"


def fill(store: Store, jobs: int, per: int, big: int) -> None:
    """``jobs`` jobs of ``per`` tasks, then one of ``big``; every tenth requeued once."""
    rows: list[JobRow] = []
    tasks: list[TaskRow] = []
    for seq in range(1, jobs + 2):
        count, start, job_id = big if seq == jobs + 1 else per, T0 + seq, str(seq)
        group = {"script": "#!/bin/sh\n", "count": 2, "resources": {"cpu": "2"}}
        rows.append(
            JobRow(
                id=job_id,
                seq=seq,
                user="alice",
                name=f"job{seq}",
                state=JobState.COMPLETED,
                phase="completed",
                submit_time=start - 5,
                start_time=start,
                end_time=start + 100,
                exit_code=0,
                nodes=("n0",),
                request={"name": f"job{seq}", "groups": [group]},
            )
        )

        def add(group: str, index: int, job_id: str = job_id, **fields: Any) -> None:
            task_id = f"{job_id}.{group}.{index}"
            state = JobState.COMPLETED
            tasks.append(TaskRow(task_id, job_id, group, index, state, **fields))

        add("main", 0, node="n0", start_time=start, end_time=start + 100, exit_code=0)
        if seq % 10 == 0:  # an earlier run: not shown
            add("main", 1, node="n0", start_time=start - 3, end_time=start - 2, exit_code=-15)
        for i in range(1, count):
            add(
                "remote",
                i,
                node=f"n{i % 4}",
                start_time=start + 1 + i % 7,
                end_time=start + 50 + i % 11,
                exit_code=3 if i % 997 == 0 else 0,
                step_id=i % 3,
                step_tasks=(count - 1) // 3 + 1,
                step_name=f"s{i % 3}",
                cpu_seconds=0.5,
                max_rss_bytes=100 * i,
            )
    store.add_jobs(rows)
    store.add_tasks(tasks)


class InProcess(Client):
    """The SDK's calls answered by the app in process; ``older``: as a controller older than
    step summaries (no ``steps`` in its views)."""

    def __init__(self, client: TestClient, older: bool) -> None:
        super().__init__("http://bench")
        self.client, self.older, self.read = client, older, 0

    def _call(self, method: str, path: str, body: Any = None, raw: bool = False) -> Any:
        answer = self.client.request(method, path, json=body)
        answer.raise_for_status()
        self.read += len(answer.content)
        found = answer.json()
        if self.older and path.startswith("/v1/jobs?"):
            for job in found:
                job.pop("steps", None)
        return found


def measured(run: Callable[[], Any], repeat: int = 3) -> tuple[float, float, Any]:
    """Seconds (the best of ``repeat`` runs after a first, untraced) and peak MB (one more,
    traced) of ``run``."""
    result = run()
    seconds = float("inf")
    for _ in range(repeat):
        start = time.perf_counter()
        result = run()
        seconds = min(seconds, time.perf_counter() - start)
    tracemalloc.start()
    run()
    peak = tracemalloc.get_traced_memory()[1] / 1e6
    tracemalloc.stop()
    return seconds, peak, result


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--jobs", type=int, default=2000)
    parser.add_argument("--tasks", type=int, default=5)
    parser.add_argument("--big", type=int, default=5000)
    parser.add_argument("--older", action="store_true", help="sacct against an older controller")
    parser.add_argument("--out", type=Path, help="write sacct's output here")
    args = parser.parse_args()
    folder = Path(tempfile.mkdtemp())
    controller = Controller(Persistence(f"sqlite:///{folder / 'db.sqlite'}"), LogStore(folder))
    fill(controller.persist.store, args.jobs, args.tasks, args.big)
    client = TestClient(create_app(controller))
    big = args.jobs + 1
    for query in (
        "limit=1000&since=0&detail=true",
        "limit=1000&since=0&steps=true",
        f"id={big}&detail=true",
        f"id={big}&steps=true",
    ):
        seconds, peak, answer = measured(lambda q=query: client.get(f"/v1/jobs?{q}"))
        print(
            f"GET /v1/jobs?{query}: {seconds:.2f} s, {len(answer.content):,} bytes, {peak:.0f} MB"
        )
    via = InProcess(client, args.older)
    sacct_cli._client = lambda *_: via  # type: ignore[assignment]

    def sacct() -> str:
        out = io.StringIO()
        via.read = 0
        with contextlib.redirect_stdout(out):
            sacct_cli.sacct(
                "2020-01-01", None, None, True, None, None, None, None, None, FORMAT,
                False, True, False, False, None, False, None, None, None,
            )  # fmt: skip
        return out.getvalue()

    seconds, peak, text = measured(sacct)
    print(
        f"fusesched sacct -a -P ({'older' if args.older else 'steps'}): {seconds:.2f} s, "
        f"{via.read:,} bytes read, {peak:.0f} MB, {text.count(chr(10))} lines"
    )
    if args.out:
        args.out.write_text(text)
    controller.persist.close()


if __name__ == "__main__":
    main()
