"""The ``fusesched`` command."""

from __future__ import annotations

import math
import sys
import time
from pathlib import Path
from typing import Annotated

import typer
from rich import box
from rich.progress import (
    BarColumn,
    MofNCompleteColumn,
    Progress,
    TaskID,
    TextColumn,
    TimeElapsedColumn,
)
from rich.rule import Rule
from rich.table import Table

from fusesched import __version__
from fusesched.cli import live, purge, route, train_policy, twin, usage
from fusesched.cli.consoles import make_console
from fusesched.cli.entry import HELP_MARKUP, PROG
from fusesched.cli.seeds import SeedsError, parse_seeds
from fusesched.cli.simulate import (
    KNOWN_TRACES,
    RunResult,
    UsageError,
    check_options,
    check_reservations,
    load_workload,
    parse_policies,
    parse_reservations,
    refuse_unused,
    resolve_openb,
    resolve_trace,
    run_dl_protocol,
    run_fgd_protocol,
    run_full,
    run_protocol,
    run_reserved,
    shared_dir,
)
from fusesched.cli.simulate_report import (
    dl_table,
    plot,
    plot_dl,
    plot_fgd,
    plot_file,
    reserved,
    write_json,
)
from fusesched.policies.dl_registry import DL_POLICIES
from fusesched.policies.gpu_power import POWER_POLICIES
from fusesched.policies.gpu_scores import GPU_SCORERS
from fusesched.policies.placement import PLACEMENT_POLICIES
from fusesched.policies.presets import PRESETS
from fusesched.policies.queue_order import QUEUE_ORDERS
from fusesched.policies.registry import BACKFILL_MODES, PolicyError
from fusesched.policies.runtime_prediction import RUNTIME_PREDICTORS
from fusesched.traces.openb import OpenbFormatError
from fusesched.traces.swf import TraceFormatError

app = typer.Typer(
    rich_markup_mode=HELP_MARKUP,
    name=PROG,
    help="fusesched — the fused scheduler for HPC, AI and general workloads on one pool.",
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_enable=False,
)
console = make_console()
err = make_console(stderr=True)


def _rule(title: str) -> None:
    """A section rule as wide as a screen, also when the demo's output goes to a file."""
    console.print(Rule(title), width=min(console.width, 100))


def _version(value: bool) -> None:
    if value:
        console.print(f"fusesched {__version__}")
        raise typer.Exit()


@app.callback()
def _main(
    version: Annotated[
        bool, typer.Option("--version", callback=_version, is_eager=True, help="Show the version.")
    ] = False,
) -> None:
    """fusesched — the fused scheduler."""


def _progress(total: int) -> Progress:
    return Progress(
        TextColumn("[bold]{task.description}"),
        BarColumn(),
        MofNCompleteColumn(),
        TimeElapsedColumn(),
        console=err,
        transient=True,
        disable=not err.is_terminal,
    )


def _table(title: str, results: list[RunResult], protocol: str) -> Table:
    table = Table(
        title=title,
        box=box.SIMPLE_HEAD,
        show_edge=False,
        caption="bsld: average bounded slowdown (10 s threshold)",
    )
    for name in ("policy", "backfill", "bsld", "avg wait s", "util", "makespan s"):
        table.add_column(name, justify="left" if name in ("policy", "backfill") else "right")
    table.columns[0].min_width = max(len(r.policy) for r in results)  # names are never cut
    if protocol == "full":
        table.add_column("backfilled", justify="right")
    with_reservations = any(reserved(r) for r in results)
    if with_reservations:  # each run without and with them (--reservation)
        table.caption = (
            f"{table.caption}; delayed jobs: started later than without the reservations; "
            "wait change: of the mean wait"
        )
        table.add_column("reservations")
        table.add_column("delayed jobs", justify="right")
        table.add_column("wait change s", justify="right")
    best = min(r.metrics["avg_bounded_slowdown"] for r in results)
    for r in results:
        m = r.metrics
        bsld = f"{m['avg_bounded_slowdown']:.2f}"
        row = [
            r.policy,
            r.backfill,
            f"[bold green]{bsld}[/]" if m["avg_bounded_slowdown"] == best else bsld,
            f"{m['avg_wait_s']:.0f}",
            f"{m['utilization']:.4f}",
            f"{m['makespan_s']:.0f}",
        ]
        if protocol == "full":
            row.append(str(m.get("backfilled", "")))
        if with_reservations and reserved(r):
            row.append(", ".join(x["name"] for x in r.extra["reservations"]))
            row.append(str(r.extra["delayed_jobs"]))
            row.append(f"{r.extra['wait_change_s']:+.0f}")
        elif with_reservations:
            row.extend(["none", "", ""])
        table.add_row(*row)
    return table


def _compare(
    trace: str,
    policies: str,
    backfill: str,
    placement: str,
    protocol: str,
    seed: int,
    limit: int | None,
    runtime_prediction: str = "none",
    reservations: list[str] | None = None,
) -> tuple[str, list[RunResult]]:
    check_options(protocol, backfill, placement, runtime_prediction)
    booked = parse_reservations(reservations or [])
    names = parse_policies(policies, protocol)
    results: list[RunResult] = []
    if protocol == "rlscheduler":
        path = resolve_trace(trace)
        if path is None:
            raise UsageError("the rlscheduler protocol needs an SWF trace, not 'synthetic'")
        with _progress(10 * len(names)) as bar:
            task = bar.add_task("sequences", total=10 * len(names))

            def advance(done: int) -> None:
                bar.update(task, completed=done)

            try:
                results = run_protocol(path, names, backfill, seed, advance)
            except ValueError as exc:  # a trace the protocol cannot sample: too short, no header
                raise UsageError(f"--protocol rlscheduler: {exc}") from exc
        return str(path), results
    started = time.perf_counter()
    label, workload = load_workload(trace, limit)
    err.print(
        f"[dim]{label}: {len(workload.jobs):,} jobs on {len(workload.nodes):,} nodes "
        f"({workload.total_cpus:,} CPUs), loaded in {time.perf_counter() - started:.2f} s[/]"
    )
    check_reservations(workload, booked)
    runs = 2 if booked else 1  # without and with the reservations, side by side
    with _progress(len(workload.jobs) * len(names) * runs) as bar:
        for name in names:
            task = bar.add_task(name, total=len(workload.jobs) * runs)
            t0 = time.perf_counter()

            def finished(count: int, task: TaskID = task) -> None:
                bar.advance(task, count)

            if booked:
                pair = run_reserved(  # (each run with the seconds it took)
                    workload, name, backfill, placement, seed, booked, finished, runtime_prediction
                )
                results.extend(pair)
                continue
            result = run_full(
                workload, name, backfill, placement, seed, finished, runtime_prediction
            )
            result.extra["seconds"] = time.perf_counter() - t0
            results.append(result)
    return label, results


def _compare_fgd(
    nodes: str, pods: str | None, policies: str, seeds: str
) -> tuple[str, list[RunResult]]:
    if pods is None:
        raise UsageError("the fgd protocol needs a node list and a pod list: NODES.csv PODS.csv")
    names = parse_policies(policies, "fgd")
    try:
        seed_list = parse_seeds(seeds)
    except SeedsError as exc:
        raise UsageError(str(exc)) from None
    nodes_path = resolve_openb(nodes, "node")
    pods_path = resolve_openb(pods, "pod")
    with _progress(len(names) * len(seed_list)) as bar:
        task = bar.add_task("runs", total=len(names) * len(seed_list))

        def advance(done: int) -> None:
            bar.update(task, completed=done)

        results = run_fgd_protocol(nodes_path, pods_path, names, seed_list, advance)
    return f"{nodes_path.name} + {pods_path.name}", results


def _fgd_table(title: str, results: list[RunResult]) -> Table:
    table = Table(title=title, box=box.SIMPLE_HEAD, show_edge=False)
    for name in (
        "policy",
        "alloc % @100",
        "alloc % @130",
        "sd @130",
        "idle GPUs @130",
        "frag % @130",
    ):
        table.add_column(name, justify="left" if name == "policy" else "right")
    table.columns[0].min_width = max(len(r.policy) for r in results)  # names are never cut
    best = max(r.metrics["gpu_alloc_pct_at_130"] for r in results)
    for r in results:
        m = r.metrics
        at130 = f"{m['gpu_alloc_pct_at_130']:.2f}"
        table.add_row(
            r.policy,
            f"{m['gpu_alloc_pct_at_100']:.2f}",
            f"[bold green]{at130}[/]" if m["gpu_alloc_pct_at_130"] == best else at130,
            "–" if math.isnan(sd := m["sd_gpu_alloc_pct_at_130"]) else f"{sd:.2f}",  # one seed
            f"{m['unallocated_gpus_at_130']:.1f}",
            f"{m['frag_pct_at_130']:.2f}",
        )
    return table


@app.command(rich_help_panel="Simulate")
def simulate(
    trace: Annotated[
        str,
        typer.Argument(
            help="SWF trace file (plain or .gz), a short name ("
            + ", ".join(KNOWN_TRACES)
            + ") or 'synthetic'; with --protocol fgd the openb node list (a CSV or 'gpu_node')."
        ),
    ],
    pods: Annotated[
        str | None,
        typer.Argument(
            help="--protocol fgd only: the openb pod list (a CSV, or 'default', "
            "'gpushare100', 'multigpu50', ...)."
        ),
    ] = None,
    policy: Annotated[
        str | None,
        typer.Option(
            "--policy",
            "-p",
            help="Policies, comma separated. Queue order (full, rlscheduler; default fcfs): "
            + ", ".join(QUEUE_ORDERS)
            + ". Presets (queue order + backfilling + runtime prediction; full, rlscheduler): "
            + ", ".join(PRESETS)
            + ". GPU placement (fgd; default best-fit,fgd): "
            + ", ".join([*GPU_SCORERS, *(p for p in POWER_POLICIES if p not in GPU_SCORERS)])
            + ". Deep learning (dl): "
            + ", ".join(DL_POLICIES)
            + ". `fusesched policies` says what each does.",
        ),
    ] = None,
    backfill: Annotated[
        str, typer.Option(help="Backfilling: " + ", ".join(BACKFILL_MODES))
    ] = "easy",
    placement: Annotated[
        str, typer.Option(help="Node placement: " + ", ".join(PLACEMENT_POLICIES))
    ] = "first-fit",
    runtime_prediction: Annotated[
        str,
        typer.Option(
            "--runtime-prediction",
            help="--protocol full: estimates for backfilling and shortest-first, learned from "
            "finished jobs: " + ", ".join(RUNTIME_PREDICTORS),
        ),
    ] = "none",
    protocol: Annotated[
        str,
        typer.Option(
            help="'full': the whole trace through the fusesched core; 'rlscheduler': the "
            "RLScheduler evaluation (10 sampled 1,024-job sequences, seed 1); 'fgd': the FGD "
            "GPU-placement evaluation on the Alibaba openb trace; 'dl': deep-learning jobs of "
            "unknown length on a Philly or ITP job list (policies: fifo, sjf-oracle, las, "
            "tiresias-2q, tiresias, gittins; docs/DL_SCHEDULING.md)."
        ),
    ] = "full",
    seed: Annotated[int, typer.Option(help="Random seed (sequence sampling, tie-breaks).")] = 1,
    seeds: Annotated[
        str, typer.Option(help="--protocol fgd: seeds, e.g. 42-51 or 42,43.")
    ] = "42-51",
    limit: Annotated[
        int | None, typer.Option(help="Replay only the first N jobs (full protocol).", min=1)
    ] = None,
    reservation: Annotated[
        list[str] | None,
        typer.Option(
            "--reservation",
            help="--protocol full: an advance reservation, NAME:NODES:START:END[:users=A,B]"
            "[:tenants=T] (NODES a host list such as n[00000-00015]; START and END in the "
            "trace's seconds after its first submission, END also +SECONDS); repeatable. "
            "Each policy then runs without and with them, side by side (docs/RESERVATIONS.md).",
        ),
    ] = None,
    json_out: Annotated[Path | None, typer.Option("--json", help="Write results as JSON.")] = None,
    plot_out: Annotated[
        Path | None,
        typer.Option(
            "--plot", help="Draw the comparison as a PNG (or .pdf, .svg; no suffix: .png added)."
        ),
    ] = None,
) -> None:
    """Replay a trace through one or more policies in one run and compare them (with
    --reservation: each without and with the advance reservations, side by side)."""
    try:
        given = {
            "--backfill": backfill,
            "--placement": placement,
            "--runtime-prediction": runtime_prediction,
            "--limit": limit,
            "--seeds": seeds,
            "--reservation": reservation or [],
        }
        refuse_unused(protocol, given)
        if plot_out is not None:  # the file it will be (X: X.png), checked before the run
            plot_out = plot_file(plot_out)
        if protocol == "fgd":
            check_options(protocol, backfill, placement)
            label, results = _compare_fgd(trace, pods, policy or "best-fit,fgd", seeds)
        elif pods is not None:
            raise UsageError(f"a second file ({pods}) is only taken by --protocol fgd")
        elif protocol == "dl":
            label, results = run_dl_protocol(trace, policy, limit)
        else:
            label, results = _compare(
                trace,
                policy or "fcfs",
                backfill,
                placement,
                protocol,
                seed,
                limit,
                runtime_prediction,
                reservation,
            )
    except (
        UsageError,
        PolicyError,
        TraceFormatError,
        OpenbFormatError,
        OSError,  # a trace that is missing, a folder or unreadable
    ) as exc:
        err.print(f"[red]error:[/] {exc}")
        raise typer.Exit(2) from exc
    title = f"{label} — protocol {protocol}"
    if protocol == "fgd":
        console.print(_fgd_table(title, results))
    elif protocol == "dl":
        console.print(dl_table(title, results))
    else:
        console.print(_table(title, results, protocol))
    try:
        if json_out is not None:
            write_json(json_out, label, protocol, results)
            console.print(f"wrote {json_out}")
        if plot_out is not None:
            if protocol == "fgd":
                plot_fgd(plot_out, title, results)
            elif protocol == "dl":
                plot_dl(plot_out, title, results)
            else:
                plot(plot_out, f"{Path(label).name} — protocol {protocol}", results)
            console.print(f"wrote {plot_out}")
    except OSError as exc:  # --json or --plot in a missing folder, on a folder, read-only
        err.print(f"[red]error:[/] cannot write {exc.filename}: {exc.strerror or exc}")
        raise typer.Exit(2) from exc


@app.command(rich_help_panel="Simulate")
def policies() -> None:
    """List the registered policies."""
    table = Table(title="registered policies")
    table.add_column("kind")
    table.add_column("name")
    table.add_column("what it does")
    for name, order in QUEUE_ORDERS.items():
        table.add_row("queue order", name, order.description)
    for name, text in BACKFILL_MODES.items():
        table.add_row("backfill", name, text)
    for name, pol in PLACEMENT_POLICIES.items():
        table.add_row("placement", name, pol.description)
    for name, entry in RUNTIME_PREDICTORS.items():
        table.add_row("runtime prediction", name, entry.description)
    for name, preset in PRESETS.items():
        table.add_row("preset (--policy)", name, preset.description)
    for name, scorer in GPU_SCORERS.items():  # their docstrings say how they score
        first = (scorer.__doc__ or "").strip().splitlines()
        table.add_row("GPU placement (--protocol fgd)", name, first[0] if first else "")
    for name, power in POWER_POLICIES.items():
        if name not in GPU_SCORERS:
            table.add_row("power-aware GPU placement (fgd)", name, power.description)
    for name, text in DL_POLICIES.items():
        table.add_row("deep learning (--protocol dl)", name, text)
    console.print(table)


@app.command(rich_help_panel="Simulate")
def demo() -> None:
    """What `make run` shows: real traces replayed through several policies."""
    shared = shared_dir()
    if shared is None:
        console.print("[yellow]../shared is absent: replaying a synthetic workload instead[/]")
        _, results = _compare(
            "synthetic", "fcfs,sjf,f1,priority", "easy", "first-fit", "full", 1, None
        )
        console.print(_table("synthetic workload — protocol full", results, "full"))
        return
    _rule("RLScheduler protocol on Lublin-1 (published FCFS+backfill bsld 235.82)")
    for backfill in ("none", "easy"):
        _, results = _compare(
            "lublin-1", "fcfs,sjf,f1,wfp3,unicep", backfill, "first-fit", "rlscheduler", 1, None
        )
        console.print(_table(f"lublin-1 — backfill {backfill}", results, "rlscheduler"))
    _rule("The whole SDSC-SP2 trace through the fusesched core")
    label, results = _compare("sdsc-sp2", "fcfs,sjf,f1", "easy", "first-fit", "full", 1, None)
    console.print(_table(f"{label} — protocol full", results, "full"))
    _rule("GPU placement on the Alibaba openb trace (FGD protocol, 2 seeds)")
    label, results = _compare_fgd("gpu_node", "default", "best-fit,fgd", "42-43")
    console.print(_fgd_table(f"{label} — published at 130 %: best-fit 93.08, fgd 95.39", results))


live.register(app)
usage.register(app)
purge.register(app)
route.register(app)
train_policy.register(app)
twin.register(app)


def main() -> None:
    from fusesched.cli.entry import protect_sbatch_argv

    protect_sbatch_argv()  # (sbatch's script words are the script's)
    try:
        app(prog_name=PROG)
    except KeyboardInterrupt:  # pragma: no cover
        err.print("interrupted")
        sys.exit(130)
