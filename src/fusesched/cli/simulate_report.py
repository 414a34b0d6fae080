"""The results of ``fusesched simulate`` written out: the JSON file (``--json``), the plots
(``--plot``) and the DL comparison's table.

Apart from the runs (:mod:`fusesched.cli.simulate`): drawing needs matplotlib, imported only
when a plot is asked for.
"""

from __future__ import annotations

import json
import math
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from fusesched.cli.simulate import RunResult, UsageError


def plot_file(path: Path) -> Path:
    """The file a plot asked for at ``path`` is written to: ``path`` itself when its suffix
    names a format matplotlib draws (``.png``, ``.pdf``, ``.svg``, …), ``path`` with ``.png``
    added when it has no suffix (as matplotlib adds it); :class:`UsageError` otherwise."""
    from matplotlib.backend_bases import FigureCanvasBase

    if not path.suffix:
        return path.with_name(path.name + ".png")
    kind = path.suffix[1:].lower()
    if kind not in FigureCanvasBase.get_supported_filetypes():
        raise UsageError(
            f"--plot {path}: cannot draw a .{kind} file; name it .png, .pdf or .svg "
            "(or give no suffix: .png is added)"
        )
    return path


def plot_fgd(path: Path, title: str, results: Sequence[RunResult]) -> None:
    """GPU allocation ratio against arrived load (mean over seeds), one line per policy."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(7, 4.5))
    for r in results:
        curve = r.extra["alloc_curve"]
        ax.plot(
            range(len(curve)), curve, label=f"{r.policy} ({r.metrics['gpu_alloc_pct_at_130']:.2f})"
        )
    ax.plot([0, 100], [0, 100], color="grey", linewidth=0.8, linestyle=":")
    ax.set_xlabel("arrived GPU load (% of capacity)")
    ax.set_ylabel("GPUs allocated (% of capacity)")
    ax.set_xlim(60, 130)
    ax.set_ylim(60, 100)
    ax.grid(alpha=0.3)
    ax.legend(title="policy (allocated at 130 %)", fontsize=8)
    ax.set_title(title, fontsize=10)
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)


def reserved(result: RunResult) -> bool:
    """Whether ``result`` is a run with advance reservations (``--reservation``)."""
    return bool(result.extra.get("reservations"))


def write_json(path: Path, trace: str, protocol: str, results: Sequence[RunResult]) -> None:
    def clean(value: Any) -> Any:
        if isinstance(value, float) and not math.isfinite(value):
            return None
        if isinstance(value, dict):
            return {k: clean(v) for k, v in value.items()}
        if isinstance(value, list):
            return [clean(v) for v in value]
        return value

    doc = {
        "trace": trace,
        "protocol": protocol,
        "results": [
            clean({"policy": r.policy, "backfill": r.backfill, "metrics": r.metrics, **r.extra})
            for r in results
        ],
    }
    path.write_text(json.dumps(doc, indent=2) + "\n")


def plot(path: Path, title: str, results: Sequence[RunResult]) -> None:
    """Bar charts of bounded slowdown, wait and utilisation per policy."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    labels = [
        f"{r.policy}\n{r.backfill}"
        + ("\n+ " + ", ".join(x["name"] for x in r.extra["reservations"]) if reserved(r) else "")
        for r in results
    ]
    panels = [
        ("avg_bounded_slowdown", "avg bounded slowdown (lower is better)", 1.0),
        ("avg_wait_s", "avg wait [h] (lower is better)", 3600.0),
        ("utilization", "utilisation (higher is better)", 1.0),
    ]
    fig, axes = plt.subplots(1, 3, figsize=(4 + 1.3 * len(results) * 1.5, 4.2))
    for ax, (key, name, scale) in zip(axes, panels, strict=True):
        values = [float(r.metrics.get(key, 0.0)) / scale for r in results]
        bars = ax.bar(range(len(values)), values, color="#3b6ea8")
        ax.set_xticks(range(len(values)), labels, fontsize=8)
        ax.set_title(name, fontsize=9)
        ax.bar_label(bars, fmt="%.3g", fontsize=7)
        ax.grid(axis="y", alpha=0.3)
    fig.suptitle(title, fontsize=10)
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)


def dl_table(title: str, results: Sequence[RunResult]) -> Any:
    """A rich table of the DL comparison: JCTs in hours, ratios against FIFO and tiresias."""
    from rich import box
    from rich.table import Table

    table = Table(title=title, box=box.SIMPLE_HEAD, show_edge=False)
    for name in ("policy", "avg JCT h", "p50 h", "p99 h", "preemptions", "FIFO/x", "tiresias/x"):
        table.add_column(name, justify="left" if name == "policy" else "right")
    table.columns[0].min_width = max(len(r.policy) for r in results)  # names are never cut
    best = min(float(r.metrics["avg_jct_s"]) for r in results)
    for r in results:
        m, e = r.metrics, r.extra
        avg = f"{float(m['avg_jct_s']) / 3600:.2f}"
        table.add_row(
            r.policy,
            f"[bold green]{avg}[/]" if m["avg_jct_s"] == best else avg,
            f"{float(m['p50_jct_s']) / 3600:.2f}",
            f"{float(m['p99_jct_s']) / 3600:.1f}",
            str(m["preemptions"]),
            f"{e['fifo_over_this']:.2f}" if "fifo_over_this" in e else "",
            f"{e['tiresias_over_this']:.3f}" if "tiresias_over_this" in e else "",
        )
    return table


def plot_dl(path: Path, title: str, results: Sequence[RunResult]) -> None:
    """Average JCT per DL policy (hours)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(2 + 1.2 * len(results), 4.2))
    values = [float(r.metrics["avg_jct_s"]) / 3600 for r in results]
    bars = ax.bar(range(len(values)), values, color="#3b6ea8")
    ax.set_xticks(range(len(values)), [r.policy for r in results], fontsize=8)
    ax.bar_label(bars, fmt="%.3g", fontsize=7)
    ax.set_ylabel("average JCT [h] (lower is better)")
    ax.grid(axis="y", alpha=0.3)
    ax.set_title(title, fontsize=9)
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)
