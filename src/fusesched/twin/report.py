"""Reports: scenarios side by side (Markdown and PNG plots) and capacity-planning answers."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

import numpy as np

from fusesched.twin.capacity import Answer
from fusesched.twin.runner import TwinResult

#: (label, how to read it from a result, format)
COLUMNS: tuple[tuple[str, str, str], ...] = (
    ("jobs", "overall.jobs", "{:.0f}"),
    ("mean wait (s)", "overall.avg_wait_s", "{:.1f}"),
    ("p95 wait (s)", "overall.p95_wait_s", "{:.1f}"),
    ("mean bounded slowdown", "overall.avg_bounded_slowdown", "{:.2f}"),
    ("CPU utilisation", "overall.utilization", "{:.1%}"),
    ("GPU utilisation", "gpu_utilization", "{:.1%}"),
    ("GPU fragmentation", "fragmentation", "{:.1%}"),
    ("energy (kWh)", "energy_kwh", "{:.1f}"),
    ("makespan (h)", "overall.makespan_s", "{:.2f}"),
    ("runs ended by failures", "failures", "{:.0f}"),
)

#: rows shown when some result had advance reservations
RESERVATION_COLUMNS: tuple[tuple[str, str, str], ...] = (
    ("reservations", "reservations", "{:.0f}"),
    ("rejected jobs", "overall.rejected", "{:.0f}"),
)


def value(result: TwinResult, path: str) -> float | None:
    if path.startswith("overall."):
        return float(result.overall[path.split(".", 1)[1]])
    raw = getattr(result, path)
    return None if raw is None else float(raw)


def by_scenario(results: Sequence[TwinResult]) -> dict[str, list[TwinResult]]:
    out: dict[str, list[TwinResult]] = {}
    for r in results:
        out.setdefault(r.scenario, []).append(r)
    return out


def mean(results: Sequence[TwinResult], path: str) -> float | None:
    values = [value(r, path) for r in results]
    known = [v for v in values if v is not None]
    return float(np.mean(known)) if known else None


def _cell(v: float | None, fmt: str, path: str) -> str:
    if v is None:
        return "n/a"
    if path == "overall.makespan_s":
        v = v / 3600.0
    return fmt.format(v)


def table(results: Sequence[TwinResult]) -> str:
    """Scenarios as columns, metrics as rows (means over seeds)."""
    groups = by_scenario(results)
    names = list(groups)
    lines = [
        "| metric | " + " | ".join(names) + " |",
        "|---|" + "---:|" * len(names),
    ]
    rows = COLUMNS
    if any(r.reservations for r in results):
        rows = (*COLUMNS, *RESERVATION_COLUMNS)
    for label, path, fmt in rows:
        cells = [_cell(mean(groups[n], path), fmt, path) for n in names]
        lines.append(f"| {label} | " + " | ".join(cells) + " |")
    return "\n".join(lines)


def tenant_table(results: Sequence[TwinResult]) -> str:
    groups = by_scenario(results)
    names = list(groups)
    tenants = sorted({t for r in results for t in r.tenants})
    lines = [
        "| tenant | " + " | ".join(f"{n}: mean / p95 wait (s)" for n in names) + " |",
        "|---|" + "---:|" * len(names),
    ]
    for tenant in tenants:
        cells = []
        for n in names:
            rows = [r.tenants[tenant] for r in groups[n] if tenant in r.tenants]
            if not rows:
                cells.append("n/a")
                continue
            avg = np.mean([float(m["avg_wait_s"]) for m in rows])
            p95 = np.mean([float(m["p95_wait_s"]) for m in rows])
            cells.append(f"{avg:.1f} / {p95:.1f}")
        lines.append(f"| {tenant} | " + " | ".join(cells) + " |")
    return "\n".join(lines)


def plot_compare(results: Sequence[TwinResult], folder: Path) -> list[str]:
    """PNG plots into ``folder``; returns their file names."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    groups = by_scenario(results)
    names = list(groups)
    panels = [c for c in COLUMNS if c[0] not in ("jobs", "runs ended by failures")]
    fig, axes = plt.subplots(2, 4, figsize=(16, 7))
    for ax, (label, path, _) in zip(axes.flat, panels, strict=False):
        values = [mean(groups[n], path) for n in names]
        heights = [v if v is not None else 0.0 for v in values]
        if path == "overall.makespan_s":
            heights = [h / 3600 for h in heights]
        ax.bar(range(len(names)), heights, color=[f"C{i}" for i in range(len(names))])
        ax.set_xticks(range(len(names)), names, rotation=20, fontsize=8)
        ax.set_title(label, fontsize=10)
    for ax in list(axes.flat)[len(panels) :]:
        ax.axis("off")
    fig.tight_layout()
    files = ["metrics.png"]
    fig.savefig(folder / files[0], dpi=90)
    plt.close(fig)

    tenants = sorted({t for r in results for t in r.tenants})
    if tenants:
        fig, ax = plt.subplots(figsize=(min(16, max(6, 0.3 * len(tenants) * len(names))), 4))
        width = 0.8 / len(names)
        for i, n in enumerate(names):
            waits = [
                float(
                    np.mean(
                        [float(r.tenants[t]["avg_wait_s"]) for r in groups[n] if t in r.tenants]
                        or [0.0]
                    )
                )
                for t in tenants
            ]
            ax.bar(np.arange(len(tenants)) + i * width, waits, width, label=n)
        ax.set_xticks(np.arange(len(tenants)) + 0.4 - width / 2, tenants, rotation=20)
        ax.set_ylabel("mean wait (s)")
        ax.set_title("mean wait per tenant")
        ax.legend(fontsize=8)
        fig.tight_layout()
        fig.savefig(folder / "tenants.png", dpi=90)
        plt.close(fig)
        files.append("tenants.png")

    fig, ax = plt.subplots(figsize=(7, 4))
    for n in names:
        sample = np.sort(np.concatenate([np.asarray(r.wait_samples) for r in groups[n]]))
        if sample.size:
            ax.plot(sample, np.linspace(0, 1, sample.size), label=n)
    ax.set_xscale("symlog", linthresh=1.0)
    ax.set_xlabel("wait (s)")
    ax.set_ylabel("share of jobs")
    ax.set_title("wait distribution")
    ax.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(folder / "waits.png", dpi=90)
    plt.close(fig)
    files.append("waits.png")
    return files


def write_compare(
    results: Sequence[TwinResult], folder: Path, title: str, notes: Sequence[str] = ()
) -> Path:
    """``folder/report.md`` with the plots beside it."""
    folder.mkdir(parents=True, exist_ok=True)
    files = plot_compare(results, folder)
    seeds = sorted({r.seed for r in results})
    parts = [
        f"# {title}",
        "",
        *notes,
        "",
        f"Means over seeds {', '.join(map(str, seeds))}.",
        "",
        table(results),
        "",
        "## Per tenant",
        "",
        tenant_table(results),
        "",
        *[f"![{f}]({f})" for f in files],
        "",
    ]
    path = folder / "report.md"
    path.write_text("\n".join(parts))
    return path


def _seconds(value: float) -> str:
    """A wait in seconds: whole seconds from 10 s up, else three significant digits, so that
    a p95 of 0.3 s against a target of 0 s does not print as a passing-looking 0."""
    return f"{value:.0f}" if abs(value) >= 10 else f"{value:.3g}"


def capacity_markdown(answer: Answer, what: str) -> str:
    q = answer.question
    queue = f"queue {q.queue!r}" if q.queue else "all jobs"
    lines = [
        f"Question: how many {what} keep the 95th-percentile wait of {queue} at most "
        f"{q.target_s:g} s (mean over seeds {', '.join(map(str, q.seeds))})?",
        "",
    ]
    if answer.added is None:
        lines.append(f"**Not reached** within {q.max_add} added nodes.")
    else:
        step = answer.step(answer.added)
        lines.append(
            f"**Answer: add {answer.added} node(s)**: {step.nodes} nodes, {step.gpus} GPUs, "
            f"p95 wait {_seconds(step.p95)} s."
        )
    lines += [
        "",
        "| added nodes | nodes | GPUs | p95 wait (s), mean | per seed | meets target |",
        "|---:|---:|---:|---:|---|:---:|",
    ]
    for s in answer.steps:
        per = ", ".join(_seconds(v) for v in s.p95_by_seed)
        mark = "yes" if s.p95 <= q.target_s else "no"
        lines.append(f"| {s.added} | {s.nodes} | {s.gpus} | {_seconds(s.p95)} | {per} | {mark} |")
    return "\n".join(lines)


def plot_capacity(answer: Answer, path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    steps = answer.steps
    if answer.added is not None:  # the neighbourhood of the answer, not the far gallop
        steps = [s for s in steps if s.added <= max(2 * answer.added, answer.added + 4)]
    fig, ax = plt.subplots(figsize=(7, 4))
    xs = [s.gpus for s in steps]
    ax.plot(xs, [s.p95 for s in steps], "o-", label="p95 wait (mean over seeds)")
    for s in steps:
        ax.scatter([s.gpus] * len(s.p95_by_seed), s.p95_by_seed, s=8, color="grey")
    ax.axhline(answer.question.target_s, color="red", ls="--", label="target")
    if answer.added is not None:
        ax.axvline(answer.step(answer.added).gpus, color="green", ls=":", label="answer")
    ax.set_xlabel("GPUs in the cluster")
    ax.set_ylabel("p95 wait (s)")
    ax.set_yscale("symlog", linthresh=60)
    ax.set_ylim(bottom=0)
    ax.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(path, dpi=90)
    plt.close(fig)


def write_capacity(
    answer: Answer, folder: Path, title: str, what: str, notes: Sequence[str] = ()
) -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    plot_capacity(answer, folder / "capacity.png")
    text = "\n".join(
        [f"# {title}", "", *notes, "", capacity_markdown(answer, what), "", "![](capacity.png)", ""]
    )
    path = folder / "capacity.md"
    path.write_text(text)
    return path
