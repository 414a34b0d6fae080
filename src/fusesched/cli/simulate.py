"""Running policy comparisons: the work behind ``fusesched simulate`` and ``fusesched demo``.

Kept apart from the Typer wiring so it can be called and tested directly.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from fusesched.model.reservation import Reservation
from fusesched.policies.gpu_power import POWER_POLICIES
from fusesched.policies.gpu_scores import GPU_SCORERS
from fusesched.policies.learned.model import LearnedPolicyError
from fusesched.policies.learned.preset import is_learned, learned_config
from fusesched.policies.placement import PLACEMENT_POLICIES
from fusesched.policies.presets import PRESETS
from fusesched.policies.queue_order import QUEUE_ORDERS
from fusesched.policies.registry import BACKFILL_MODES, CoreConfig
from fusesched.policies.runtime_prediction import RUNTIME_PREDICTORS
from fusesched.sim.engine import SimResult, Simulation
from fusesched.sim.metrics import per_queue, summarize
from fusesched.sim.protocols.fgd import FgdResult, run_fgd
from fusesched.sim.protocols.pwr import run_pwr
from fusesched.sim.protocols.rlscheduler import (
    ProtocolResult,
    default_batch_job_slice,
    run_rlscheduler,
)
from fusesched.sim.protocols.rlscheduler_core import run_core_protocol
from fusesched.sim.reservations import SimReservation, check, parse_reservation
from fusesched.sim.workload import Workload, swf_workload, synthetic_workload
from fusesched.traces.openb import load_openb_nodes, load_openb_pods
from fusesched.traces.swf import load_swf, rlscheduler_jobs

PROTOCOLS = ("full", "rlscheduler", "fgd", "dl")
RLSCHEDULER_POLICIES = ("fcfs", "sjf", "f1", "wfp3", "unicep", "wfp3-textbook", "unicep-textbook")

#: Short names for the traces that live in ../shared (paths relative to that folder).
KNOWN_TRACES = {
    "lublin-1": "traces/lublin-swf/lublin_256.swf",
    "lublin-2": "anchors/rlscheduler/lublin_256_new2",
    "sdsc-sp2": "traces/pwa-swf/SDSC-SP2-1998-4.2-cln.swf.gz",
    "hpc2n": "traces/pwa-swf/HPC2N-2002-2.2-cln.swf.gz",
    "cea-curie": "traces/pwa-swf/CEA-Curie-2011-2.1-cln.swf.gz",
}


#: Short names for the Alibaba openb (FGD) files in ../shared.
OPENB_DIR = "traces/alibaba-gpu-v2023"


class UsageError(ValueError):
    """Bad command-line input, reported without a traceback."""


@dataclass
class RunResult:
    policy: str
    backfill: str
    metrics: dict[str, float | int]
    extra: dict[str, Any] = field(default_factory=dict)


def shared_dir() -> Path | None:
    """The ``shared`` folder beside the checkout (or $FUSESCHED_SHARED), if present."""
    import os

    env = os.environ.get("FUSESCHED_SHARED")
    candidates = [Path(env)] if env else []
    here = Path(__file__).resolve()
    candidates += [parent / "shared" for parent in here.parents] + [Path.cwd().parent / "shared"]
    for cand in candidates:
        if (cand / "traces").is_dir():
            return cand
    return None


def resolve_trace(name: str) -> Path | None:
    """A path for ``name`` (a file, or a short name from KNOWN_TRACES); None for synthetic."""
    if name == "synthetic":
        return None
    path = Path(name)
    if path.is_dir():
        raise UsageError(f"{name} is a folder, not a trace file")
    if path.exists():
        return path
    if name in KNOWN_TRACES:
        shared = shared_dir()
        if shared is None:
            raise UsageError(f"trace {name!r} lives in ../shared, which is absent here")
        return shared / KNOWN_TRACES[name]
    known = ", ".join(["synthetic", *KNOWN_TRACES])
    raise UsageError(f"no such trace file: {name} (or use one of: {known})")


def parse_policies(text: str, protocol: str) -> list[str]:
    names = [p.strip() for p in text.split(",") if p.strip()]
    if not names:
        raise UsageError("--policy needs at least one policy name")
    allowed: tuple[str, ...] = (*QUEUE_ORDERS, *PRESETS)
    if protocol == "rlscheduler":
        allowed = (*RLSCHEDULER_POLICIES, *PRESETS)
    elif protocol == "fgd":
        allowed = (*GPU_SCORERS, *(p for p in POWER_POLICIES if p not in GPU_SCORERS))
    for name in names:
        if protocol in ("full", "rlscheduler") and is_learned(name):
            try:
                learned_config(name)
            except LearnedPolicyError as exc:
                raise UsageError(str(exc)) from None
            continue
        if name not in allowed:
            raise UsageError(
                f"unknown policy {name!r} for --protocol {protocol}; choose from: "
                + ", ".join(allowed)
            )
    return names


#: The options each protocol does not read, and their defaults: set to anything else they
#: are refused instead of silently ignored.
UNUSED_OPTIONS: dict[str, dict[str, object]] = {
    "fgd": {
        "--placement": "first-fit",
        "--runtime-prediction": "none",
        "--limit": None,
        "--reservation": [],
    },
    "dl": {
        "--backfill": "easy",
        "--placement": "first-fit",
        "--runtime-prediction": "none",
        "--seeds": "42-51",
        "--reservation": [],
    },
    "full": {"--seeds": "42-51"},
    "rlscheduler": {"--seeds": "42-51", "--reservation": []},
}


def refuse_unused(protocol: str, given: Mapping[str, object]) -> None:
    """A usage error naming the first option in ``given`` (option → value) that
    ``protocol`` does not read but was set away from its default."""
    for option, default in UNUSED_OPTIONS.get(protocol, {}).items():
        if option in given and given[option] != default:
            hint = " (use --seed)" if option == "--seeds" else ""
            raise UsageError(f"--protocol {protocol} does not use {option}: drop it{hint}")


def check_options(
    protocol: str, backfill: str, placement: str, runtime_prediction: str = "none"
) -> None:
    if protocol not in PROTOCOLS:
        raise UsageError(f"unknown protocol {protocol!r}; choose from: {', '.join(PROTOCOLS)}")
    if backfill not in BACKFILL_MODES:
        raise UsageError(f"unknown backfill {backfill!r}; choose from: {', '.join(BACKFILL_MODES)}")
    if placement not in PLACEMENT_POLICIES:
        raise UsageError(
            f"unknown placement {placement!r}; choose from: {', '.join(PLACEMENT_POLICIES)}"
        )
    if protocol == "fgd" and backfill != "easy":
        raise UsageError("the fgd protocol has no queue and no backfilling: drop --backfill")
    if protocol == "rlscheduler" and backfill == "conservative":
        raise UsageError(
            "the rlscheduler protocol has only its own EASY variant: use --backfill easy or none"
        )
    if runtime_prediction not in RUNTIME_PREDICTORS:
        raise UsageError(
            f"unknown runtime prediction {runtime_prediction!r}; choose from: "
            + ", ".join(RUNTIME_PREDICTORS)
        )
    if runtime_prediction != "none" and protocol != "full":
        raise UsageError(
            "--runtime-prediction applies to --protocol full; with --protocol rlscheduler "
            "use --policy default (the core with prediction on the protocol's sequences)"
        )


def parse_reservations(texts: Sequence[str]) -> list[Reservation]:
    """``--reservation`` values (``NAME:NODES:START:END[:users=A,B][:tenants=T]``, times in
    the trace's seconds after its first submission); :class:`UsageError` if one is bad or
    two share a name."""
    out: list[Reservation] = []
    for text in texts:
        try:
            res = parse_reservation(text)
        except ValueError as exc:
            raise UsageError(f"--reservation: {exc}") from None
        if any(r.name == res.name for r in out):
            raise UsageError(f"--reservation: {res.name} is given twice")
        out.append(res)
    return out


def check_reservations(workload: Workload, reservations: Sequence[Reservation]) -> None:
    """Refuse reservations the workload's cluster cannot hold (unknown nodes, overlapping
    windows) before any run."""
    try:
        check(workload.nodes, [SimReservation(r) for r in reservations])
    except ValueError as exc:
        raise UsageError(f"--reservation: {exc}") from None


def run_full(
    workload: Workload,
    policy: str,
    backfill: str,
    placement: str,
    seed: int,
    progress: Callable[[int], None] | None = None,
    runtime_prediction: str = "none",
    reservations: Sequence[Reservation] = (),
) -> RunResult:
    """Replay the workload through the general scheduling core. A preset policy name
    (``default``) brings its own backfilling and runtime prediction. ``reservations`` are
    made at 0 (before the first job)."""
    return _run_full(
        workload, policy, backfill, placement, seed, progress, runtime_prediction, reservations
    )[0]


def run_reserved(
    workload: Workload,
    policy: str,
    backfill: str,
    placement: str,
    seed: int,
    reservations: Sequence[Reservation],
    progress: Callable[[int], None] | None = None,
    runtime_prediction: str = "none",
) -> tuple[RunResult, RunResult]:
    """The same run without and with ``reservations``, side by side: the second's extra
    says how many jobs started later than without them (``delayed_jobs``), by how much on
    average (``delay_s``, over those) and the change of the mean wait (``wait_change_s``);
    each has the seconds it took."""
    args = (workload, policy, backfill, placement, seed, progress, runtime_prediction)
    t0 = time.perf_counter()
    plain, base = _run_full(*args)
    t1 = time.perf_counter()
    reserved, held = _run_full(*args, reservations)
    plain.extra["seconds"], reserved.extra["seconds"] = t1 - t0, time.perf_counter() - t1
    before = {o.job_id: o.start for o in base.outcomes}
    delays = [
        o.start - before[o.job_id]
        for o in held.outcomes
        if o.start == o.start and before.get(o.job_id, o.start) < o.start
    ]
    reserved.extra.update(
        delayed_jobs=len(delays),
        delay_s=float(np.mean(delays)) if delays else 0.0,
        wait_change_s=float(reserved.metrics["avg_wait_s"]) - float(plain.metrics["avg_wait_s"]),
    )
    return plain, reserved


def _run_full(
    workload: Workload,
    policy: str,
    backfill: str,
    placement: str,
    seed: int,
    progress: Callable[[int], None] | None = None,
    runtime_prediction: str = "none",
    reservations: Sequence[Reservation] = (),
) -> tuple[RunResult, SimResult]:
    if is_learned(policy):  # trained with its own backfilling and prediction
        config = learned_config(policy, placement)
        backfill = config.backfill
    elif policy in PRESETS:
        config = PRESETS[policy].config(placement)
        backfill = config.backfill
    else:
        config = CoreConfig(
            queue_order=policy,
            backfill=backfill,
            placement=placement,
            runtime_prediction=runtime_prediction,
        )
    try:
        sim = Simulation(
            workload.nodes,
            workload.jobs,
            config,
            seed=seed,
            reservations=[SimReservation(r) for r in reservations],
        )
    except ValueError as exc:  # (check_reservations says it before any run)
        raise UsageError(f"--reservation: {exc}") from None
    result = sim.run(progress)
    metrics = summarize(result.outcomes, result.total_cpus)
    queues = per_queue(result.outcomes, result.total_cpus)
    extra: dict[str, Any] = {
        "cycles": result.cycles,
        "decisions": result.decisions,
        "per_queue": {name: m.as_dict() for name, m in queues.items()},
    }
    if reservations:
        extra["reservations"] = [
            {"name": r.name, "nodes": len(r.nodes), "start": r.start, "end": r.end}
            for r in reservations
        ]
    return RunResult(policy, backfill, metrics.as_dict(), extra), result


def run_protocol(
    trace_path: Path,
    policies: Sequence[str],
    backfill: str,
    seed: int,
    progress: Callable[[int], None] | None = None,
) -> list[RunResult]:
    """The RLScheduler evaluation protocol (10 sampled 1,024-job sequences)."""
    jobs = rlscheduler_jobs(load_swf(trace_path))
    results = []
    slice_ = default_batch_job_slice(trace_path)
    for done, policy in enumerate(policies):

        def advance(k: int, base: int = done * 10) -> None:
            if progress is not None:
                progress(base + k)

        res: ProtocolResult
        if policy in PRESETS or is_learned(policy):  # the core on the protocol's sequences
            config = learned_config(policy) if is_learned(policy) else PRESETS[policy].config()
            res = run_core_protocol(
                jobs, config, policy, seed=seed, batch_job_slice=slice_, progress=advance
            )
            label = f"{config.backfill} (core)"
        else:
            res = run_rlscheduler(
                jobs,
                policy,
                backfill == "easy",
                seed=seed,
                batch_job_slice=slice_,
                progress=advance,
            )
            label = backfill
        results.append(
            RunResult(
                policy,
                label,
                {
                    "avg_bounded_slowdown": res.mean_bounded_slowdown,
                    "avg_wait_s": res.mean_wait_s,
                    "utilization": res.mean_utilization,
                    "makespan_s": res.mean_makespan_s,
                },
                {
                    "sequences": [
                        {
                            "start_job_index": s.start_job_index,
                            "avg_bounded_slowdown": s.avg_bounded_slowdown,
                            "utilization": s.utilization,
                        }
                        for s in res.sequences
                    ]
                },
            )
        )
    return results


def resolve_openb(name: str, kind: str) -> Path:
    """A node or pod list: a path, or a short name (``gpu_node``, ``default``, ``multigpu50``…)."""
    path = Path(name)
    if path.exists():
        return path
    shared = shared_dir()
    if shared is not None:
        candidate = shared / OPENB_DIR / f"openb_{kind}_list_{name}.csv"
        if candidate.exists():
            return candidate
    raise UsageError(
        f"no such {kind} list: {name} (a CSV file, or a short name such as "
        + ("gpu_node" if kind == "node" else "default, gpushare100, multigpu50")
        + " for the openb files in ../shared)"
    )


def run_fgd_protocol(
    nodes_path: Path,
    pods_path: Path,
    policies: Sequence[str],
    seeds: Sequence[int],
    progress: Callable[[int], None] | None = None,
) -> list[RunResult]:
    """The FGD evaluation: every policy over the same seeds, pods offered once, no departures."""
    nodes = load_openb_nodes(nodes_path)
    pods = load_openb_pods(pods_path)
    results = []
    done = 0
    for policy in policies:
        runs = []
        for seed in seeds:
            if policy in GPU_SCORERS:
                runs.append(run_fgd(nodes, pods, policy, seed))
            else:  # a PWR policy (docs/PWR.md): same protocol, power also recorded
                runs.append(run_pwr(nodes, pods, policy, seed).base)
            done += 1
            if progress is not None:
                progress(done)
        result = FgdResult(policy, tuple(runs))
        curve = np.mean([r.alloc_curve for r in runs], axis=0)
        results.append(
            RunResult(
                policy,
                "",
                {
                    "gpu_alloc_pct_at_100": result.gpu_alloc_pct_at_100,
                    "gpu_alloc_pct_at_130": result.gpu_alloc_pct_at_130,
                    "unallocated_gpus_at_130": result.unallocated_gpus_at_130,
                    "frag_pct_at_130": result.frag_pct_at_130,
                    "sd_gpu_alloc_pct_at_130": result.sd_gpu_alloc_pct_at_130,
                },
                {"seeds": list(seeds), "alloc_curve": [round(float(v), 4) for v in curve]},
            )
        )
    return results


def load_workload(trace: str, limit: int | None) -> tuple[str, Workload]:
    path = resolve_trace(trace)
    if path is None:
        return "synthetic", synthetic_workload()
    return str(path), swf_workload(load_swf(path), limit=limit)


def run_dl_protocol(
    trace: str, policies: str | None, limit: int | None
) -> tuple[str, list[RunResult]]:
    """``--protocol dl``: DL jobs of unknown length on a Philly or ITP trace, every policy side
    by side (docs/DL_SCHEDULING.md)."""
    from fusesched.sim.dl import compare

    try:
        names = compare.parse_dl_policies(policies or compare.DEFAULT_DL_POLICIES)
        path = compare.resolve_dl_trace(trace, shared_dir())
        jobs = compare.load_dl_jobs(path, limit)
        cluster, runs = compare.compare_dl(jobs, names)
    except ValueError as exc:  # bad policy names, malformed trace rows, impossible jobs
        raise UsageError(str(exc)) from exc
    label = f"{path} ({len(jobs):,} jobs, {cluster.nodes} nodes × {cluster.gpus_per_node} GPUs)"
    return label, [RunResult(r.policy, "", r.metrics, r.extra) for r in runs]
