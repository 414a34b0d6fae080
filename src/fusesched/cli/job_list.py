"""``fusesched jobs`` (squeue's options and output formats: what a listing is to show in
:mod:`fusesched.cli.squeue_plan`, the formats in :mod:`fusesched.cli.squeue_format`, the
options of Slurm's that fusesched takes in :mod:`fusesched.cli.squeue_options`) and
``fusesched show ARRAY_ID`` (an array's members)."""

from __future__ import annotations

import getpass
import os
import sys
import time
from collections.abc import Callable
from typing import TYPE_CHECKING, Annotated, Any

import typer

from fusesched.cli import squeue_options as so
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
from fusesched.cli.slurm_version import VersionOpt
from fusesched.cli.squeue_plan import (
    EVERY,
    MIN_JOB_AGE_S,
    SQUEUE_DEFAULT,
    SQUEUE_FORMAT,
    Filters,
    Given,
    Plan,
)

if TYPE_CHECKING:
    from fusesched.cli.squeue_format import Piece

__all__ = ["SQUEUE_DEFAULT", "SQUEUE_FORMAT", "Filters", "jobs", "show_array", "show_or_array"]

#: The most members ``show ARRAY_ID`` lists (what one ``GET /v1/jobs`` answers).
MAX_MEMBERS = 1000

ListOpt = list[str] | None
Job = dict[str, Any]


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
            "--job",
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
        int | None,
        typer.Option(
            min=1,
            max=MAX_MEMBERS,
            help="At most this many rows (an array's waiting members shown as one: one row); "
            "a listing cut there says so on stderr (not with -h). Default: 50; as squeue, "
            "every job, as Slurm's squeue.",
            show_default=False,
        ),
    ] = None,
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
    account: so.AccountOpt = None,
    qos: so.QosOpt = None,
    nodelist: so.NodelistOpt = None,
    licenses: so.LicensesOpt = None,
    reservation: so.ReservationOpt = None,
    long: so.LongOpt = False,
    steps: so.StepsOpt = None,
    sort: so.SortOpt = None,
    iterate: so.IterateOpt = None,
    array_unique: so.ArrayUniqueOpt = False,
    as_yaml: so.YamlOpt = False,
    verbose: so.VerboseOpt = 0,
    noconvert: so.NoconvertOpt = False,
    all_partitions: so.AllOpt = False,  # (taken: no hidden partitions, no federation…)
    hide: so.HideOpt = False,
    local: so.LocalOpt = False,
    federation: so.FederationOpt = False,
    sibling: so.SiblingOpt = False,
    priority: so.PriorityOpt = False,
    version: VersionOpt = False,  # (eager: printed before anything else)
    usage: so.UsageOpt = False,
    clusters: ClustersOpt = None,  # (cli/clusters.py: checked, nothing else to do)
    controller_url: ControllerOpt = None,
    token: TokenOpt = None,
    ca: CaOpt = None,
    as_json: JsonOpt = False,
) -> None:
    """List jobs, newest first (as `squeue`: in squeue's order, and reading Slurm's SQUEUE_*
    variables; squeue's -u -t -p -j -n --me -h -o -O -r are understood, as is every other
    option of Slurm 22.05's squeue: -A -q -w -L -R filter, -l -S lay out and order, -s lists
    steps, -i repeats, --yaml); an array's members that wait for one reason as one row, as
    squeue shows them."""
    from fusesched.cli import squeue_env, squeue_plan

    given = Given(
        users=user,
        states=state,
        queues=queue,
        ids=job_ids,
        names=name,
        accounts=account,
        qos=qos,
        nodelist=nodelist,
        licenses=licenses,
        reservations=reservation,
        array=array,
        limit=limit,
        each_member=array_members or array_unique,
        start=start,
        fmt=fmt,
        long_fmt=long_fmt,
        long=long,
        noheader=noheader,
        sort=sort,
        steps=steps,
        as_json=as_json,
        as_yaml=as_yaml,
        iterate=iterate is not None,
        convert=not noconvert,
    )
    slurm = ctx.info_name == "squeue"
    try:
        if slurm:  # (SQUEUE_FORMAT, SQUEUE_USERS…: the options' defaults, as Slurm's)
            given = squeue_env.apply(given, os.environ, me=me, clusters_given=bool(clusters))
        plan = squeue_plan.plan(slurm, given)
    except squeue_env.EnvError as exc:
        _fail(str(exc), 1)
    except ValueError as exc:  # (FormatError too)
        _fail(str(exc), 2)
    client = _client(controller_url, token, ca)
    if me:
        mine, ask_me = _me(client)
        f = plan.filters
        plan = plan._replace(filters=f._replace(users=[*f.users, *mine], me=ask_me))
    if plan.start:
        _check_start(plan)
    if verbose:
        said = {"controller": getattr(client, "url", None), **squeue_plan.settings(plan)}
        lines = so.verbose_lines({**said, "iterate": iterate or 0, "verbose": verbose})
        err.print("\n".join(lines), highlight=False, markup=False)
    if iterate is None:
        _round(client, plan)
        return
    try:
        while True:  # (as squeue -i: until interrupted, a blank line after each listing)
            _round(client, plan)
            sys.stdout.write("\n")
            sys.stdout.flush()
            _pause(iterate)
    except KeyboardInterrupt:
        raise typer.Exit(130) from None


def _pause(seconds: float) -> None:
    """``-i``'s wait between listings."""
    time.sleep(seconds)


def _check_start(p: Plan) -> None:
    """``--start`` in fusesched's table, JSON or YAML lists the waiting jobs of at most one
    user and one queue (what ``GET /v1/starts`` filters by); squeue's lines take every
    filter and ``-S`` (:mod:`fusesched.cli.squeue_start`)."""
    if p.out == "lines":
        return
    f = p.filters
    if f.match is not None or f.ids or f.names:
        _fail("--start lists the waiting jobs: leave out --state, --jobs and --name", 2)
    if len(f.users) > 1 or len(f.queues) > 1 or f.me:
        _fail("--start takes at most one --user and one --queue (and --me only without a token)", 2)
    if (p.local.active() or p.order) and p.out != "lines":
        _fail("-A, -q, -w, -L, -R and -S with --start: only in squeue's lines (squeue --start)", 2)


def _round(client: Any, p: Plan) -> None:
    """Ask for and print one listing (``-i``: one of many)."""
    if p.steps is not None:
        _steps_round(client, p)
    elif p.start:
        _start_round(client, p)
    else:
        _jobs_round(client, p)


#: ``-R`` of a controller whose job views do not say their reservation.
NO_RESERVATIONS = (
    "this controller does not show which reservation a job runs in: --reservation (-R) "
    "cannot filter its jobs"
)


def _jobs_round(client: Any, p: Plan) -> None:
    from fusesched.cli import squeue_format as sq

    rows = p.out in ("table", "lines")  # (--json, --yaml: a job an object, as before)
    filtered = p.local.active()  # (-A -q -w -L -R: read the newest jobs, keep those matching)
    top = EVERY if p.limit >= EVERY else MAX_MEMBERS  # (EVERY: page through them all)
    asked = top if filtered else min(p.limit + 1, top) if rows else p.limit
    match, since = p.filters.match, _since(p)
    if match is not None and not (match.states or match.phases or match.completing):
        found: list[Job] = []  # (-t S: a state no fusesched job is in)
    else:
        found = _list(client, p.filters, asked, p.combine, since)
    if p.local.unknown_reservations(found):
        _fail(NO_RESERVATIONS, 1)
    more, cut = len(found) >= asked, False
    if rows or filtered:
        found, cut = _rows(found, asked, p.limit, p.combine, p.local.keep if filtered else None)
    if match is not None:  # (a job shown CG only for -t CG: sq.matches)
        found = [job for job in found if sq.matches(match, job)]
    if cut and rows and p.header:  # (-h: lines for a script, as squeue's; nothing else)
        if filtered and more:
            said = f"of the newest {MAX_MEMBERS} jobs; narrow it with -u, -t, -p, -j or -n"
        elif p.limit < MAX_MEMBERS:
            said = f"rows; --limit N for more (at most {MAX_MEMBERS})"
        else:
            said = "rows; narrow it with -u, -t, -p, -j or -n"
        err.print(f"fusesched: showing the newest {len(found)} {said}", highlight=False)
    if not found and p.slurm and rows:
        _unknown_job(client, p.filters.ids, since)
    if p.out == "lines":
        found = _enriched(client, p, found)
    if p.order:
        from fusesched.cli.squeue_sort import sort_rows

        found = sort_rows(found, p.order, sq.FIELDS)
    _emit(found, p)


def _enriched(client: Any, p: Plan, found: list[Job]) -> list[Job]:
    """Slurm's lines' values the listing does not hold: by Slurm's name, its reason codes
    (``%r`` = ``Dependency``) and waiting jobs' expected starts (``%S``); ``%m``."""
    from fusesched.cli import squeue_extra

    assert p.pieces is not None
    if p.slurm:
        from fusesched.cli.slurm_reasons import job_reason

        found = [job | {"reason": job_reason(job)} for job in found]
        found = squeue_extra.expected_starts(client, p.pieces, found)
    return squeue_extra.asked_memory(client, p.pieces, found, p.convert)


def _unknown_job(client: Any, ids: list[str], since: float | None) -> None:
    """Slurm's squeue asked for one job it does not know (``-j 99999``) says so and exits 1,
    which tools read (Open OnDemand takes such a job for ended); one it knows that the
    filters leave out is an empty listing. ``since`` (:func:`_since`): a job ended before
    then is one Slurm's controller has forgotten (``MinJobAge``), not known either."""
    if len(ids) != 1 or _call(client.jobs, ids=ids, limit=1, since=since):
        return
    err.print("slurm_load_jobs error: Invalid job id specified", highlight=False, markup=False)
    raise typer.Exit(1)


def _start_round(client: Any, p: Plan) -> None:
    """``--start``: the waiting jobs' expected starts, soonest first (by Slurm's name,
    squeue's lines: :mod:`fusesched.cli.squeue_start`)."""
    f = p.filters
    if p.out != "lines":
        answer = _call(
            client.starts, f.users[0] if f.users else None, f.queues[0] if f.queues else None
        )
        answer["jobs"] = answer["jobs"][: p.limit]
        if p.out == "table":
            from fusesched.cli.starts import print_starts

            print_starts(answer)
        else:
            _emit(answer, p)
        return
    from fusesched.cli import squeue_extra, squeue_start

    assert p.pieces is not None
    every = EVERY if p.limit >= EVERY else MAX_MEMBERS
    since = _since(p)
    views = _list(client, f, every, False, since)  # (each array member: its own start)
    if p.local.unknown_reservations(views):
        _fail(NO_RESERVATIONS, 1)
    found = squeue_start.start_rows(client, p, views)
    if not found:
        _unknown_job(client, f.ids, since)
    if len(found) > p.limit and p.header:  # (cut after the order: the soonest shown)
        err.print(
            f"fusesched: showing the first {p.limit} of {len(found)} rows; --limit N for more "
            f"(at most {MAX_MEMBERS})",
            highlight=False,
        )
    found = squeue_extra.asked_memory(client, p.pieces, found[: p.limit], p.convert)
    _emit(found, p)


def _steps_round(client: Any, p: Plan) -> None:
    """``-s``: the running jobs' steps (:mod:`fusesched.cli.squeue_steps`)."""
    from fusesched.cli import squeue_steps as ss

    assert p.steps is not None
    found, more = ss.steps_of(client, p.filters, p.steps, p.local.nodes, MAX_MEMBERS)
    if more and p.header and p.out == "lines":
        err.print(
            f"fusesched: the steps of the newest {MAX_MEMBERS} running jobs; narrow it with -u, "
            "-p, -j or -s",
            highlight=False,
        )
    _emit(ss.ordered(found, p.order), p)


def _emit(data: Any, p: Plan) -> None:
    """Print a listing as ``p`` says: Slurm's lines (after a date line for ``-l``/``-i``),
    fusesched's table, JSON or YAML."""
    if p.out == "json":
        _print_json(data)
    elif p.out == "yaml":
        import yaml

        sys.stdout.write(yaml.safe_dump(data, sort_keys=False, allow_unicode=True))
    elif p.out == "lines":
        from fusesched.cli import squeue_format as sq

        pieces: list[Piece] = p.pieces or []
        lines = sq.render(pieces, data, header=p.header)
        if p.dated and p.header:  # (as squeue -l and -i: the date, then the header)
            lines.insert(0, time.strftime("%a %b %d %H:%M:%S %Y"))
        sys.stdout.write("".join(line + "\n" for line in lines))
    else:
        table = jobs_table(data)
        table.show_header = p.header
        console.print(table)


def _since(p: Plan) -> float | None:
    """By Slurm's name, the jobs not ended before :data:`MIN_JOB_AGE_S` ago (``-t all``, ``-t
    CD``: the ended jobs Slurm's controller still holds, not the whole history); else all."""
    return time.time() - MIN_JOB_AGE_S if p.slurm else None


def _list(
    client: Any, f: Filters, limit: int, combine: bool, since: float | None = None
) -> list[dict[str, Any]]:
    """``GET /v1/jobs`` with the filters ``f``, at most ``limit`` rows, newest first;
    ``since``: those not ended before then;
    ``combine``: an array's waiting members as one row (``combine_arrays``). Past one
    answer's :data:`MAX_MEMBERS`, a page after another (:data:`EVERY`: to the last), each
    after the last row's ``seq`` (a combined row's: its newest member's, and the controller
    lists such a row whole on that member's page: no row straddles two pages, and an array
    of 100,000 waiting members is one row to read, with its throttle, ``1_[0-99999%2]``). A
    controller older than ``combine_arrays`` answers a row a member: combined here, once
    every page is read."""

    def page(size: int, before: int | None, combined: bool) -> list[Job]:
        listed: list[Job] = _call(
            client.jobs,
            f.users or None,
            f.match.states if f.match else (),
            f.queues or None,
            size,
            f.array,
            phases=f.match.phases if f.match else (),
            ids=f.ids,
            names=f.names,
            me=f.me,
            completing=f.match.completing if f.match else False,
            combine_arrays=combined,
            before=before,
            since=since,
        )
        return listed

    if limit <= MAX_MEMBERS:
        return page(limit, None, combine)
    found: list[Job] = []
    before: int | None = None
    while len(found) < limit:
        size = min(MAX_MEMBERS, limit - len(found))
        listed = page(size, before, combine)
        found.extend(listed)
        if len(listed) < size or not isinstance(listed[-1].get("seq"), int):
            break  # (the last page; or an older controller, whose jobs carry no seq)
        before = listed[-1]["seq"]
    if combine:
        from fusesched.cli.array_rows import combine as combined
        from fusesched.cli.array_rows import combined_answer

        if not combined_answer(found):
            found = combined(found)
    return found


def _rows(
    found: list[Job],
    asked: int,
    limit: int,
    combine: bool,
    keep: Callable[[Job], bool] | None = None,
) -> tuple[list[Job], bool]:
    """The rows to show of ``found`` (``asked`` for, ``limit`` to show; ``keep``: those it
    keeps only) and whether the listing was cut. From a controller that does not combine
    (older than ``combine_arrays``), its members are combined here; then ``asked`` members
    answered mean there may be more."""
    from fusesched.cli.array_rows import combine as combined
    from fusesched.cli.array_rows import combined_answer

    more = len(found) >= asked  # (asked == limit at the most one listing holds: maybe more)
    if combine and not combined_answer(found):
        found = combined(found)
    if keep is not None:
        found = [job for job in found if keep(job)]
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
