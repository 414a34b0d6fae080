"""``fusesched cancel``: cancel jobs by id, or every job that matches scancel's filters
(cli/cancel_filters.py), or send them a signal (cli/job_signals.py)."""

from __future__ import annotations

from typing import Annotated

import typer

from fusesched.cli import cancel_filters as cf
from fusesched.cli import live
from fusesched.cli.job_signals import BatchOpt, FullOpt, SignalOpt, signal_jobs
from fusesched.cli.live import CaOpt, ControllerOpt, JsonOpt, TokenOpt, run_each


def cancel(
    job_ids: Annotated[list[str] | None, typer.Argument(help="Job ids.")] = None,
    user: cf.UserOpt = None,
    me: cf.MeOpt = False,
    name: cf.NameOpt = None,
    state: cf.StateOpt = None,
    queue: cf.QueueOpt = None,
    signal: SignalOpt = None,
    batch: BatchOpt = False,
    full: FullOpt = False,
    controller_url: ControllerOpt = None,
    token: TokenOpt = None,
    ca: CaOpt = None,
    as_json: JsonOpt = False,
) -> None:
    """Cancel jobs (running ones get SIGTERM, then SIGKILL after a grace), or signal them.

    Each id is tried, a refused one (unknown, not yours) reported, the others still cancelled;
    the exit status is then that of the last refusal. With filters (as scancel's -u, --me, -n,
    -t, -p), every unfinished job that matches them (of the ids, if given) in one request;
    another user's is reported (Access/permission denied, exit 1) and left alone."""
    filters = cf.given(job_ids, user, me, name, state, queue)  # (neither: exit 2)
    client = live._client(controller_url, token, ca)  # (live._client: what tests replace)
    if filters is not None:
        cf.cancel_filtered(client, filters, signal, batch, full, as_json)
        return
    job_ids = job_ids or []
    if signal is not None or batch or full:
        signal_jobs(client, job_ids, signal, batch, full, as_json)
        return
    from fusesched.cli.squeue_format import counted_ids

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
