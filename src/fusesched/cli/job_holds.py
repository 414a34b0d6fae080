"""``fusesched hold``, ``release`` and ``requeue``: keep waiting jobs from starting, let them
go again, and send running ones back to the queue (Slurm's ``scontrol hold`` / ``release`` /
``requeue``; docs/LIVE.md, "Holding and requeueing jobs")."""

from __future__ import annotations

from typing import Annotated, Any

import typer

from fusesched.cli.live import CaOpt, ControllerOpt, JsonOpt, TokenOpt, _client, run_each

JobsArg = Annotated[list[str], typer.Argument(help="Job ids (an array's id: its members).")]


def hold(
    job_ids: JobsArg,
    reason: Annotated[
        str, typer.Option("--reason", "-r", help="Why (`show` gives it as the job's reason).")
    ] = "",
    controller_url: ControllerOpt = None,
    token: TokenOpt = None,
    ca: CaOpt = None,
    as_json: JsonOpt = False,
) -> None:
    """Hold waiting jobs: they stay pending and do not start until released. A running job
    cannot be held (cancel it). A cluster-admin's hold only a cluster-admin can release."""
    client = _client(controller_url, token, ca)
    run_each(client, job_ids, "job id", lambda c, j: c.hold(j, reason), as_json, *_shown("held"))


def release(
    job_ids: JobsArg,
    controller_url: ControllerOpt = None,
    token: TokenOpt = None,
    ca: CaOpt = None,
    as_json: JsonOpt = False,
) -> None:
    """Release held jobs: they queue again (a hold a cluster-admin placed: cluster-admins
    only)."""
    client = _client(controller_url, token, ca)
    run_each(client, job_ids, "job id", lambda c, j: c.release(j), as_json, *_shown("released"))


def requeue(
    job_ids: JobsArg,
    reason: Annotated[str, typer.Option("--reason", "-r", help="Why (in the job's events).")] = "",
    hold: Annotated[
        bool, typer.Option("--hold", help="Hold it once queued again (scontrol requeuehold).")
    ] = False,
    controller_url: ControllerOpt = None,
    token: TokenOpt = None,
    ca: CaOpt = None,
    as_json: JsonOpt = False,
) -> None:
    """Requeue running jobs: their tasks are stopped (SIGTERM, then SIGKILL) and the job
    queues again, to start afresh (or from its checkpoint)."""
    from fusesched.cli.own_job import outlive_own_stop

    client = _client(controller_url, token, ca)
    outlive_own_stop(job_ids)  # (requeueing its own job stops this command's job: cli/own_job.py)
    act = lambda c, j: c.requeue(j, reason, hold)  # noqa: E731
    run_each(client, job_ids, "job id", act, as_json, *_shown("requeued"))


def update(
    job_ids: JobsArg,
    priority: Annotated[int | None, typer.Option("--priority", help="New job priority.")] = None,
    qos: Annotated[str | None, typer.Option("--qos", help="gold, silver or bronze.")] = None,
    time_limit: Annotated[
        str | None,
        typer.Option("--time", "-t", help="New time limit, as sbatch's: MM, HH:MM:SS, D-HH…"),
    ] = None,
    name: Annotated[
        str | None, typer.Option("--job-name", "-J", help='New job name ("": none).')
    ] = None,
    comment: Annotated[
        str | None, typer.Option("--comment", help='New comment ("": none).')
    ] = None,
    partition: Annotated[
        str | None,
        typer.Option("--partition", "-p", help="Move it to this partition (queue)."),
    ] = None,
    dependency: Annotated[
        str | None,
        typer.Option(
            "--dependency",
            "-d",
            help='New dependencies, as sbatch\'s (afterok:12,singleton…; "": none).',
        ),
    ] = None,
    begin: Annotated[
        str | None,
        typer.Option("--begin", "-b", help="Not before this time, as sbatch's (now+1hour…)."),
    ] = None,
    controller_url: ControllerOpt = None,
    token: TokenOpt = None,
    ca: CaOpt = None,
    as_json: JsonOpt = False,
) -> None:
    """Change jobs (scontrol update). Users may only lower a priority or a QoS and shorten
    a time limit; admins may change all. A waiting job may change all the options below, a
    running job its time limit, name and comment. A running job's new limit counts from
    its start: one already passed stops it at once, as timed out."""
    from fusesched.cli import scontrol_update as su
    from fusesched.cli.scontrol_update import ScontrolError

    words = {
        "TimeLimit": time_limit,
        "Name": name,
        "Comment": comment,
        "Partition": partition,
        "Dependency": dependency,
        "StartTime": begin,
    }
    options = {
        "TimeLimit": "--time",
        "Name": "--job-name",
        "Comment": "--comment",
        "Partition": "--partition",
        "Dependency": "--dependency",
        "StartTime": "--begin",
    }
    given = su.pairs(["JobId=-", *(f"{k}={v}" for k, v in words.items() if v is not None)])
    try:
        change = su.job_update(given) if len(given) > 1 else None
    except ScontrolError as exc:
        key, _, message = str(exc).partition(": ")
        raise typer.BadParameter(message, param_hint=options.get(key)) from None
    if priority is None and qos is None and change is None:
        raise typer.BadParameter(
            "give --priority, --qos, --time, --job-name, --comment, --partition, "
            "--dependency or --begin"
        )
    change = change or su.JobUpdate([])
    if change.time_delta_s is not None:
        raise typer.BadParameter("give the new limit, not a change of it", param_hint="--time")
    client = _client(controller_url, token, ca)

    def act(c: Any, job_id: str) -> list[str]:
        return list(
            c.update(
                job_id,
                priority,
                qos,
                change.time_limit_s,
                name=change.name,
                comment=change.comment,
                queue=change.partition,
                dependencies=change.dependencies,
                begin_time=change.begin_time,
            )
        )

    run_each(client, job_ids, "job id", act, as_json, *_shown("updated"))


def _shown(what: str) -> tuple[Any, Any]:
    """How ``hold``/``release`` print their answers: JSON, and a line per id."""

    def to_json(done: dict[str, list[str]]) -> dict[str, list[str]]:
        return {what: [j for ids in done.values() for j in ids]}

    def to_line(job_id: str, ids: list[str]) -> str:
        from fusesched.cli.id_lists import counted_ids

        return f"{what.capitalize()} {counted_ids(ids)}" if ids else f"Job {job_id}: no change"

    return to_json, to_line
