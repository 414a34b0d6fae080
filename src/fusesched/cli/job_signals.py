"""``fusesched cancel --signal SIG JOB...``: send running jobs a signal (Slurm's ``scancel
--signal``); they keep running. The options are the ``cancel`` command's (cli/live.py); like
it, this imports nothing heavy until it runs.

Which processes get it (:func:`target_of`): ``-b/--batch`` each task's main process (of a
batch script's job, its shell alone, Slurm's batch step), ``-f/--full`` every task's whole
process group. Without either, ``fusesched cancel`` signals as ``--full`` (its documented
default), and ``fusesched scancel`` as Slurm 22.05's scancel: a batch script's job steps
alone (each ``srun``'s tasks), not its shell, so a shell that does not trap the signal is not
killed by it; a job with no step running is sent nothing (no error); a job without a script
(a YAML job, ``fusesched run``) has its tasks signalled whole (they are its step).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Annotated, Any, Final

import typer

SignalOpt = Annotated[
    str | None,
    typer.Option(
        "--signal",
        "-s",
        help="Do not cancel: send the running tasks this signal (USR1, SIGUSR1, 10), as "
        "scancel --signal; the jobs keep running. As `cancel`, every process of each job "
        "(as --full); as `scancel`, as Slurm's: a batch script's job steps (its srun tasks) "
        "alone, not its shell.",
    ),
]
BatchOpt = Annotated[
    bool,
    typer.Option(
        "--batch",
        "-b",
        help="With --signal: each task's main process only (a batch script's shell alone, "
        "not its steps).",
    ),
]
FullOpt = Annotated[
    bool,
    typer.Option(
        "--full", "-f", help="With --signal: every task's whole process group (the shell too)."
    ),
]

#: Which of a job's processes a signal goes to (:func:`target_of`).
STEPS: Final = "steps"  # a batch script's steps alone (Slurm's scancel without -b or -f)
BATCH: Final = "batch"  # each task's main process (a batch script's shell alone): -b
FULL: Final = "full"  # every task's whole process group: -f

Sender = Callable[[Any, str], dict[str, Any]]


def target_of(batch: bool, full: bool, slurm: bool) -> str:
    """Whom ``-b``/``-f`` ask to signal (``-f`` wins, as Slurm ignores ``-b`` with it);
    neither: :data:`STEPS` by Slurm's name (``slurm``), else :data:`FULL`."""
    if full:
        return FULL
    if batch:
        return BATCH
    return STEPS if slurm else FULL


def checked_name(signal: str) -> str:
    """The bare name of ``signal`` (``USR1``); exit 2 for a bad one, saying why."""
    from fusesched.cli.live import _fail
    from fusesched.submit.job_signal import signal_name

    try:
        return signal_name(signal)
    except ValueError as exc:
        _fail(f"--signal: {exc}", 2)


def send(client: Any, job_id: str, name: str, target: str) -> dict[str, Any]:
    """Signal ``job_id``'s running processes that ``target`` names: the controller's answer
    (``{"signalled": [ids], "signal": "USR1", "skipped": {id: why}}``)."""
    if target != STEPS:
        return dict(client.signal_report(job_id, name, main_only=target == BATCH))
    return steps_report(client, job_id, name)


def steps_report(client: Any, job_id: str, name: str) -> dict[str, Any]:
    """Signal a batch script's job steps alone (``steps_only``, POST /v1/jobs/{id}/signal);
    a controller older than that field is a ``ControllerError`` saying what to do."""
    from fusesched.client_base import ControllerError, older_than
    from fusesched.sdk_transport import path_segment

    body = {"signal": name, "steps_only": True}
    try:
        answer = dict(client._call("POST", f"/v1/jobs/{path_segment(job_id)}/signal", body))
    except ControllerError as exc:
        if older_than(exc, "steps_only"):
            raise ControllerError(
                exc.status,
                "this controller is too old to signal a job's steps alone (Slurm's scancel "
                "--signal without -b or -f): upgrade it, or give -f (every process of the "
                "job) or -b (the batch shell)",
            ) from None
        raise
    answer.setdefault("skipped", {})
    return answer


def quieted(sender: Sender) -> Sender:
    """``-Q``: ``sender``, but a job that is unknown or gone (404) is signalled nothing."""
    from fusesched.client_base import ControllerError

    def quiet(client: Any, job_id: str) -> dict[str, Any]:
        try:
            return sender(client, job_id)
        except ControllerError as exc:
            if exc.status != 404:
                raise
            return {"signalled": [], "signal": "", "skipped": {}}

    return quiet


def signal_jobs(
    client: Any, job_ids: list[str], name: str, target: str, as_json: bool, quiet: bool = False
) -> None:
    """Signal each job's running processes that ``target`` names, reporting a refused id and
    going on with the others, as cancel does (``quiet``: an unknown one is none)."""
    from fusesched.cli.live import run_each

    def sender(c: Any, job_id: str) -> dict[str, Any]:
        return send(c, job_id, name, target)

    run_each(
        client,
        job_ids,
        "job id",
        quieted(sender) if quiet else sender,
        as_json,
        lambda done: {
            "signalled": [j for a in done.values() for j in a["signalled"]],
            "signal": name,
            "skipped": {j: why for a in done.values() for j, why in a["skipped"].items()},
        },
        _said,
    )


def _said(job_id: str, answer: dict[str, Any]) -> str | None:
    """What ``cancel --signal`` prints for one id: whom it reached, and an array's members
    it skipped with why (``-Q``, an unknown one: nothing)."""
    from fusesched.cli.id_lists import counted_ids

    if not answer["signalled"] and not answer["skipped"]:
        return None
    line = f"Sent SIG{answer['signal']} to {counted_ids(answer['signalled'])}"
    skipped = answer["skipped"]
    if skipped:
        line += "; skipped " + "; ".join(f"{j} ({why})" for j, why in skipped.items())
    return line
