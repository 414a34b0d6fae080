"""``fusesched eff JOB``: what a job used against what it asked for, as Slurm's ``seff``
prints it (``GET /v1/jobs/{id}/efficiency``; docs/LIVE.md, "Job efficiency")."""

from __future__ import annotations

from typing import Annotated, Any

import typer

from fusesched.cli.live import (
    CaOpt,
    ControllerOpt,
    JsonOpt,
    TokenOpt,
    _call,
    _client,
    _print_json,
    slurm_hms,
)

_UNITS = ("B", "KiB", "MiB", "GiB", "TiB", "PiB")


def size(n: float | None) -> str:
    """``n`` bytes for people: 1.5 GiB."""
    if n is None:
        return "-"
    value = float(n)
    for unit in _UNITS:
        if value < 1024 or unit == _UNITS[-1]:
            return f"{value:.0f} {unit}" if unit == "B" else f"{value:.2f} {unit}"
        value /= 1024
    raise AssertionError("unreachable")  # pragma: no cover


def clock(seconds: float | None) -> str:
    """``seconds`` as [D-]HH:MM:SS (as Slurm writes durations)."""
    return "-" if seconds is None else slurm_hms(round(seconds))


def _number(x: float) -> str:
    return f"{x:g}"


def _pct(value: float | None) -> str:
    return "-" if value is None else f"{value:.2f}%"


def report(e: dict[str, Any]) -> str:
    """The readable block ``fusesched eff`` prints for one job's efficiency."""
    state = e["state"]
    if e.get("exit_code") is not None:
        state += f" (exit code {e['exit_code']})"
    tasks = e.get("tasks_count") or 0
    lines = [
        f"Job ID: {e['id']}",
        *([f"Name: {e['name']}"] if e.get("name") else []),
        f"User: {e.get('user') or '-'}",
        f"State: {state}",
        *([f"Pool: {e['pool']}"] if e.get("pool") else []),
        *([f"Nodes: {','.join(e['nodes'])}"] if e.get("nodes") else []),
        f"Cores: {_number(e['cpus'])} ({tasks} task{'s' if tasks != 1 else ''})",
        f"Elapsed: {clock(e.get('elapsed_s'))}",
    ]
    elapsed, cpus = e.get("elapsed_s"), e["cpus"]
    core_time = None if elapsed is None else elapsed * cpus
    lines.append(f"CPU utilized: {clock(e.get('cpu_seconds'))}")
    lines.append(
        f"CPU efficiency: {_pct(e.get('cpu_efficiency_pct'))} of {clock(core_time)} core-walltime"
    )
    lines.append(f"Memory utilized: {size(e.get('max_rss_bytes'))} (peak)")
    if e.get("memory_bytes"):
        lines.append(
            f"Memory efficiency: {_pct(e.get('memory_efficiency_pct'))} of "
            f"{size(e['memory_bytes'])}"
        )
    else:
        lines.append("Memory efficiency: - (no memory requested)")
    if e.get("gpus"):
        mean = e.get("gpu_util_mean")
        lines.append(f"GPUs: {_number(e['gpus'])}")
        lines.append(f"GPU utilization: {_pct(mean)} (time-weighted mean)")
        lines.append(f"GPU memory utilized: {size(e.get('max_gpu_memory_bytes'))} (peak)")
    lines.extend(f"Note: {note}" for note in e.get("notes") or ())
    shown = e.get("tasks") or []
    if len(shown) > 1:
        lines.append("Tasks:")
        for t in shown:
            lines.append(
                f"  {t['task_id']}  {t.get('node') or '-'}  {t['state']}  "
                f"cpu {clock(t.get('cpu_seconds'))} ({_pct(t.get('cpu_efficiency_pct'))})  "
                f"mem {size(t.get('max_rss_bytes'))} ({_pct(t.get('memory_efficiency_pct'))})"
                + (f"  gpu {_pct(t.get('gpu_util_mean'))}" if t.get("gpus") else "")
            )
    return "\n".join(lines)


def summary(client: Any, job_id: str) -> str | None:
    """One line of the job's efficiency for ``fusesched show`` (None: nothing measured, or
    a controller that cannot say)."""
    from fusesched.sdk import ControllerError

    try:
        e = client.efficiency(job_id)
    except (ControllerError, OSError):
        return None
    if not e.get("sampled"):
        return None
    cores = f"{_number(e['cpus'])} core{'' if e['cpus'] == 1 else 's'}"
    parts = [f"CPU {_pct(e.get('cpu_efficiency_pct'))} of {cores}"]
    memory = f"memory {size(e.get('max_rss_bytes'))} peak"
    if e.get("memory_bytes"):
        memory += f" of {size(e['memory_bytes'])} ({_pct(e.get('memory_efficiency_pct'))})"
    parts.append(memory)
    if e.get("gpus"):
        parts.append(f"GPU {_pct(e.get('gpu_util_mean'))} busy")
    return "efficiency: " + ", ".join(parts) + f" (fusesched eff {job_id})"


def eff(
    ctx: typer.Context,  # (its name: `eff`, or Slurm's `seff`)
    job_id: Annotated[str, typer.Argument(help="Job id.")],
    controller_url: ControllerOpt = None,
    token: TokenOpt = None,
    ca: CaOpt = None,
    as_json: JsonOpt = False,
) -> None:
    """Show a job's efficiency (as Slurm's seff): CPU time used against its cores × elapsed
    time, peak memory against memory requested, GPU utilisation and peak GPU memory. Running
    jobs show their use so far; what was not sampled shows as '-' with a note why. Called
    as `seff`, Slurm's seff's lines (docs/LIVE.md, "Job efficiency")."""
    if not job_id.strip():
        raise typer.BadParameter("a job id must not be empty", param_hint="JOB_ID")
    client = _client(controller_url, token, ca)
    found = _call(client.efficiency, job_id)
    if as_json:
        _print_json(found)
        return
    if ctx.info_name == "seff":
        from fusesched.cli import seff_report

        job = _call(client.show, found["id"])
        typer.echo("\n".join(seff_report.report(found, job)))
        for note in seff_report.unmeasured(found, job):
            typer.echo(f"seff: note: {note}", err=True)
        return
    typer.echo(report(found))
