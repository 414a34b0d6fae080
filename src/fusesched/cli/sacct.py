"""``fusesched sacct``: what happened to jobs in a time window, as Slurm's sacct prints it.

The rows come from ``GET /v1/jobs`` (``since``/``until``: the window; the same filters as
``fusesched jobs``), a page of :data:`PAGE` jobs after another (``before``: the last one's
``seq``) until the window's jobs are all read; with their restarts and their steps summarised
by the controller (``steps``: a line a step, however many tasks a step ran) unless ``-X``
leaves out the steps and no field needs them; from a controller older than summaries, with
their tasks (``detail``), summarised here. Fields that need what a job used
(MaxRSS, TotalCPU, ReqMem, NTasks, AllocTRES) ask ``GET /v1/jobs/{id}/efficiency`` once a
job, only when the format names them; fields of each task's figures of a step (AveRSS,
MinCPU, …: :data:`fusesched.cli.sacct_usage.PER_TASK`) ask for the jobs' tasks instead of
the summaries. States and outputs are in :mod:`fusesched.cli.sacct_format`, the fields (and
``-e``'s list) in :mod:`fusesched.cli.sacct_fields`, the steps in
:mod:`fusesched.cli.sacct_steps`, the times in :mod:`fusesched.cli.sacct_time`; the other
options of Slurm 22.05's sacct in :mod:`fusesched.cli.sacct_opts`, what its selecting
options keep (``-N``, ``-q``, ``-g``, ``-i``, ``-k``…) and its field lists (``-b``, ``-l``,
``-c``) in :mod:`fusesched.cli.sacct_select`, ``--yaml``, ``-B`` and ``--env-vars`` in
:mod:`fusesched.cli.sacct_output`. An array's members that wait and never started, for one
reason, are one row (``12_[3-9]``), as Slurm's sacct shows an array's pending tasks;
``--array`` shows each.
"""

from __future__ import annotations

import os
import sys
import time
from typing import Annotated, Any

import typer

from fusesched.cli import sacct_opts as so
from fusesched.cli.clusters import ClustersOpt
from fusesched.cli.id_lists import comma_list
from fusesched.cli.live import (
    CaOpt,
    ControllerOpt,
    TokenOpt,
    _call,
    _client,
    _fail,
    _print_json,
    refused,
)
from fusesched.cli.slurm_version import VersionOpt

ListOpt = list[str] | None
#: Jobs asked for in one ``GET /v1/jobs`` (the most the controller answers).
PAGE = 1000


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
            "--uid",
            "-u",
            help="These users' jobs (a comma list of names or uids; -1: everyone's; default: "
            "yours, or with --jobs or --nodelist anyone's).",
        ),
    ] = None,
    allusers: Annotated[
        bool,
        typer.Option("--allusers", "-a", help="Every user's jobs (that you may see)."),
    ] = False,
    job_ids: Annotated[
        ListOpt,
        typer.Option(
            "--jobs",
            "-j",
            help="These jobs (12, array members 12_3, whole arrays 12) or only these steps "
            "of them (12.0, 12.batch).",
        ),
    ] = None,
    state: Annotated[
        ListOpt,
        typer.Option(
            "--state",
            "-s",
            help="Jobs in these states now (CD, F, CA, TO, PD, R, NF, PR, OOM, DL, BF, RQ, RS, "
            "RV, S or the long names).",
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
        ListOpt,
        typer.Option(
            "--format",
            "--fields",
            "-o",
            help="Fields, as JobID,JobName%30,State,Elapsed (sacct's names or their starts, any "
            "case; ALL; %N: width, %-N: left-justified; list: -e, docs/LIVE.md) (default: "
            "SACCT_FORMAT, else JobID, JobName, Partition, Account, AllocCPUS, State, "
            "ExitCode).",
            show_default=False,
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
            "--allocations",
            "-X",
            "-t",
            help="Only the jobs, not their steps (ID.batch, salloc's ID.extern, ID.0, ID.1…: "
            "each srun in a job).",
        ),
    ] = False,
    limit: Annotated[
        int | None,
        typer.Option(min=1, help="At most this many jobs, the newest (default: all)."),
    ] = None,
    as_json: Annotated[
        bool,
        typer.Option(
            "--json", help="A JSON list: an object a row (a job or a step), the fields as keys."
        ),
    ] = False,
    helpformat: Annotated[
        bool,
        typer.Option(
            "--helpformat",
            "--help-fields",
            "-e",
            help="List the fields --format takes (Slurm's names) and exit.",
        ),
    ] = False,
    brief: so.Brief = False,
    long: so.Long = False,
    truncate: so.Truncate = False,
    units: so.Units = None,
    noconvert: so.NoConvert = False,
    duplicates: so.Duplicates = False,
    timelimit_min: so.TimelimitMin = None,
    timelimit_max: so.TimelimitMax = None,
    delimiter: so.Delimiter = None,
    nodelist: so.Nodelist = None,
    qos: so.Qos = None,
    array: so.Array = False,
    wckeys: so.Wckeys = None,
    associations: so.Associations = None,
    batch_script: so.BatchScript = False,
    env_vars: so.EnvVars = False,
    gid: so.Gid = None,
    nnodes: so.Nnodes = None,
    ncpus: so.Ncpus = None,
    completion: so.Completion = False,
    file: so.File = None,
    allclusters: so.AllClusters = False,
    local: so.Local = False,
    federation: so.Federation = False,
    whole_hetjob: so.WholeHetjob = None,
    verbose: so.Verbose = 0,
    as_yaml: so.Yaml = False,
    constraints: so.Constraints = None,
    flags: so.Flags = None,
    reason: so.Reason = None,
    no_short_reason: so.NoShortReason = False,  # (-R: refused, as Slurm 22.05's sacct)
    use_local_uid: so.UseLocalUid = False,
    version: VersionOpt = False,
    usage_line: so.Usage = False,
    clusters: ClustersOpt = None,  # (cli/clusters.py: checked, nothing else to do)
    cluster: so.Cluster = None,
    controller_url: ControllerOpt = None,
    token: TokenOpt = None,
    ca: CaOpt = None,
) -> None:
    """Accounting of jobs in a time window, oldest first, each with its steps (as Slurm
    22.05's sacct, every option: -S -E -u -a -j -s -r -A --name -o -b -l -p -P --delimiter
    -n -X -e -N -q -g -i -I -k -K --reason -C -T --units --noconvert --json --yaml -B
    --env-vars -c -v -V -U; -D -L -M --local --federation --whole-hetjob taken; --array, as
    Slurm 23.02's, and --limit besides)."""
    from fusesched.cli import sacct_format as sf
    from fusesched.cli import sacct_output as out
    from fusesched.cli import sacct_select as sel
    from fusesched.cli import sacct_steps as st
    from fusesched.cli.sacct_reasons import parse_reasons

    if helpformat:  # (sacct -e: nothing else is done)
        from fusesched.cli.sacct_fields import helpformat as fields_list

        sys.stdout.write(fields_list())
        return
    from fusesched.cli.sacct_time import parse_sacct_time
    from fusesched.cli.sacct_usage import Units, parse_units

    now = time.time()
    completion = completion or file is not None  # (-f: job completion data, as Slurm's)
    del no_short_reason  # (its callback refuses it)
    try:
        so.hetjob_value(whole_hetjob)
        users, everyone = _users(user)
        ids, picks = st.parse_job_steps(job_ids)
        wanted = sf.parse_states(state) if state else None
        fields = sel.field_list(fmt or (), brief, long, completion, os.environ.get("SACCT_FORMAT"))
        columns = sf.parse_format(fields)
        since = None if starttime is None else parse_sacct_time(starttime, now, what="--starttime")
        until = None if endtime is None else parse_sacct_time(endtime, now, what="--endtime")
        queues = comma_list(partition, "partition")
        tenants = comma_list(accounts, "account")
        names = comma_list(name, "name")
        low = None if timelimit_min is None else sel.parse_timelimit(timelimit_min)
        high = None if timelimit_max is None else sel.parse_timelimit(timelimit_max)
        selection = sel.Selection(
            nodes=sel.parse_nodes(nodelist),
            qos=sel.lower_set(qos, "qos"),
            gids=sel.parse_gids(gid),
            reasons=parse_reasons(reason),
            constraints=sel.parse_constraints(constraints),
            wckeys=sel.lower_set(wckeys, "wckey"),
            associations=sel.lower_set(associations, "association"),
            flags=sel.parse_flags(flags),
            nnodes=None if nnodes is None else sel.parse_range(nnodes, "node"),
            ncpus=None if ncpus is None else sel.parse_range(ncpus, "cpu"),
            timelimit=None if low is None else (low, high),
        )
        shown_units = Units(None if units is None else parse_units(units), noconvert)
    except ValueError as exc:
        _fail(str(exc), 2)
    if file is not None and not os.path.isfile(file):
        _fail(f"{file} is not a valid file", 1)
    if (batch_script or env_vars) and not ids:
        what = "job scripts" if batch_script else "job environment"
        _fail(f"when requesting {what} you must also request specific jobs with -j", 2)
    if batch_script and env_vars:
        _fail("--batch-script and --env-vars are mutually exclusive", 2)
    if parsable and parsable2:
        _fail("give --parsable (-p) or --parsable2 (-P), not both", 2)
    if as_json and as_yaml:
        _fail("give --json or --yaml, not both", 2)
    if (as_json or as_yaml) and (parsable or parsable2):
        _fail(
            f"{'--json' if as_json else '--yaml'} prints {'JSON' if as_json else 'YAML'}: "
            "leave out --parsable",
            2,
        )
    allocations = allocations or completion or batch_script or env_vars
    if since is None and not ids:
        since = _midnight(now)  # (sacct's default; with --jobs: any time)
    if since is not None and until is not None and since > until:
        _fail(f"--starttime ({_shown(since)}) is after --endtime ({_shown(until)})", 2)
    if verbose:
        print(sel.window_line(wanted, since, now if until is None else until), file=sys.stderr)
    if file is not None:
        print(
            f"sacct: note: {file} is not read: fusesched's job completion data is its controller's",
            file=sys.stderr,
        )
    client = _client(controller_url, token, ca)
    ask_me = False
    if not users and not allusers and not everyone and not ids and not selection.nodes:
        from fusesched.cli.job_list import _me  # (sacct's default: your jobs; named: any)

        users, ask_me = _me(client)
    found: list[dict[str, Any]] = []
    if wanted is None or wanted:
        per_task = not allocations and sf.needs_tasks(columns)
        match = sf.state_query(wanted or ())
        query = {
            "user": users or None,
            "states": match.states,
            "queue": queues or None,
            "phases": match.phases,
            "ids": ids,
            "names": names,
            "me": ask_me,
            "since": _after_1970(since),
            "until": _after_1970(until),
            "steps": (not allocations or sf.needs_detail(columns)) and not per_task,
            "detail": per_task,  # (each step's tasks' own figures: AveRSS, MinCPU, …)
        }
        found = _gather(client, query, tenants, limit)
    if wanted is not None:
        found = [job for job in found if sf.sacct_state(job) in wanted]
    if selection.constraints and found and not sel.serves_constraints(found):
        print(
            "sacct: note: the controller serves no job's constraints (sbatch --constraint): "
            "-C keeps no job",
            file=sys.stderr,
        )
    found = [job for job in found if selection.keeps(job)]
    if completion:  # (job completion data: the jobs that ended)
        found = [job for job in found if job.get("end_time") is not None]
    if not array:
        found = _combined(found, picks)
    found.sort(key=_id_order)
    if batch_script or env_vars:
        sys.stdout.write(out.blocks(found, env=env_vars))
        print(out.not_served(env_vars), file=sys.stderr)
        return
    window = (since or 0.0, now if until is None else until) if truncate else None
    shown = [(job, None if allocations else st.picked(picks, job)) for job in found]
    whole = [job for job, steps in shown if steps is None]  # (the job's own row shown)
    usage = _usage(client, whole) if sf.needs_usage(columns) else {}
    rows: list[list[str]] = []
    units_given = shown_units if units is not None or noconvert else None
    for job, steps in shown:
        views = [(job, usage.get(job["id"], {}))] if steps is None else []
        if not allocations:
            views.extend(st.step_rows(job, sf.sacct_state(job), steps))
        for view, used in views:
            view = view if window is None else sel.truncate(view, *window)
            rows.append(sf.values(columns, view, used, now, units_given))
    if as_json:
        _print_json(sf.records(columns, rows))
        return
    if as_yaml:
        sys.stdout.write(out.yaml_text(sf.records(columns, rows)))
        return
    if parsable or parsable2:
        lines = sf.parsable(
            columns,
            rows,
            header=not noheader,
            trailing=parsable,
            delimiter="|" if delimiter is None else delimiter,  # (empty: none, as Slurm's)
        )
    else:
        lines = sf.table(columns, rows, header=not noheader)
    sys.stdout.write("".join(line + "\n" for line in lines))


def _users(given: list[str] | None) -> tuple[list[str], bool]:
    """``-u``'s users by name (a uid as its name here, when known) and whether ``-1``
    (everyone) was given."""
    import pwd

    names: list[str] = []
    everyone = False
    for item in comma_list(given, "user"):
        if item == "-1":
            everyone = True
        elif item.isdigit():
            try:
                names.append(pwd.getpwuid(int(item)).pw_name)
            except (KeyError, OverflowError):
                names.append(item)
        else:
            names.append(item)
    return ([] if everyone else names), everyone


def _combined(found: list[dict[str, Any]], picks: dict[str, Any]) -> list[dict[str, Any]]:
    """``found`` with each array's members that wait and never started, for one reason,
    as one row (``12_[3-9]``), as Slurm's sacct shows an array's pending tasks; a member
    named by ``-j`` keeps its own row."""
    from fusesched.cli.array_rows import combine

    named = [job for job in found if str(job["id"]) in picks]
    rest = [job for job in found if str(job["id"]) not in picks]
    rest.sort(key=_id_order, reverse=True)  # (newest first, as combine takes them)
    return [*named, *combine(rest)]


def _gather(
    client: Any, query: dict[str, Any], tenants: list[str], limit: int | None
) -> list[dict[str, Any]]:
    """The jobs ``query`` asks for (of each tenant of ``tenants``, or of all), each once:
    all of them, or the newest ``limit`` of each."""
    found: dict[str, dict[str, Any]] = {}
    each: list[str | None] = [*tenants] or [None]
    for tenant in each:
        found.update((job["id"], job) for job in _pages(client, query, tenant, limit))
    return list(found.values())


def _pages(
    client: Any, query: dict[str, Any], tenant: str | None, limit: int | None
) -> list[dict[str, Any]]:
    """The jobs ``query`` asks for of ``tenant``, newest first, a page of :data:`PAGE` after
    another, up to ``limit`` (None: all). A controller whose jobs carry no ``seq`` (older)
    answers one page: a note on stderr says when it was full. One that answers no step
    summaries (older) is asked for the tasks instead, this page and the next (``query``
    changed)."""
    jobs: list[dict[str, Any]] = []
    before: int | None = None
    while limit is None or len(jobs) < limit:
        size = PAGE if limit is None else min(PAGE, limit - len(jobs))
        page: list[dict[str, Any]] = _call(
            client.jobs, tenant=tenant, limit=size, before=before, **query
        )
        if query.get("steps") and any(job.get("steps") is None for job in page):
            query.update(steps=False, detail=True)  # (older: tasks, summarised here, from now)
            page = _call(client.jobs, tenant=tenant, limit=size, before=before, **query)
        jobs.extend(page)
        if len(page) < size:
            break
        seqs = [seq for job in page if isinstance(seq := job.get("seq"), int)]
        if len(seqs) < len(page):
            of = f" of {tenant}" if tenant else ""
            print(
                f"note: only the newest {len(jobs)} jobs{of} are shown (the controller pages "
                "no further): narrow the window (-S/-E) or the filters",
                file=sys.stderr,
            )
            break
        before = min(seqs)
    return jobs


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
                refused(exc)
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
    app.command(cls=so.SacctCommand, rich_help_panel="Jobs and cluster")(sacct)
