"""``fusesched sacct``: what happened to jobs in a time window, as Slurm's sacct prints it.

The rows come from ``GET /v1/jobs`` (``since``/``until``: the window; the same filters as
``fusesched jobs``); fields that need what a job used (MaxRSS, TotalCPU, ReqMem, NTasks,
AllocTRES) ask ``GET /v1/jobs/{id}/efficiency`` once a job, only when the format names them.
States, fields and outputs are in :mod:`fusesched.cli.sacct_format`, the times in
:mod:`fusesched.cli.sacct_time`.
"""

from __future__ import annotations

import sys
import time
from typing import Annotated, Any

import typer

from fusesched.cli.live import CaOpt, ControllerOpt, TokenOpt, _call, _client, _fail, _print_json

ListOpt = list[str] | None
#: The most jobs one ``GET /v1/jobs`` answers (the controller's limit).
MAX_LIMIT = 1000


def sacct(
    starttime: Annotated[
        str | None,
        typer.Option(
            "--starttime",
            "-S",
            help="Jobs waiting or running at or after this time (default: 00:00 today; with "
            "--jobs: any time). now, now-2days, HH:MM, YYYY-MM-DD[THH:MM[:SS]], MMDD, MM/DD…",
            show_default=False,
        ),
    ] = None,
    endtime: Annotated[
        str | None,
        typer.Option(
            "--endtime",
            "-E",
            help="Jobs submitted at or before this time (default: now); forms as -S.",
            show_default=False,
        ),
    ] = None,
    user: Annotated[
        ListOpt,
        typer.Option(
            "--user",
            "-u",
            help="These users' jobs (a comma list; default: yours, or with --jobs anyone's).",
        ),
    ] = None,
    allusers: Annotated[
        bool,
        typer.Option("--allusers", "-a", help="Every user's jobs (that you may see)."),
    ] = False,
    job_ids: Annotated[
        ListOpt,
        typer.Option("--jobs", "-j", help="These jobs (12, array members 12_3, whole arrays 12)."),
    ] = None,
    state: Annotated[
        ListOpt,
        typer.Option(
            "--state",
            "-s",
            help="Jobs in these states now (CD, F, CA, TO, PD, R, NF, PR, OOM, DL or the long "
            "names).",
        ),
    ] = None,
    partition: Annotated[
        ListOpt, typer.Option("--partition", "-r", help="These queues' jobs (a comma list).")
    ] = None,
    accounts: Annotated[
        ListOpt, typer.Option("--accounts", "-A", help="These tenants' jobs (a comma list).")
    ] = None,
    name: Annotated[ListOpt, typer.Option("--name", help="Jobs with these names.")] = None,
    fmt: Annotated[
        str | None,
        typer.Option(
            "--format",
            "-o",
            envvar="SACCT_FORMAT",
            help="Fields, as JobID,JobName%30,State,Elapsed (sacct's names, any case; %N: width, "
            "%-N: left-justified; list: docs/LIVE.md) (default: SACCT_FORMAT, else JobID, "
            "JobName, Partition, Account, AllocCPUS, State, ExitCode).",
            show_default=False,
            show_envvar=False,
        ),
    ] = None,
    parsable: Annotated[
        bool, typer.Option("--parsable", "-p", help="Values separated by |, one after the last.")
    ] = False,
    parsable2: Annotated[
        bool, typer.Option("--parsable2", "-P", help="Values separated by |, none after the last.")
    ] = False,
    noheader: Annotated[bool, typer.Option("--noheader", "-n", help="No header lines.")] = False,
    allocations: Annotated[
        bool,
        typer.Option(
            "--allocations", "-X", help="Only the jobs, not their steps (always so: no steps)."
        ),
    ] = False,
    limit: Annotated[
        int, typer.Option(min=1, max=MAX_LIMIT, help="At most this many jobs, the newest.")
    ] = MAX_LIMIT,
    as_json: Annotated[
        bool, typer.Option("--json", help="A JSON list: an object a job, the fields as keys.")
    ] = False,
    controller_url: ControllerOpt = None,
    token: TokenOpt = None,
    ca: CaOpt = None,
) -> None:
    """Accounting of jobs in a time window, oldest first (as Slurm's sacct: -S -E -u -a -j
    -s -r -A --name -o -p -P -n -X)."""
    from fusesched.cli import sacct_format as sf
    from fusesched.cli import squeue_format as sq
    from fusesched.cli.sacct_time import parse_sacct_time

    del allocations  # (fusesched keeps no steps: every listing is of allocations)
    now = time.time()
    try:
        users = sq.comma_list(user, "user")
        ids = sq.job_ids(job_ids)
        wanted = sf.parse_states(state) if state else None
        columns = sf.parse_format(fmt if fmt is not None else sf.DEFAULT_FORMAT)
        since = None if starttime is None else parse_sacct_time(starttime, now, what="--starttime")
        until = None if endtime is None else parse_sacct_time(endtime, now, what="--endtime")
        queues = sq.comma_list(partition, "partition")
        tenants = sq.comma_list(accounts, "account")
        names = sq.comma_list(name, "name")
    except ValueError as exc:
        _fail(str(exc), 2)
    if parsable and parsable2:
        _fail("give --parsable (-p) or --parsable2 (-P), not both", 2)
    if as_json and (parsable or parsable2):
        _fail("--json prints JSON: leave out --parsable", 2)
    if since is None and not ids:
        since = _midnight(now)  # (sacct's default; with --jobs: any time)
    if since is not None and until is not None and since > until:
        _fail(f"--starttime ({_shown(since)}) is after --endtime ({_shown(until)})", 2)
    client = _client(controller_url, token, ca)
    ask_me = False
    if not users and not allusers and not ids:  # (sacct's default: your jobs; named: any)
        from fusesched.cli.job_list import _me

        users, ask_me = _me(client)
    found: list[dict[str, Any]] = []
    if wanted is None or wanted:
        match = sf.state_query(wanted or ())
        query = {
            "user": users or None,
            "states": match.states,
            "queue": queues or None,
            "limit": limit,
            "phases": match.phases,
            "ids": ids,
            "names": names,
            "me": ask_me,
            "since": _after_1970(since),
            "until": _after_1970(until),
        }
        found = _gather(client, query, tenants, limit)
    if wanted is not None:
        found = [job for job in found if sf.sacct_state(job) in wanted]
    found.sort(key=_id_order)
    usage = _usage(client, found) if sf.needs_usage(columns) else {}
    rows = [sf.values(columns, job, usage.get(job["id"], {}), now) for job in found]
    if as_json:
        _print_json(sf.records(columns, rows))
        return
    if parsable or parsable2:
        lines = sf.parsable(columns, rows, header=not noheader, trailing=parsable)
    else:
        lines = sf.table(columns, rows, header=not noheader)
    sys.stdout.write("".join(line + "\n" for line in lines))


def _gather(
    client: Any, query: dict[str, Any], tenants: list[str], limit: int
) -> list[dict[str, Any]]:
    """The jobs ``query`` asks for (one request per tenant of ``tenants``, or one for all),
    each once; a note on stderr when an answer is full (older jobs of the window are left
    out)."""
    found: dict[str, dict[str, Any]] = {}
    each: list[str | None] = [*tenants] or [None]
    for tenant in each:
        answer: list[dict[str, Any]] = _call(client.jobs, tenant=tenant, **query)
        if len(answer) >= limit:
            print(
                f"note: only the newest {limit} jobs{f' of {tenant}' if tenant else ''} are "
                "shown: narrow the window (-S/-E) or the filters",
                file=sys.stderr,
            )
        found.update((job["id"], job) for job in answer)
    return list(found.values())


def _usage(client: Any, jobs: list[dict[str, Any]]) -> dict[str, dict[str, Any]]:
    """Each job's efficiency view by id (what it used); a job that is gone meanwhile has
    none (its fields stay blank)."""
    from fusesched.sdk import ControllerError

    out: dict[str, dict[str, Any]] = {}
    for job in jobs:
        try:
            out[job["id"]] = dict(client.efficiency(job["id"]))
        except ControllerError as exc:
            if exc.status != 404:
                _fail(str(exc), 2 if 400 <= exc.status < 500 else 1)
    return out


def _id_order(job: dict[str, Any]) -> tuple[int, int]:
    """Job ids in submission order: ``12`` before ``12_1`` before ``12_2`` before ``13``."""
    head, _, index = str(job["id"]).partition("_")
    return (int(head) if head.isdigit() else 0, int(index) if index.isdigit() else -1)


def _after_1970(t: float | None) -> float | None:
    """``t`` as the API takes it (Unix times are not negative): a time before 1970 is its
    start (``-S 1960-01-01``: any time)."""
    return None if t is None else max(t, 0.0)


def _midnight(now: float) -> float:
    day = time.localtime(now)
    return time.mktime((day.tm_year, day.tm_mon, day.tm_mday, 0, 0, 0, 0, 0, -1))


def _shown(t: float) -> str:
    return time.strftime("%Y-%m-%dT%H:%M:%S", time.localtime(t))


def register(app: typer.Typer) -> None:
    """Add ``fusesched sacct`` to the ``fusesched`` command."""
    app.command(rich_help_panel="Jobs and cluster")(sacct)
