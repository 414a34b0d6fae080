"""What-if: the current queue replayed through the simulator under today's policies and under
another policy or cluster size, side by side.

The workload is what the controller holds now (pending and running jobs, and optionally the
most recent ended ones), on the nodes it has now (scaled by ``scale``: more nodes are copies
of the real ones, fewer are the first ones). Jobs keep their submit order and spacing; the
simulator needs each job's true run time, which it cannot know for jobs that have not ended,
so a job that ended runs as long as it ran and any other runs for its requested walltime (or
the core's default estimate). Dependencies are dropped (their targets may not be replayed).
The advance reservations the controller holds are replayed too (made when they were made,
their times shifted like the jobs'), in both runs: jobs submitted into one run inside it and
the others keep off its nodes, as live (docs/RESERVATIONS.md).

One run at a time, in a background thread, bounded in jobs and nodes; the page polls for the
result. Runs are kept in memory (the most recent :data:`KEPT_RUNS`).
"""

from __future__ import annotations

import dataclasses
import itertools
import logging
import math
import threading
import time
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any, Final

from fusesched.model.job import JobSpec
from fusesched.model.node import LABEL_HOSTNAME, NodeSpec
from fusesched.policies.placement import PLACEMENT_POLICIES
from fusesched.policies.queue_order import QUEUE_ORDERS
from fusesched.policies.registry import BACKFILL_MODES, CoreConfig
from fusesched.portal.schemas import WhatIfList, WhatIfMetrics, WhatIfRequest, WhatIfRun
from fusesched.sim.engine import SimJob, Simulation
from fusesched.sim.metrics import summarize
from fusesched.sim.reservations import SimReservation, bind, fit_to, from_live
from fusesched.store.job_filters import JobFilters
from fusesched.store.records import JobState
from fusesched.submit.request import JobRequest

if TYPE_CHECKING:
    from fusesched.controller.service import Controller

log = logging.getLogger("fusesched.portal")

MAX_JOBS: Final = 2_000
MAX_NODES: Final = 2_000
KEPT_RUNS: Final = 20


class WhatIfError(ValueError):
    """A what-if that cannot run as asked (the caller's fault: 400, or 409 when busy)."""

    def __init__(self, message: str, status: int = 400) -> None:
        super().__init__(message)
        self.status = status


def options() -> dict[str, list[str]]:
    return {
        "queue_order": sorted(QUEUE_ORDERS),
        "backfill": sorted(BACKFILL_MODES),
        "placement": sorted(PLACEMENT_POLICIES),
    }


def _policies(config: CoreConfig) -> dict[str, str]:
    return {
        "queue_order": config.queue_order,
        "backfill": config.backfill,
        "placement": config.placement,
    }


def alternative_config(base: CoreConfig, request: WhatIfRequest) -> CoreConfig:
    """``base`` with the policies ``request`` names; :class:`WhatIfError` for unknown ones."""
    changes: dict[str, str] = {}
    choices = options()
    for key in ("queue_order", "backfill", "placement"):
        value = getattr(request, key)
        if value is None or value == "":
            continue
        if value not in choices[key]:
            raise WhatIfError(f"unknown {key} {value!r}; choose from: {', '.join(choices[key])}")
        changes[key] = value
    return dataclasses.replace(base, **changes)  # type: ignore[arg-type]


def scaled_nodes(nodes: Sequence[NodeSpec], scale: float) -> list[NodeSpec]:
    """``round(len(nodes) × scale)`` nodes (at least one): copies of ``nodes`` in turn."""
    if not nodes:
        raise WhatIfError("the cluster has no nodes to simulate", 409)
    if not (math.isfinite(scale) and scale > 0):
        raise WhatIfError("scale must be a positive number")
    count = max(1, round(len(nodes) * scale))
    if count > MAX_NODES:
        raise WhatIfError(
            f"{count} nodes is more than a what-if may simulate ({MAX_NODES}); use a smaller scale"
        )
    out = []
    for i in range(count):
        base = nodes[i % len(nodes)]
        if i < len(nodes):
            out.append(base)
            continue
        labels = {k: v for k, v in base.labels.items() if k != LABEL_HOSTNAME}
        out.append(dataclasses.replace(base, name=f"{base.name}~{i // len(nodes)}", labels=labels))
    return out


def _sim_job(spec: JobSpec, runtime: float | None, default_s: float) -> SimJob:
    run = runtime if runtime is not None and runtime > 0 else (spec.walltime_s or default_s)
    return SimJob(dataclasses.replace(spec, dependencies=()), max(1.0, float(run)))


def current_reservations(ctl: Controller, t0: float) -> list[SimReservation]:
    """The controller's advance reservations that have not ended, with times relative to
    ``t0`` (made when they were created, or at 0 if that was earlier)."""
    from fusesched.controller.reservations import current

    return [from_live(s.reservation, s.created_at, t0) for s in current(ctl)]


def current_workload(
    ctl: Controller, include_finished: int, default_s: float
) -> tuple[list[NodeSpec], list[SimJob], list[str], list[SimReservation]]:
    """The controller's nodes, jobs and reservations now, as the simulator takes them
    (times relative to the earliest submission)."""
    notes: list[str] = []
    with ctl.lock:
        nodes = [node.spec for _, node in sorted(ctl.nodes.items())]
        nodes += [spec for _, spec in sorted(ctl.remote_specs.items())]
        live = sorted(ctl.jobs.values(), key=lambda j: j.seq)
        specs = [j.spec for j in live]
    picked: list[tuple[JobSpec, float | None]] = [(s, None) for s in specs]
    if include_finished:
        ended = [s.value for s in JobState if s.finished]
        rows = ctl.persist.store.list_jobs(JobFilters(states=ended), limit=include_finished)
        for row in reversed(rows):
            if row.start_time is None or row.end_time is None or row.array_parent is not None:
                continue
            try:
                spec = JobRequest.model_validate(dict(row.request)).to_job_spec(
                    row.id, row.submit_time
                )
            except ValueError:
                continue
            picked.insert(0, (spec, row.end_time - row.start_time))
    if len(picked) > MAX_JOBS:
        notes.append(f"only the {MAX_JOBS} newest of {len(picked)} jobs were replayed")
        picked = picked[-MAX_JOBS:]
    t0 = min((s.submit_time for s, _ in picked), default=0.0)
    jobs = [
        _sim_job(dataclasses.replace(s, submit_time=max(0.0, s.submit_time - t0)), run, default_s)
        for s, run in picked
    ]
    jobs.sort(key=lambda j: j.spec.submit_time)
    booked = current_reservations(ctl, t0)
    if booked:
        notes.append(f"{len(booked)} advance reservation(s) replayed")
    return nodes, jobs, notes, booked


def _metrics(
    nodes: Sequence[NodeSpec],
    jobs: Sequence[SimJob],
    config: CoreConfig,
    reservations: Sequence[SimReservation] = (),
) -> Any:
    # (on fewer nodes a reservation keeps those left; its jobs run as ordinary ones when
    # none is left)
    booked, _ = fit_to(reservations, nodes)
    replayed, booked, _ = bind(jobs, booked)
    result = Simulation(nodes, replayed, config, seed=0, reservations=booked).run()
    m = summarize(result.outcomes, result.total_cpus)
    return WhatIfMetrics(
        jobs=m.jobs,
        rejected=m.rejected,
        avg_wait_s=round(m.avg_wait_s, 3),
        p95_wait_s=round(m.p95_wait_s, 3),
        avg_bounded_slowdown=round(m.avg_bounded_slowdown, 4),
        utilization=round(m.utilization, 4),
        makespan_s=round(m.makespan_s, 3),
    )


class WhatIfRunner:
    """Starts what-if runs one at a time in a background thread and keeps their results."""

    def __init__(self, ctl: Controller) -> None:
        self.ctl = ctl
        self.lock = threading.Lock()
        self.runs: dict[str, WhatIfRun] = {}
        self.busy = False
        self._ids = itertools.count(1)

    def listing(self) -> WhatIfList:
        with self.lock:
            runs = sorted(self.runs.values(), key=lambda r: r.created, reverse=True)
        return WhatIfList(
            options=options(),
            current=_policies(self.ctl.config.core),
            limits={"jobs": MAX_JOBS, "nodes": MAX_NODES},
            runs=runs,
        )

    def get(self, run_id: str) -> WhatIfRun | None:
        with self.lock:
            return self.runs.get(run_id)

    def start(self, request: WhatIfRequest) -> WhatIfRun:
        base = self.ctl.config.core
        alternative = alternative_config(base, request)
        nodes, jobs, notes, booked = current_workload(
            self.ctl, request.include_finished, base.default_estimate_s
        )
        if not jobs:
            raise WhatIfError(
                "nothing to simulate: no job is waiting or running (ask for recent ended jobs "
                "with include_finished)",
                409,
            )
        bigger = scaled_nodes(nodes, request.scale)
        with self.lock:
            if self.busy:
                raise WhatIfError("a what-if is already running; wait for its result", 409)
            self.busy = True
            run = WhatIfRun(
                id=f"w{next(self._ids)}",
                state="running",
                created=time.time(),
                request=request.model_dump(),
                baseline=_policies(base) | {"scale": "1"},
                alternative=_policies(alternative) | {"scale": f"{request.scale:g}"},
                jobs=len(jobs),
                nodes=len(nodes),
                alternative_nodes=len(bigger),
                notes=notes,
            )
            self.runs[run.id] = run
            for old in sorted(self.runs.values(), key=lambda r: r.created)[:-KEPT_RUNS]:
                del self.runs[old.id]

        def work() -> None:
            update: dict[str, Any]
            try:
                update = {
                    "baseline_metrics": _metrics(nodes, jobs, base, booked),
                    "alternative_metrics": _metrics(bigger, jobs, alternative, booked),
                    "state": "done",
                }
            except Exception as exc:  # a bug in a policy must not kill the thread silently
                log.exception("what-if %s failed", run.id)
                update = {"state": "failed", "error": f"{type(exc).__name__}: {exc}"}
            with self.lock:
                self.runs[run.id] = run.model_copy(update=update)
                self.busy = False

        threading.Thread(target=work, name=f"whatif-{run.id}", daemon=True).start()
        return run
