"""What ``fusesched jobs --start`` and ``--test-only`` print: when waiting (or tried) jobs
are expected to start, and on which nodes (``GET /v1/starts``, ``POST /v1/starts/test``)."""

from __future__ import annotations

import time
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
