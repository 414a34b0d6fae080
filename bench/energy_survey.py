"""Power saving on every SWF trace in ``../shared``: where can it save 20 %?

``bench/energy_sim.py`` measures always-on, idle-timeout, ``forecast`` and ``predictive`` on
one SWF window (HPC2N) and Philly. This survey runs the same five policies, with the same
settings (those of ``energy_sim.py``'s defaults, tuned on HPC2N and Philly development windows
only), on **every** trace of ``../shared/traces/pwa-swf`` and Lublin-256, one window each,
chosen by a rule fixed before any of them was run:

* the 30 days that start at the middle of the trace's submit span (day ⌊span / 2⌋), with the
  3 days before replayed as warm-up and not measured (as in ``energy_sim.py``);
* the machine of the trace's header (MaxNodes nodes sharing MaxProcs CPUs), the ``cpu-node``
  power model, FCFS + EASY backfilling, first-fit, walltime = the job's request (a trace whose
  middle 30 days would run past its end is measured whole, after the warm-up);
* traces of more than ``--max-nodes`` nodes (2,000) are listed as skipped: the power
  controller looks at every node every minute in Python, about 30 minutes for four policies
  on CEA-Curie's 5,544 nodes here.

Per trace it reports the offered load of the window, the ceiling (every idle node-hour of
always-on suspended at no cost), each policy's saving and extra mean wait, and the issue's goal
(≥ 20 % saved, < 5 % more mean wait, less energy and less wait than idle-timeout) for the two
forecast-driven policies. ``--traces`` picks a subset by file-name prefix. Writes ``table.md``,
``results.json`` and ``survey.png`` (saving against extra wait per trace) to ``--out``.

Run: ``nice -n 10 .venv/bin/python bench/energy_survey.py --out docs/figures/energy/survey``.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path
from typing import Any

from energy_sim import (
    POLICIES,
    TRACES,
    Case,
    Outcome,
    more_text,
    row,
    run_policy,
    saving_ceiling,
    swf_case,
    verdict,
    zero_wait_bound,
)
from fusesched.model.resources import CPU
from fusesched.power.saving import SavingConfig
from fusesched.traces.swf import load_swf
from machine_info import machine

ROOT = Path(__file__).resolve().parents[1]
WINDOW_DAYS = 30.0
WARMUP_DAYS = 3.0
DAY = 86400.0
NO_BASE_WAIT = 1e5  # where a trace without waits always-on is drawn (% more wait)


def trace_files(prefixes: list[str]) -> list[Path]:
    lublin = TRACES / "lublin-swf" / "lublin_256.swf"
    files = [*sorted((TRACES / "pwa-swf").glob("*.swf.gz")), lublin]
    files = [f for f in files if f.exists()]
    if prefixes:
        files = [f for f in files if any(f.name.lower().startswith(p.lower()) for p in prefixes)]
    return files


def window_of(path: Path) -> tuple[float, float]:
    """The rule: 30 days from the middle of the submit span (or the whole span if shorter)."""
    submit = load_swf(path).submit
    span = float(submit.max() - submit.min()) / DAY
    start = float(int(span / 2))
    if span < WINDOW_DAYS + WARMUP_DAYS or start + WINDOW_DAYS > span:
        return WARMUP_DAYS, max(span, WARMUP_DAYS + 1.0)
    return start, start + WINDOW_DAYS


def offered_load(case: Case) -> float:
    """CPU-seconds of the window's jobs (requested CPUs × run time) over its CPU-seconds."""
    lo, hi = case.meter
    cpus = sum(n.capacity.get(CPU) for n in case.nodes) / 1000.0
    work = sum(
        j.runtime * sum(g.replicas * g.resources.get(CPU) for g in j.spec.task_groups) / 1000.0
        for j in case.jobs
        if lo <= j.spec.submit_time < hi
    )
    return work / ((hi - lo) * cpus) if cpus else 0.0


def table(rows: list[dict[str, Any]]) -> str:
    lines = [
        "| trace | nodes | jobs | offered load | ceiling | zero-wait bound "
        "| idle-timeout saved / more wait "
        "| forecast | predictive | surge | mean wait always-on / surge | goal met by |",
        "|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---|",
    ]
    for r in rows:
        by = {p["policy"]: p for p in r["policies"]}
        cell = {n: f"{p['saved']:.1%} / {more_text(p['more_wait'])}" for n, p in by.items()}
        met = [n for n, v in r["goal"].items() if all(v.values())]
        surge = by.get("surge")  # absent from results files older than the policy
        surge_wait = "–" if surge is None else f"{surge['wait_mean_s'] / 60:,.1f} min"
        bound = f"{r['zero_wait_bound']:.1%}" if "zero_wait_bound" in r else "–"
        lines.append(
            f"| {r['trace']} | {r['nodes']:,} | {r['jobs']:,} | {r['offered_load']:.2f} "
            f"| {r['ceiling']:.1%} | {bound} | {cell['idle-timeout']} | {cell['forecast']} "
            f"| {cell['predictive']} | {cell.get('surge', '–')} "
            f"| {by['always-on']['wait_mean_s'] / 60:,.1f} / {surge_wait} "
            f"| {', '.join(met) or '–'} |"
        )
    return "\n".join(lines)


def plot(rows: list[dict[str, Any]], out: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(9, 5.5))
    marks = {"idle-timeout": "o", "forecast": "s", "predictive": "^", "surge": "D"}
    for i, r in enumerate(rows):
        by = {p["policy"]: p for p in r["policies"]}
        for name, mark in marks.items():
            if name not in by:  # a results file from before the policy existed
                continue
            extra = by[name]["more_wait"]  # None: no wait always-on, drawn at the right edge
            more = NO_BASE_WAIT if extra is None else extra * 100
            label = r["trace"] if name == "idle-timeout" else None
            colour = plt.get_cmap("tab20")(i % 20)
            ax.scatter(more, by[name]["saved"] * 100, marker=mark, color=colour, label=label)
    ax.axhline(20, color="grey", linestyle=":", linewidth=1)
    ax.axvline(5, color="grey", linestyle=":", linewidth=1)
    ax.set_xscale("symlog", linthresh=10)
    ax.set_xlim(-20, NO_BASE_WAIT * 4)
    ax.axvspan(NO_BASE_WAIT / 3, NO_BASE_WAIT * 4, color="grey", alpha=0.12)
    ax.text(NO_BASE_WAIT / 2.6, 30, "∞: nobody\nwaits\nalways-on", fontsize=8, rotation=90)
    ax.set_xlabel("more mean wait than always-on (%), symlog")
    ax.set_ylabel("energy saved vs always-on (%)")
    title = (
        "every SWF trace, middle 30 days: ○ idle-timeout  □ forecast  △ predictive  ◇ surge\n"
        "goal: above the dotted line at 20 %, left of the one at 5 %"
    )
    ax.set_title(title, fontsize=10)
    ax.grid(alpha=0.3)
    ax.legend(fontsize=7, ncol=2)
    fig.tight_layout()
    fig.savefig(out / "survey.png", dpi=120)
    plt.close(fig)


def write_table(
    rows: list[dict[str, Any]], skipped: list[str], max_nodes: int, out: Path, no_plots: bool
) -> None:
    text = table(rows)
    if skipped:
        text += f"\n\nSkipped (more than {max_nodes:,} nodes): {', '.join(skipped)}."
    print(text)
    out.mkdir(parents=True, exist_ok=True)
    (out / "table.md").write_text(text + "\n", encoding="utf-8")
    if not no_plots:
        plot(rows, out)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--traces", default="", help="comma-separated file-name prefixes (all)")
    p.add_argument("--out", type=Path, default=ROOT / "docs" / "figures" / "energy" / "survey")
    p.add_argument("--max-nodes", type=int, default=2000, help="skip larger machines")
    p.add_argument("--no-plots", action="store_true")
    p.add_argument(
        "--table-from", type=Path, default=None, help="re-render table and plot from results.json"
    )
    args = p.parse_args(argv)
    if args.table_from is not None:
        try:
            saved = json.loads(args.table_from.read_text(encoding="utf-8"))
            rows, skipped = saved["rows"], saved.get("skipped", [])
        except (OSError, ValueError, KeyError) as exc:
            sys.exit(f"cannot read {args.table_from}: {exc}")
        write_table(rows, skipped, saved["config"]["max_nodes"], args.out, args.no_plots)
        return 0
    files = trace_files([x for x in args.traces.split(",") if x])
    if not files:
        sys.exit(f"no SWF trace found under {TRACES} (this survey needs ../shared)")
    info = machine()
    print(f"machine: {info['cpu']}, git {info['git']}, load {info['loadavg_at_start']:.2f}")
    config = SavingConfig()
    t0 = time.perf_counter()
    rows: list[dict[str, Any]] = []
    skipped: list[str] = []
    for path in files:
        window = window_of(path)
        case = swf_case(path, window, WARMUP_DAYS)
        if len(case.nodes) > args.max_nodes:
            print(f"{case.name}: {len(case.nodes):,} nodes > --max-nodes, skipped", flush=True)
            skipped.append(f"{case.name} ({len(case.nodes):,} nodes)")
            continue
        print(f"{case.name}: {case.description}, {len(case.jobs):,} jobs", flush=True)
        outs: list[Outcome] = []
        for policy in POLICIES:
            out = run_policy(case, policy, config, 0.5)
            outs.append(out)
            print(
                f"  {policy:>12}: {out.report.kwh_per_month:,.0f} kWh/month, mean wait "
                f"{out.wait_mean_s / 60:.1f} min, {out.wall_s:.1f} s",
                flush=True,
            )
        policy_rows = [row(o, outs[0]) for o in outs]
        goal = verdict(policy_rows)
        entry = {
            "trace": case.name,
            "window_days": list(window),
            "description": case.description,
            "nodes": len(case.nodes),
            "jobs": outs[0].jobs,
            "offered_load": offered_load(case),
            "ceiling": saving_ceiling(case, outs[0].report),
            "zero_wait_bound": zero_wait_bound(case, outs[0]),
            "policies": policy_rows,
            "goal": goal,
        }
        rows.append(entry)
        print(
            f"  load {entry['offered_load']:.2f}, ceiling {entry['ceiling']:.1%}, zero-wait "
            f"bound {entry['zero_wait_bound']:.1%}, goal {goal}",
            flush=True,
        )
    write_table(rows, skipped, args.max_nodes, args.out, no_plots=True)
    payload = {
        "command": " ".join(["bench/energy_survey.py", *(argv or sys.argv[1:])]),
        "machine": info,
        "config": {
            "window_days": WINDOW_DAYS,
            "warmup_days": WARMUP_DAYS,
            "margin": 0.5,
            "max_nodes": args.max_nodes,
        },
        "rows": rows,
        "skipped": skipped,
        "wall_s": time.perf_counter() - t0,
    }
    (args.out / "results.json").write_text(json.dumps(payload, indent=2) + "\n", "utf-8")
    if not args.no_plots:
        plot(rows, args.out)
    print(f"done in {time.perf_counter() - t0:.1f} s; wrote {args.out}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
