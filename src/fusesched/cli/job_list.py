"""``fusesched jobs`` (squeue's options and output formats, the formats and state names in
:mod:`fusesched.cli.squeue_format`) and ``fusesched show ARRAY_ID`` (an array's members)."""

from __future__ import annotations

import getpass
import sys
from typing import TYPE_CHECKING, Annotated, Any, Final, NamedTuple

import typer

from fusesched.cli.clusters import ClustersOpt
from fusesched.cli.live import (
    CaOpt,
    ControllerOpt,
    JsonOpt,
    TokenOpt,
    _call,
    _client,
    _fail,
    _print_json,
    console,
    err,
    jobs_table,
    refused,
)

if TYPE_CHECKING:
    from fusesched.cli.squeue_format import StateMatch

#: The most members ``show ARRAY_ID`` lists (what one ``GET /v1/jobs`` answers).
MAX_MEMBERS = 1000

ListOpt = list[str] | None


def _me(client: Any) -> tuple[list[str], bool]:
    """Who ``--me`` is: with a token, the controller says (``me=true``: its user); without
    one, the local user name (what a controller without authentication stores)."""
    if client.token:
        return [], True
    try:
        return [getpass.getuser()], False
    except (KeyError, OSError):  # a uid with no account and no USER/LOGNAME
        _fail("cannot tell who you are (no user name for this uid): set USER or use --user", 2)


def jobs(
    ctx: typer.Context,  # (its name: `jobs`, or Slurm's `squeue`)
    user: Annotated[
        ListOpt, typer.Option("--user", "-u", help="Only these users' jobs (a comma list).")
    ] = None,
    me: Annotated[
        bool,
        typer.Option(
            "--me", help="Only your jobs (the token's user; without a token, your user name)."
        ),
    ] = False,
    state: Annotated[
        ListOpt,
        typer.Option(
            "--state",
            "--states",
            "-t",
            help="Only jobs in these states (a comma list of Slurm's names or codes: PD, R, "
            "CG, CD, F, CA, TO, PR, PENDING, …, all). Default: every job; as `squeue`, the "
            "pending, running and completing ones (as Slurm's).",
        ),
    ] = None,
    queue: Annotated[
        ListOpt,
        typer.Option("--queue", "--partition", "-p", help="Only these queues' jobs (comma list)."),
    ] = None,
    job_ids: Annotated[
        ListOpt,
        typer.Option(
            "--jobs",
            "-j",
            help="Only these jobs (a comma list: 12, array members 13_2, whole arrays 13).",
        ),
    ] = None,
    name: Annotated[
        ListOpt, typer.Option("--name", "-n", help="Only jobs with these names (a comma list).")
    ] = None,
    array: Annotated[
        str | None, typer.Option(help="Only this array's members (as squeue -j ARRAY_ID).")
    ] = None,
    limit: Annotated[
        int,
        typer.Option(
            min=1,
            max=MAX_MEMBERS,
            help="At most this many rows (an array's waiting members shown as one: one row); "
            "a listing cut there says so on stderr (not with -h).",
        ),
    ] = 50,
    array_members: Annotated[
        bool,
        typer.Option(
            "--array-members",
            "-r",
            help="Each array member on its own row. Without it an array's members that wait "
            "(never started) for one reason are one row, 1009_[2-999%2], as squeue shows them "
            "without -r (Slurm's long name, --array, is our --array ARRAY_ID filter).",
        ),
    ] = False,
    start: Annotated[
        bool,
        typer.Option(
            "--start",
            help="The waiting jobs with their expected start times and nodes, soonest first "
            "(as squeue --start).",
        ),
    ] = False,
    fmt: Annotated[
        str | None,
        typer.Option(
            "--format",
            "-o",
            help='Plain lines in squeue\'s format: "%.10i %9P %20j %8u %2t %10M %6D %R" '
            "(fields, and the reasons %R gives a waiting job: see docs/LIVE.md).",
        ),
    ] = None,
    long_fmt: Annotated[
        str | None,
        typer.Option(
            "--Format", "-O", help='Plain lines in squeue\'s long format: "JobID,Name:30,State".'
        ),
    ] = None,
    noheader: Annotated[
        bool, typer.Option("--noheader", "-h", help="No header line (as squeue -h).")
    ] = False,
    clusters: ClustersOpt = None,  # (cli/clusters.py: checked, nothing else to do)
    controller_url: ControllerOpt = None,
    token: TokenOpt = None,
    ca: CaOpt = None,
    as_json: JsonOpt = False,
) -> None:
    """List jobs, newest first (squeue's -u -t -p -j -n --me -h -o -O -r are understood); an
    array's members that wait for one reason as one row, as squeue shows them."""
    from fusesched.cli import id_lists as il
    from fusesched.cli import squeue_format as sq

    try:
        users = il.comma_list(user, "user")
        queues = il.comma_list(queue, "queue")
        names = il.comma_list(name, "name")
        ids = il.job_ids(job_ids)
        if ctx.info_name == "squeue":  # (Slurm's defaults when called by its name)
            if not state and not start:
                state = [SQUEUE_DEFAULT]  # (the active jobs unless -t says more)
            if fmt is None and long_fmt is None and not as_json and not start:
                fmt = SQUEUE_FORMAT
        match = sq.parse_states(state) if state else None
        pieces = None
        if fmt is not None and long_fmt is not None:
            raise ValueError("give --format (-o) or --Format (-O), not both")
        # squeue --start by Slurm's name: squeue's start lines (%S the expected start)
        slurm_start = start and ctx.info_name == "squeue" and not as_json
        if slurm_start:
            from fusesched.cli import squeue_start

            pieces = squeue_start.parse(fmt, long_fmt)
        elif fmt is not None:
            pieces = sq.parse_format(fmt)
        elif long_fmt is not None:
            pieces = sq.parse_long_format(long_fmt)
    except ValueError as exc:  # (FormatError too)
        _fail(str(exc), 2)
    if pieces is not None and (as_json or start) and not slurm_start:
        _fail(f"--format prints plain lines: leave out {'--json' if as_json else '--start'}", 2)
    client = _client(controller_url, token, ca)
    ask_me = False
    if me:
        mine, ask_me = _me(client)
        users = [*users, *mine]
    if start:
        if state or ids or names:
            _fail("--start lists the waiting jobs: leave out --state, --jobs and --name", 2)
        if len(users) > 1 or len(queues) > 1 or ask_me:
            _fail(
                "--start takes at most one --user and one --queue (and --me only without a token)",
                2,
            )
        from fusesched.cli.starts import print_starts

        answer = _call(client.starts, users[0] if users else None, queues[0] if queues else None)
        answer["jobs"] = answer["jobs"][:limit]
        if as_json:
            _print_json(answer)
        elif slurm_start and pieces is not None:
            from fusesched.cli.squeue_start import print_starts as print_lines

            print_lines(client, answer, pieces, header=not noheader)
        else:
            print_starts(answer)
        return
    rows = not as_json  # (--json: a job an object, as before)
    asked = min(limit + 1, MAX_MEMBERS) if rows else limit  # (one more: was it cut?)
    combine = rows and not array_members
    if match is not None and not (match.states or match.phases or match.completing):
        found: list[dict[str, Any]] = []  # (-t S: a state no fusesched job is in)
    else:
        filters = Filters(users, match, queues, array, ids, names, ask_me)
        found = _list(client, filters, asked, combine)
    cut = False
    if rows:
        found, cut = _rows(found, asked, limit, combine)
    if match is not None:  # (a job shown CG only for -t CG: sq.matches)
        found = [job for job in found if sq.matches(match, job)]
    shown = len(found)
    if cut and not noheader:  # (-h: lines for a script, as squeue's; nothing else)
        more = (
            f"--limit N for more (at most {MAX_MEMBERS})"
            if limit < MAX_MEMBERS
            else "narrow it with -u, -t, -p, -j or -n"
        )
        err.print(f"fusesched: showing the newest {shown} rows; {more}", highlight=False)
    if as_json:
        _print_json(found)
    elif pieces is not None:
        if ctx.info_name == "squeue":  # (Slurm's reason codes: `%r` = Dependency)
            from fusesched.cli.slurm_reasons import job_reason

            found = [job | {"reason": job_reason(job)} for job in found]
            found = _expected_starts(client, pieces, found)
        lines = sq.render(pieces, found, header=not noheader)
        sys.stdout.write("".join(line + "\n" for line in lines))
    else:
        table = jobs_table(found)
        table.show_header = not noheader
        console.print(table)


def _expected_starts(
    client: Any, pieces: list[Any], found: list[dict[str, Any]]
) -> list[dict[str, Any]]:
    """squeue's ``%S`` of a waiting job is when it is expected to start (Slurm's, from its
    backfill pass; ``N/A`` when none is known): asked (``GET /v1/starts``) only when the
    format shows ``%S`` and a job waits; a controller that does not answer leaves ``N/A``."""
    from fusesched.cli import squeue_format as sq
    from fusesched.sdk import ControllerError

    shows = any(piece.field is sq.FIELDS["S"] for piece in pieces)
    if not shows or not any(job.get("state") == "Pending" for job in found):
        return found
    try:
        starts = client.starts()["jobs"]
    except (ControllerError, KeyError, TypeError):
        return found
    when = {str(s.get("id")): s.get("expected_start") for s in starts if isinstance(s, dict)}
    return [
        job | {"start_time": when[job["id"]]}
        if job.get("state") == "Pending" and job.get("id") in when
        else job
        for job in found
    ]


#: What Slurm's ``squeue`` lists without ``-t``: pending, running and completing jobs, not
#: the ended ones (which ``squeue -u $USER -h | wc -l`` in a throttling script must not
#: count); ``fusesched jobs`` lists every job.
SQUEUE_DEFAULT: Final = "PENDING,RUNNING,COMPLETING"
#: squeue's own default format, its lines when called by that name without ``-o``/``-O``.
SQUEUE_FORMAT: Final = "%.18i %.9P %.8j %.8u %.2t %.10M %.6D %R"


class Filters(NamedTuple):
    """What ``fusesched jobs`` asks ``GET /v1/jobs`` for (``match``: the states and phases,
    None: any; ``me``: the token's user)."""

    users: list[str]
    match: StateMatch | None
    queues: list[str]
    array: str | None
    ids: list[str]
    names: list[str]
    me: bool


def _list(client: Any, f: Filters, limit: int, combine: bool) -> list[dict[str, Any]]:
    """``GET /v1/jobs`` with the filters ``f``, at most ``limit`` rows; ``combine``: an
    array's waiting members as one row (``combine_arrays``)."""
    found: list[dict[str, Any]] = _call(
        client.jobs,
        f.users or None,
        f.match.states if f.match else (),
        f.queues or None,
        limit,
        f.array,
        phases=f.match.phases if f.match else (),
        ids=f.ids,
        names=f.names,
        me=f.me,
        completing=f.match.completing if f.match else False,
        combine_arrays=combine,
    )
    return found


def _rows(
    found: list[dict[str, Any]], asked: int, limit: int, combine: bool
) -> tuple[list[dict[str, Any]], bool]:
    """The rows to show of ``found`` (``asked`` for, ``limit`` to show) and whether the
    listing was cut. From a controller that does not combine (older than
    ``combine_arrays``), its members are combined here; then ``asked`` members answered
    mean there may be more."""
    from fusesched.cli.array_rows import combine as combined
    from fusesched.cli.array_rows import combined_answer

    more = len(found) >= asked  # (asked == limit at the most one listing holds: maybe more)
    if combine and not combined_answer(found):
        found = combined(found)
    return found[:limit], more or len(found) > limit


def show_array(client: Any, array_id: str, as_json: bool) -> bool:
    """Print the array ``array_id``'s members (a summary line by state, then a table, lowest
    index first) and answer True; False when it is no array the caller sees."""
    from fusesched.cli.id_lists import array_summary

    if not (array_id.isascii() and array_id.isdigit() and len(array_id) <= 18):
        return False  # (no job number has more digits: the 404 stands)
    members = _call(client.jobs, array=array_id, limit=MAX_MEMBERS)
    if not members:
        return False
    members.sort(key=lambda j: int(str(j["id"]).rpartition("_")[2] or 0))
    complete = len(members) < MAX_MEMBERS  # (else there may be more than one answer holds)
    if as_json:
        _print_json({"array": array_id, "members": members, "complete": complete})
        return True
    console.print(array_summary(array_id, members, complete), highlight=False)
    console.print(jobs_table(members))
    return True


def show_or_array(client: Any, job_id: str, as_json: bool) -> dict[str, Any] | None:
    """The job ``job_id`` (``GET /v1/jobs/ID``); for an array's id, its members printed and
    None. An unknown job fails with the controller's message."""
    from fusesched.sdk import ControllerError

    try:
        return dict(client.show(job_id))
    except ControllerError as exc:
        if exc.status == 404 and show_array(client, job_id, as_json):
            return None
        refused(exc)
