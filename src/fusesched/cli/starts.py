"""What ``fusesched jobs --start`` and ``--test-only`` print: when waiting (or tried) jobs
are expected to start, and on which nodes (``GET /v1/starts``, ``POST /v1/starts/test``).
``sbatch --test-only`` writes Slurm's line (:func:`report_trial_slurm`); ``squeue --start``
by Slurm's name, Slurm's lines (:mod:`fusesched.cli.squeue_start`)."""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

import typer
from rich import box
from rich.table import Table

from fusesched.cli.live import _print_json, console, err


def in_words(seconds: float) -> str:
    """A wait ahead, as people say it: "now", "in 40 s", "in 1 h 5 min", "in 2.5 d"."""
    if seconds < 1:
        return "now"
    if seconds < 60:
        return f"in {seconds:.0f} s"
    if seconds < 3600:
        return f"in {seconds // 60:.0f} min"
    if seconds < 86400:
        return f"in {seconds // 3600:.0f} h {seconds % 3600 // 60:.0f} min"
    return f"in {seconds / 86400:.1f} d"


def report_trial(answer: dict[str, Any], as_json: bool) -> None:
    """What ``--test-only`` found; exit 2 when a job would be refused."""
    refused = any(job["refused"] for job in answer["jobs"])
    if as_json:
        _print_json(answer)
    else:
        at, days = answer["at"], answer["horizon_s"] / 86400
        for k, job in enumerate(answer["jobs"], 1):
            name = f"Job {k}" + (f" ({job['name']})" if job["name"] else "")
            if job["refused"]:
                err.print(f"{name} would be refused: {job['refused']}", highlight=False)
                continue
            if job.get("held"):
                console.print(f"{name} is held: it would not start until released")
                continue
            for member in job["members"]:
                who = name if member["array_index"] is None else f"{name}[{member['array_index']}]"
                when = member["expected_start"]
                if when is None:
                    console.print(f"{who} would not start within {days:g} d", highlight=False)
                    continue
                shown = time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(when))
                nodes = ",".join(member["nodes"])
                console.print(
                    f"{who} would start at {shown} ({in_words(when - at)}) on {nodes}",
                    highlight=False,
                )
        console.print("[dim]Nothing was submitted.[/]", highlight=False)
    if refused:
        raise typer.Exit(2)


#: The job id ``sbatch --test-only`` names: nothing is submitted, so no id is taken (Slurm's
#: takes the next one and drops it); no job of fusesched's has id 0.
TRIAL_JOB_ID = 0


def trial_slurm(ask: Callable[[], dict[str, Any]]) -> dict[str, Any]:
    """``ask()`` (``POST /v1/starts/test``); a job the controller refuses (400, 422) ends
    as Slurm's sbatch ends it: ``allocation failure: REASON`` on stderr, exit 1. Other
    errors as every command's."""
    from fusesched.cli.live import refused
    from fusesched.sdk import ControllerError

    try:
        return ask()
    except ControllerError as exc:
        if exc.status in (400, 422):
            typer.echo(f"allocation failure: {exc}", err=True)
            raise typer.Exit(1) from None
        refused(exc)


def report_trial_slurm(answer: dict[str, Any], processors: int, partition: str) -> None:
    """What Slurm 22.05's ``sbatch --test-only`` writes, on stderr as it does: ``sbatch: Job
    0 to start at 2026-12-07T19:08:17 using 2 processors on nodes n[1-2] in partition
    default`` (an array: its first member to start; ``N/A`` and ``(null)`` when it would not
    start within the horizon, or is held). A refused job: ``allocation failure: REASON``,
    exit 1, as Slurm's."""
    from fusesched.hostlist import compress_hostlist

    (job,) = answer["jobs"]
    if job["refused"]:
        typer.echo(f"allocation failure: {job['refused']}", err=True)
        raise typer.Exit(1)
    starts = [m for m in job["members"] if m["expected_start"] is not None]
    first = min(starts, key=lambda m: m["expected_start"]) if starts else None
    when, nodes = "N/A", "(null)"
    if first is not None:
        when = time.strftime("%Y-%m-%dT%H:%M:%S", time.localtime(first["expected_start"]))
        nodes = compress_hostlist(list(first["nodes"])) or nodes
    typer.echo(
        f"sbatch: Job {TRIAL_JOB_ID} to start at {when} using {processors} processors on "
        f"nodes {nodes} in partition {partition}",
        err=True,
    )


def print_starts(answer: dict[str, Any]) -> None:
    table = Table(box=box.SIMPLE_HEAD, show_edge=False)
    days = answer["horizon_s"] / 86400
    for name in ("id", "user", "queue", "phase", "expected start", "wait", "nodes"):
        table.add_column(name, no_wrap=name in ("id", "expected start", "wait"))
    at = answer["at"]
    for job in answer["jobs"]:
        when = job["expected_start"]
        shown = time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(when)) if when else "-"
        table.add_row(
            job["id"],
            job["user"],
            job["queue"],
            job["phase"],
            shown,
            in_words(when - at) if when else f"over {days:g} d",
            ",".join(job["nodes"]),
        )
    console.print(table)
    console.print(
        "[dim]Expected if every job runs until its time limit and nothing else is submitted "
        f"(held jobs not shown; looked {days:g} d ahead).[/]"
        + ("" if answer["complete"] else " [yellow]Cut short: too many jobs to look further.[/]"),
        highlight=False,
    )
