"""The twin on a real trace: one week of the Microsoft Philly GPU cluster as a snapshot, three
what-if scenarios side by side, and a capacity plan (docs/TWIN.md, docs/twin_example/).

The snapshot is built from the trace (it is not a live cluster's): each job becomes a
request of its GPUs (split into tasks of at most one node's GPUs, 4 CPUs and 16 GiB per
GPU), in the queue and tenant of its virtual cluster, with its real run time. The cluster is
``--nodes`` nodes of 8 GPUs, 8 to a rack. The processed trace does not say which GPU model
ran a job; the nodes carry the model label ``P100`` so that a plan can name them.

    .venv/bin/python bench/twin_philly.py --out docs/twin_example

The snapshot file is written to a temporary folder (the trace is never copied into the
project).
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
import time
from pathlib import Path

import yaml

from fusesched.traces.philly import load_philly_jobs, task_shape
from fusesched.twin.capacity import Question, run_question
from fusesched.twin.parallel import Task, default_workers, run_all
from fusesched.twin.report import capacity_markdown, write_capacity, write_compare
from fusesched.twin.scenario import parse_scenario
from fusesched.twin.snapshot import SnapJob, SnapNode, Snapshot, save
from machine_info import describe
from machine_info import machine as machine_info

TRACE = Path(__file__).resolve().parents[2] / "shared" / "traces" / "philly" / "philly.csv"
DAY = 86400.0
GPUS_PER_NODE = 8
MODEL = "P100"


def philly_snapshot(trace: Path, start_day: float, days: float, nodes: int) -> Snapshot:
    lo, hi = start_day * DAY, (start_day + days) * DAY
    jobs = []
    for i, job in enumerate(j for j in load_philly_jobs(trace) if lo <= j.submit_s < hi):
        tasks, per = task_shape(job.gpus, GPUS_PER_NODE)
        request = {
            "name": f"philly-{job.line}",
            "tenant": job.vc,
            "queue": job.vc,
            "user": job.vc,
            "groups": [
                {
                    "replicas": tasks,
                    "resources": {"cpu": 4 * per, "memory": f"{16 * per}Gi", "gpu": per},
                    "argv": ["train"],
                }
            ],
        }
        submit = job.submit_s - lo
        jobs.append(
            SnapJob(
                id=str(i + 1),
                seq=i + 1,
                submit=submit,
                start=submit,  # the trace has no start times: only the run time is replayed
                end=submit + job.duration_s,
                state="Completed",
                exit_code=0,
                queue=job.vc,
                tenant=job.vc,
                user=job.vc,
                request=request,
            )
        )
    node_list = [
        SnapNode(
            name=f"gpu-{k + 1:03d}",
            capacity={"cpu": "32", "memory": "256Gi", "nvidia.com/gpu": str(GPUS_PER_NODE)},
            labels={
                "fusesched.io/gpu-model": MODEL,
                "topology.fusesched.io/rack": f"r{k // 8 + 1}",
            },
        )
        for k in range(nodes)
    ]
    return Snapshot(
        created_at=hi,
        source=f"philly.csv days {start_day:g}-{start_day + days:g}",
        nodes=node_list,
        jobs=jobs,
    )


SCENARIOS = {
    "as-is": {"description": "the cluster and the week as they are", "arrival": {"jitter_s": 60}},
    "load-125pct": {
        "description": "arrivals 25 % more frequent",
        "arrival": {"rate": 1.25, "jitter_s": 60},
    },
    "rack-r1-down-12h": {
        "description": "rack r1 (8 nodes, 64 GPUs) down for 12 h from day 2",
        "arrival": {"jitter_s": 60},
        "failures": [{"at_s": 2 * DAY, "duration_s": 12 * 3600, "rack": "r1"}],
    },
    "sjf-power-saving": {
        "description": "shortest predicted run time first (each VC's last two jobs), "
        "idle nodes suspended after 30 min",
        "arrival": {"jitter_s": 60},
        "policy": {"queue_order": "sjf", "runtime_prediction": "user-last2"},
        "power": {"policy": "idle-timeout", "idle_threshold_s": 1800},
    },
}


def machine() -> str:
    return describe(machine_info(), markup=False)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--trace", type=Path, default=TRACE)
    ap.add_argument("--start-day", type=float, default=70.0)
    ap.add_argument("--days", type=float, default=7.0)
    ap.add_argument("--nodes", type=int, default=32)
    ap.add_argument("--target-s", type=float, default=3600.0)
    ap.add_argument("--queue", default="6214e9", help="whose p95 wait ('' for all jobs)")
    ap.add_argument("--seeds", default="0,1,2")
    ap.add_argument("--workers", type=int, default=None)
    ap.add_argument("--ray", default=None)
    ap.add_argument("--out", type=Path, default=Path("twin-philly"))
    args = ap.parse_args(argv)
    try:
        seeds = [int(s) for s in args.seeds.split(",")]
    except ValueError:
        ap.error(
            f"--seeds: expected whole numbers separated by commas, e.g. 0,1,2, not {args.seeds!r}"
        )
    if not args.days > 0 or args.start_day < 0 or args.nodes < 1:
        ap.error("needs --start-day >= 0, --days > 0 and --nodes >= 1")
    try:
        snap = philly_snapshot(args.trace, args.start_day, args.days, args.nodes)
    except (OSError, ValueError) as exc:  # a missing or malformed trace
        print(f"error: {exc}", file=sys.stderr)
        return 2
    if not snap.jobs:
        print(
            f"error: no jobs submitted in days {args.start_day:g} to "
            f"{args.start_day + args.days:g} of {args.trace}",
            file=sys.stderr,
        )
        return 2
    if args.queue and args.queue not in {job.queue for job in snap.jobs}:
        print(
            f"error: --queue {args.queue!r} has no jobs in days {args.start_day:g} to "
            f"{args.start_day + args.days:g} ('' plans for all jobs)",
            file=sys.stderr,
        )
        return 2
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "philly.json.gz"
        save(snap, path)
        data = path.read_bytes()
    workers = args.workers or default_workers()
    head = (
        f"Snapshot: {snap.source}, {len(snap.jobs)} jobs, {len(snap.nodes)} nodes × "
        f"{GPUS_PER_NODE} GPUs (`{MODEL}`). Machine: {machine()}; {workers} worker process(es). "
        f"Command: `.venv/bin/python bench/twin_philly.py {' '.join(sys.argv[1:])}`."
    )
    t0 = time.perf_counter()
    scenarios = [
        parse_scenario({"name": name, **body, "seeds": seeds}, name)
        for name, body in SCENARIOS.items()
    ]
    folder = args.out / "scenarios"  # the same scenarios as files, for `fusesched twin`
    folder.mkdir(parents=True, exist_ok=True)
    for name, body in SCENARIOS.items():
        text = yaml.safe_dump({"name": name, **body, "seeds": seeds}, sort_keys=False)
        (folder / f"{name}.yaml").write_text(text)
    tasks = [Task(s, seed) for s in scenarios for seed in s.seeds]
    results = run_all(data, tasks, workers=workers, ray_address=args.ray)
    compare_s = time.perf_counter() - t0
    notes = [head, "", *[f"- **{s.name}**: {s.description}" for s in scenarios]]
    notes += ["", f"{len(tasks)} runs in {compare_s:.0f} s."]
    report = write_compare(results, args.out, "What-if on one week of Philly", notes)
    print(report.read_text())
    t0 = time.perf_counter()
    question = Question(
        target_s=args.target_s,
        match={"fusesched.io/gpu-model": MODEL},
        queue=args.queue or None,
        seeds=tuple(seeds),
        max_add=256,
    )
    base = scenarios[0].model_copy(update={"name": "as-is"})
    answer = run_question(base, question, data, workers=workers, ray_address=args.ray)
    plan_s = time.perf_counter() - t0
    runs = len(answer.steps) * len(seeds)
    what = f"8-GPU {MODEL} nodes"
    capacity = write_capacity(
        answer,
        args.out,
        "Capacity plan on one week of Philly",
        what,
        [head, "", f"{runs} runs in {plan_s:.0f} s (bracketing search, 4 sizes a round)."],
    )
    print(capacity_markdown(answer, what))
    summary = {
        "compare": [r.as_dict() | {"wait_samples": []} for r in results],
        "capacity": {
            "added": answer.added,
            "steps": [
                {"added": s.added, "nodes": s.nodes, "gpus": s.gpus, "p95_by_seed": s.p95_by_seed}
                for s in answer.steps
            ],
        },
    }
    (args.out / "results.json").write_text(json.dumps(summary, indent=1) + "\n")
    print(f"reports: {report}, {capacity}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
