"""``fusesched cancel --signal SIG JOB...``: send running jobs a signal (Slurm's ``scancel
--signal``); they keep running. The options are the ``cancel`` command's (cli/live.py); like
it, this imports nothing heavy until it runs."""

from __future__ import annotations

from typing import Annotated, Any

import typer

SignalOpt = Annotated[
    str | None,
    typer.Option(
        "--signal",
        "-s",
        help="Do not cancel: send the running tasks this signal (USR1, SIGUSR1, 10), as "
        "scancel --signal; the jobs keep running.",
    ),
]
BatchOpt = Annotated[
    bool,
    typer.Option(
        "--batch",
        "-b",
        help="With --signal: each task's main process only (a batch script's shell), not its "
        "whole process group (--full, the default).",
    ),
]
FullOpt = Annotated[bool, typer.Option("--full", "-f", help="With --signal: whole process groups.")]


def signal_jobs(
    client: Any, job_ids: list[str], signal: str | None, batch: bool, full: bool, as_json: bool
) -> None:
    """Signal each job's running tasks (``batch``: their main processes only), reporting a
    refused id and going on with the others, as cancel does."""
    from fusesched.cli.live import _fail, run_each
    from fusesched.submit.job_signal import signal_name

    if signal is None:
        _fail("--batch and --full go with --signal SIG (which signal to send)", 2)
    if batch and full:
        _fail("give --batch (main processes only) or --full (whole process groups), not both", 2)
    try:
        name = signal_name(signal)
    except ValueError as exc:
        _fail(f"--signal: {exc}", 2)
    run_each(
        client,
        job_ids,
        "job id",
        lambda c, j: c.signal_report(j, name, main_only=batch),
        as_json,
        lambda done: {
            "signalled": [j for a in done.values() for j in a["signalled"]],
            "signal": name,
            "skipped": {j: why for a in done.values() for j, why in a["skipped"].items()},
        },
        _said,
    )


def _said(job_id: str, answer: dict[str, Any]) -> str:
    """What ``cancel --signal`` prints for one id: whom it reached, and an array's members
    it skipped with why."""
    from fusesched.cli.id_lists import counted_ids

    line = f"Sent SIG{answer['signal']} to {counted_ids(answer['signalled'])}"
    skipped = answer["skipped"]
    if skipped:
        line += "; skipped " + "; ".join(f"{j} ({why})" for j, why in skipped.items())
    return line
