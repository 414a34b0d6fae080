"""``fusesched cancel``: cancel jobs by id, or every job that matches scancel's filters
(cli/cancel_filters.py), or send them a signal (cli/job_signals.py); scancel's ``-i``,
``-v``, ``-Q``, ``-H`` and ``-b``/``-f`` without a signal are cli/cancel_options.py's.
Called by Slurm's name, ``scancel``, it says what Slurm 22.05's scancel says and exits as it
does (cli/scancel_said.py), and its ``--signal`` reaches a batch script's steps alone."""

from __future__ import annotations

from typing import Annotated

import typer

from fusesched.cli import cancel_filters as cf
from fusesched.cli import cancel_options as co
from fusesched.cli import live
from fusesched.cli import scancel_said as ss
from fusesched.cli.clusters import ClustersOpt
from fusesched.cli.job_signals import (
    BatchOpt,
    FullOpt,
    SignalOpt,
    checked_name,
    signal_jobs,
    target_of,
)
from fusesched.cli.live import CaOpt, ControllerOpt, JsonOpt, TokenOpt, run_each
from fusesched.cli.slurm_version import VersionOpt

#: The most ids one request takes (``POST /v1/jobs/cancel``: api/cancel_routes.py).
MAX_VALUES = 10_000


def cancel(
    ctx: typer.Context,  # (its name: `cancel`, or Slurm's `scancel`: Slurm's words)
    job_ids: Annotated[list[str] | None, typer.Argument(help="Job ids.")] = None,
    user: cf.UserOpt = None,
    me: cf.MeOpt = False,
    name: cf.NameOpt = None,
    state: cf.StateOpt = None,
    queue: cf.QueueOpt = None,
    account: co.AccountOpt = None,
    qos: co.QosOpt = None,
    nodelist: co.NodelistOpt = None,
    reservation: co.ReservationOpt = None,
    wckey: co.WckeyOpt = None,
    interactive: co.InteractiveOpt = False,
    verbose: co.VerboseOpt = 0,
    quiet: co.QuietOpt = False,
    hurry: co.HurryOpt = False,  # (no burst buffers: nothing to skip)
    signal: SignalOpt = None,
    batch: BatchOpt = False,
    full: FullOpt = False,
    clusters: ClustersOpt = None,  # (cli/clusters.py: checked, nothing else to do)
    version: VersionOpt = False,
    controller_url: ControllerOpt = None,
    token: TokenOpt = None,
    ca: CaOpt = None,
    as_json: JsonOpt = False,
) -> None:
    """Cancel jobs (running ones get SIGTERM, then SIGKILL after a grace), or signal them.

    Each id is tried (an array's waiting members as fusesched jobs shows them, 1009_[2-999%2],
    stand for those members), a refused one (unknown, not yours) reported, the others still
    cancelled;
    the exit status is then that of the last refusal. With filters (as scancel's -u, --me, -n,
    -t, -p, -A, -q, -w), every unfinished job that matches them (of the ids, if given) in one
    request; another user's is reported (Access/permission denied, exit 1) and left alone.
    As scancel's, -b and -f without --signal cancel (Slurm's default signal, KILL, ends the
    job); -i asks before each job. As `scancel` it says what Slurm's says, on stderr, and
    exits as it does (cli/scancel_said.py), and --signal without -b/-f reaches a batch
    script's job steps alone, not its shell."""
    del hurry, clusters, version
    slurm = ctx.info_name == "scancel" and not as_json  # (Slurm's words: cli/scancel_said.py)
    co.refuse_unsupported(reservation, wckey, quiet, verbose)
    if (
        slurm
        and not job_ids
        and not cf.any_filter(user, me, name, state, queue, account, qos, nodelist)
    ):
        ss.no_identification()
    if slurm:
        ss.check_ids(job_ids or [])
    checked = signal is not None or batch  # (the ids Slurm's scancel checks first: -s, -b)
    if slurm and ss.is_kill(signal):  # (-s KILL: Slurm's KILL ends the job: a cancel)
        signal = None
    # whom a signal reaches: -f all, -b the batch shell, neither: as scancel a batch
    # script's job steps, as cancel all (cli/job_signals.py); without a signal -b/-f cancel
    target = target_of(batch, full, ctx.info_name == "scancel")
    signame = None if signal is None else checked_name(signal)
    combined = any(member_ids_of(j) for j in job_ids or ())
    as_given = list(job_ids or ())  # (scancel says a combined id as given: cli/scancel_said)
    job_ids = _expanded(job_ids)  # (squeue's combined ids: 1009_[2-999%2])
    filters = cf.given(job_ids, user, me, name, state, queue, account, qos, nodelist)
    if filters is None and combined and (interactive or not slurm):
        filters = cf.Filters(ids=job_ids or [])  # (its members in one request, one line)
    client = live._client(controller_url, token, ca)  # (live._client: what tests replace)
    if quiet and not slurm:
        client = co.QuietClient(client)
    if interactive:  # (each job alone: its ids, or those the filters match)
        job_ids = _chosen(client, filters, job_ids)
        filters = None
    if slurm:
        said = ss.Said(verbose=bool(verbose), quiet=quiet)
        if filters is not None:
            described = ss.filters_said(filters, state, nodelist)
            live._call(ss.by_filters, client, filters, signame, target, said, described)
        else:  # (each id in turn; -i: those chosen)
            ids = (job_ids or []) if interactive else as_given
            live._call(ss.by_ids, client, ids, signame, target, checked, said)
        said.close()
        return
    if filters is not None:
        cf.cancel_filtered(client, filters, signame, target, as_json, quiet)
        return
    job_ids = job_ids or []
    if signame is not None:
        signal_jobs(client, job_ids, signame, target, as_json, quiet)
        return
    from fusesched.cli.id_lists import counted_ids

    run_each(
        client,
        job_ids,
        "job id",
        lambda c, j: c.cancel(j),
        as_json,
        lambda done: {"cancelled": [j for ids in done.values() for j in ids]},
        lambda job_id, ids: (
            f"Cancelling {counted_ids(ids)}" if ids else f"Job {job_id} had already finished"
        ),
    )


def _chosen(client: object, filters: cf.Filters | None, job_ids: list[str] | None) -> list[str]:
    """``-i``: the jobs the user says yes to, asked one by one: of the ids, or of those
    ``filters`` match (listed now). None chosen ends the command (exit 0, or 2 when an id
    was unknown)."""
    code = 0
    if filters is not None:
        views = live._call(cf.matching_views, client, cf.resolved(client, filters))
    else:
        views, code = live._call(co.views_of, client, job_ids or [])
    chosen = co.confirmed(views)
    if not chosen:
        raise typer.Exit(code)
    return chosen


def _expanded(job_ids: list[str] | None) -> list[str] | None:
    """``job_ids`` with each combined id of an array's waiting members, as ``fusesched jobs``
    shows them (``1009_[2-4,7%2]``), given as its members, as scancel takes them; a bad
    one exits 2."""
    if not job_ids:
        return job_ids
    from fusesched.model.array_tasks import member_ids

    out: list[str] = []
    combined = False
    for job_id in job_ids:
        try:
            members = member_ids(job_id)
        except ValueError as exc:
            live._fail(str(exc), 2)
        out.extend([job_id] if members is None else members)
        combined = combined or members is not None
    if combined and len(out) > MAX_VALUES:  # (one request; plain ids are tried one by one)
        live._fail(
            f"the ids name {len(out):,} jobs, more than {MAX_VALUES:,} at once: cancel the "
            "whole array (its id), or by filters (-n, -u, -t)",
            2,
        )
    return out


def member_ids_of(job_id: str) -> bool:
    """Whether ``job_id`` is a combined id of an array's members (``1009_[2-999%2]``)."""
    return job_id.endswith("]") and "_[" in job_id
