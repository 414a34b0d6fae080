"""scancel's options beyond its filters of :mod:`fusesched.cli.cancel_filters`: ``-i``
(confirm each job), ``-v``, ``-Q``, ``-H``, the refusals of ``-R`` and ``--wckey``, and
``-b``/``-f`` without ``--signal``.

Slurm's scancel sends KILL unless ``--signal`` says another signal, so ``-f/--full`` alone
ends the job (CANCELLED, as a plain scancel) and ``-b/--batch`` alone kills its batch shell,
which ends it too (Slurm: FAILED, ``ExitCode=0:9``; a waiting job is cancelled). Here both
cancel the job: fusesched's signal route does not send KILL (it is for signals a job can
catch), so a running job's tasks get SIGTERM, then SIGKILL after the grace, and it ends
CANCELLED (cli/job_cancel.py: without ``--signal`` they change nothing but the words of
``scancel -v``, ``Terminating batch job 5``). ``-b`` with ``-f`` is ``-f``, as Slurm ignores
``-b`` then. Like the command's other modules, this imports nothing heavy until it runs.
"""

from __future__ import annotations

import sys
from collections.abc import Callable
from typing import Annotated, Any, TextIO

import typer

ListOpt = list[str] | None
AccountOpt = Annotated[
    ListOpt,
    typer.Option("--account", "-A", help="Only these accounts' (tenants') jobs (a comma list)."),
]
QosOpt = Annotated[
    ListOpt, typer.Option("--qos", "-q", help="Only jobs of these QoS (a comma list).")
]
NodelistOpt = Annotated[
    str | None,
    typer.Option(
        "--nodelist",
        "-w",
        help="Only jobs running on any of these nodes (a host list: n[1-4],gpu1; with a '/', "
        "a file of them).",
        show_default=False,
    ),
]
ReservationOpt = Annotated[
    str | None,
    typer.Option("--reservation", "-R", help="Not supported here (refused).", hidden=True),
]
WckeyOpt = Annotated[
    str | None, typer.Option("--wckey", help="Not supported here (refused).", hidden=True)
]
InteractiveOpt = Annotated[
    bool,
    typer.Option("--interactive", "-i", help="Ask before each job: Cancel job_id=… name=… [y/n]?"),
]
VerboseOpt = Annotated[
    int,
    typer.Option(
        "--verbose",
        "-v",
        count=True,
        help="As `scancel`, say what was done as Slurm's does, on stderr (scancel: "
        "Terminating job 5); `cancel` says it anyway.",
    ),
]
QuietOpt = Annotated[
    bool, typer.Option("--quiet", "-Q", help="Do not report a job that is unknown or gone.")
]
HurryOpt = Annotated[
    bool, typer.Option("--hurry", "-H", help="Accepted: fusesched stages out no burst buffer.")
]


def refuse_unsupported(
    reservation: str | None, wckey: str | None, quiet: bool, verbose: int
) -> None:
    """Exit 2 for what cannot be done here, saying why."""
    from fusesched.cli.live import _fail

    if reservation is not None:
        _fail(
            "-R/--reservation is not supported here: fusesched's job listing does not say a "
            "job's reservation, so no job can be matched by one (name the jobs, or filter by "
            "-u, -n, -p, -t, -A, -q, -w)",
            2,
        )
    if wckey is not None:
        _fail(
            "--wckey is not supported here: fusesched keeps no workload characterization "
            "keys (sbatch --wckey is not kept), so no job can be matched by one",
            2,
        )
    if quiet and verbose:
        _fail("-Q/--quiet and -v/--verbose do not go together (as in Slurm)", 2)


class QuietClient:
    """``-Q``: the client, but a job that is unknown or gone (404) is none, not an error, when
    cancelled (signals: :func:`fusesched.cli.job_signals.quieted`)."""

    def __init__(self, client: Any) -> None:
        self._client = client

    def __getattr__(self, name: str) -> Any:
        return getattr(self._client, name)

    def cancel(self, job_id: str) -> list[str]:
        return list(self._quiet(lambda: self._client.cancel(job_id), []))

    @staticmethod
    def _quiet(call: Callable[[], Any], none: Any) -> Any:
        from fusesched.sdk import ControllerError

        try:
            return call()
        except ControllerError as exc:
            if exc.status != 404:
                raise
            return none


def prompt(view: dict[str, Any], ask: TextIO, answer: TextIO) -> bool | None:
    """``-i``: ask as Slurm's scancel (``Cancel job_id=12 name=x partition=p [y/n]? ``) until
    a line starts with y or n; None at the end of the input (no more to ask)."""
    while True:
        ask.write(
            f"Cancel job_id={view['id']} name={view.get('name') or ''} "
            f"partition={view.get('queue') or ''} [y/n]? "
        )
        ask.flush()
        line = answer.readline()
        if not line:
            ask.write("\n")
            return None
        if line[:1] in ("y", "Y"):
            return True
        if line[:1] in ("n", "N"):
            return False


def confirmed(views: list[dict[str, Any]]) -> list[str]:
    """The ids of ``views`` the user says yes to, asked one by one (the end of the input:
    no to the rest)."""
    chosen: list[str] = []
    for view in views:
        said = prompt(view, sys.stdout, sys.stdin)
        if said is None:
            break
        if said:
            chosen.append(str(view["id"]))
    return chosen


def views_of(client: Any, job_ids: list[str]) -> tuple[list[dict[str, Any]], int]:
    """``-i`` with ids: each job's view to ask about (an array's id: its unfinished members);
    an unknown id said on stderr, with the exit status it gives (2)."""
    from fusesched.cli.live import err
    from fusesched.sdk import ControllerError

    views: list[dict[str, Any]] = []
    code = 0
    for job_id in job_ids:
        try:
            views.append(client.show(job_id))
            continue
        except ControllerError as exc:
            if exc.status != 404:
                raise
        unfinished = ["Pending", "Running"]
        members = (
            client.jobs(array=job_id, limit=10_000, states=unfinished)
            if job_id.isascii() and job_id.isdigit()
            else []
        )
        if not members:
            err.print(f"[red]error:[/] Invalid job id {job_id}", highlight=False)
            code = 2
        views.extend(reversed(members))
    return views, code
