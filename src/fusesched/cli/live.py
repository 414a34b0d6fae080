"""The client commands of the live platform: submit and watch jobs, see nodes and queues
(the servers are in :mod:`fusesched.cli.servers`, tokens and the CA in
:mod:`fusesched.cli.admin`).

Every client command finds the controller through ``--controller URL`` or the
``FUSESCHED_CONTROLLER`` variable, and takes ``--json`` for machine-readable output. Heavy
modules are imported inside the commands, so ``fusesched submit`` starts quickly.
"""

from __future__ import annotations

import json
import math
import os
import sys
import time
from pathlib import Path
from typing import Annotated, Any, Final, NoReturn

import typer
from rich import box
from rich.markup import escape
from rich.table import Table

from fusesched.cli.consoles import make_console
from fusesched.cli.slurm_version import VersionOpt

console = make_console()
err = make_console(stderr=True)

ControllerOpt = Annotated[
    str | None,
    typer.Option(
        "--controller",
        envvar="FUSESCHED_CONTROLLER",
        help="Controller URL, or several separated by commas (a leader and its standbys: the "
        "one that leads answers) (default: FUSESCHED_CONTROLLER, else http://127.0.0.1:8642).",
        show_default=False,
    ),
]
TokenOpt = Annotated[
    str | None,
    typer.Option(
        "--token",
        envvar="FUSESCHED_TOKEN",
        help="API token (default: FUSESCHED_TOKEN, else ~/.config/fusesched/token).",
        show_default=False,
        show_envvar=False,
    ),
]
CaOpt = Annotated[
    Path | None,
    typer.Option(
        "--ca",
        envvar="FUSESCHED_CA",
        help="CA certificate to trust for an https:// controller (default: FUSESCHED_CA).",
        show_default=False,
    ),
]
JsonOpt = Annotated[bool, typer.Option("--json", help="Print machine-readable JSON.")]


def _folder(path: Path) -> Path:
    """``path`` for a folder that may not exist yet; a usage error (exit 2) when it, or what
    would hold it, is a file."""
    for part in (path, *path.parents):
        if part.exists():
            if not part.is_dir():
                raise typer.BadParameter(f"{part} is a file, not a folder")
            break
    return path


DataDirOpt = Annotated[
    Path,
    typer.Option(
        "--data-dir", help="Where the database, logs and task files live.", callback=_folder
    ),
]


def _fail(message: str, code: int = 1) -> NoReturn:
    err.print(f"[red]error:[/] {escape(message)}", highlight=False)  # (text, never markup)
    raise typer.Exit(code)


def refused(exc: Any) -> NoReturn:
    """Stop on a controller's error (a ``ControllerError``): its message, exit 2 for a 4xx
    (the request's fault), else 1."""
    _fail(str(exc), exit_status(exc))


def exit_status(exc: Any) -> int:
    """The exit status for a controller's error: 2 for a 4xx, else 1."""
    return 2 if 400 <= exc.status < 500 else 1


def _client(url: str | None, token: str | None = None, ca: Path | None = None) -> Any:
    from fusesched.sdk import Client, ControllerError

    try:
        return Client(url, token=token, ca=ca)
    except ControllerError as exc:  # not a controller URL
        _fail(str(exc), 2)
    except OSError as exc:  # --ca / FUSESCHED_CA missing, unreadable or no certificate
        _fail(f"cannot use the CA certificate {ca or os.environ.get('FUSESCHED_CA')}: {exc}", 2)


def _call(fn: Any, *args: Any, **kwargs: Any) -> Any:
    from fusesched.sdk import ControllerError

    try:
        return fn(*args, **kwargs)
    except ControllerError as exc:
        refused(exc)


def run_each(
    client: Any,
    names: list[str],
    noun: str,
    call: Any,
    as_json: bool,
    to_json: Any,
    to_line: Any,
) -> None:
    """A command that acts on each of ``names``: ``call(client, name)`` for every name, a
    refused one (or an empty name) reported and the others still done. Prints ``to_json`` of
    the answers by name with ``--json``, else ``to_line(name, answer)`` for each (None: no
    line); exits with
    the status of the last refusal (2 for a 4xx, 1 when the controller failed)."""
    from fusesched.sdk import ControllerError

    done: dict[str, Any] = {}
    code = 0
    for name in names:
        if not name.strip():
            err.print(f"[red]error:[/] a {noun} must not be empty", highlight=False)
            code = 2
            continue
        try:
            done[name] = call(client, name)
        except ControllerError as exc:
            err.print(f"[red]error:[/] {exc}", highlight=False)
            code = exit_status(exc)
    if as_json:
        _print_json(to_json(done))
    else:
        for name, answer in done.items():
            line = to_line(name, answer)
            if line is not None:  # (None: nothing to say of it)
                console.print(line, highlight=False)
    if code:
        raise typer.Exit(code)


def _print_json(data: Any) -> None:
    sys.stdout.write(json.dumps(data, indent=2, default=str) + "\n")


def _ago(t: float | None) -> str:
    if t is None:
        return "-"
    return time.strftime("%H:%M:%S", time.localtime(t))


def _elapsed(job: dict[str, Any]) -> str:
    start, end = job.get("start_time"), job.get("end_time")
    if start is None:
        return "-"
    seconds = (end if end is not None else time.time()) - start
    return f"{seconds:.1f}s" if seconds < 60 else time.strftime("%H:%M:%S", time.gmtime(seconds))


def slurm_hms(whole: int) -> str:
    """Whole seconds as Slurm writes a duration: ``[D-]HH:MM:SS``."""
    days, rest = divmod(whole, 86400)
    clock = f"{rest // 3600:02d}:{rest % 3600 // 60:02d}:{rest % 60:02d}"
    return f"{days}-{clock}" if days else clock


def slurm_duration(seconds: float) -> str:
    """A time limit as Slurm writes one: ``[D-]HH:MM:SS`` (rounded up: never below it)."""
    return slurm_hms(math.ceil(seconds))


STATE_STYLE = {
    "Pending": "yellow",
    "Running": "cyan",
    "Completed": "green",
    "Failed": "red",
    "Cancelled": "magenta",
    "Completing": "blue",  # (ended, its tasks still being killed: Slurm's COMPLETING)
}
#: How the jobs table names an end that says more than its coarse state (a timed-out job is
#: ``Failed`` with phase ``timeout``): Slurm's state, in the table's words; coloured as the
#: coarse state.
FINER_END: Final = {
    "TIMEOUT": "Timeout",
    "OUT_OF_MEMORY": "OutOfMemory",
    "NODE_FAIL": "NodeFail",
    "PREEMPTED": "Preempted",
}


#: How often ``logs -f`` asks for new output.
LOGS_POLL_S = 0.25
#: Columns of the jobs table printed whole however narrow the terminal: an id or a state cut
#: to "Comple…" is no use.
NEVER_CUT = frozenset({"id", "state", "exit", "time"})


def jobs_table(jobs: list[dict[str, Any]], title: str | None = None) -> Table:
    from fusesched.cli.squeue_format import slurm_state

    table = Table(title=title, box=box.SIMPLE_HEAD, show_edge=False)
    for name in ("id", "name", "user", "type", "queue", "pool", "state", "exit", "time", "nodes"):
        table.add_column(
            name,
            justify="right" if name in ("exit", "time") else "left",
            # on a narrow terminal the free-text columns are cut short ("defau…"), never these
            no_wrap=name in NEVER_CUT,
        )
    for job in jobs:
        state = "Completing" if job.get("completing") else job["state"]
        held = " (held)" if job.get("phase") == "held" else ""
        shown = FINER_END.get(slurm_state(job), state)
        code = job.get("exit_code")
        table.add_row(
            job["id"],
            job.get("name") or "",
            job.get("user") or "",
            _type_cell(job),
            job.get("queue") or "",
            job.get("pool") or "",
            f"[{STATE_STYLE.get(state, 'white')}]{shown}{held}[/]",
            "" if code is None else str(code),
            _elapsed(job),
            ",".join(job.get("nodes") or []),
        )
    return table


def _type_cell(job: dict[str, Any]) -> str:
    """The job's type; a heterogeneous job's with its number of components (``hpc+het2``)."""
    kind = job.get("type") or ""
    parts = job.get("components")
    return f"{kind}+het{len(parts)}" if isinstance(parts, list) and parts else kind


def component_lines(job: dict[str, Any]) -> list[str]:
    """A heterogeneous job's components, one line each (``fusesched show``); none for a job
    that is not one."""
    parts = job.get("components")
    if not isinstance(parts, list) or not parts:
        return []
    lines = [f"heterogeneous job: {len(parts)} components (srun --het-group=N runs on one)"]
    for index, part in enumerate(parts):
        tasks = part.get("tasks", 1)
        held = (part.get("resources") or {}).items()
        each = ", ".join(f"{k} {_memory(v) if k == 'memory' else v}" for k, v in held)
        noun = "task" if tasks == 1 else "tasks"
        own = f"; nodes: {part['constraints']}" if part.get("constraints") else ""
        lines.append(f"  component {index} ({part.get('name', '')}): {tasks} {noun} × {each}{own}")
    return lines


# ---------------------------------------------------------------------- queries


def show(
    job_id: Annotated[str, typer.Argument(help="Job id (an array's id: its members).")],
    controller_url: ControllerOpt = None,
    token: TokenOpt = None,
    ca: CaOpt = None,
    as_json: JsonOpt = False,
) -> None:
    """Show one job with its tasks, or an array's members (as scontrol show job)."""
    from fusesched.cli.job_list import show_or_array

    client = _client(controller_url, token, ca)
    job = show_or_array(client, job_id, as_json)  # (an array's id: its members, printed)
    if job is None:
        return
    if as_json:
        _print_json(job)
        return
    console.print(jobs_table([job]))
    for said in component_lines(job):  # (a heterogeneous job's, sbatch hetjob)
        console.print(said, highlight=False, markup=False)
    if job.get("reason"):
        console.print(f"reason: {job['reason']}", highlight=False)
    if job.get("qos") is not None:  # (an older controller does not say)
        limit = job.get("time_limit_s")
        said = "none" if limit is None else slurm_duration(limit)
        terms = f"qos: {job['qos']}   priority: {job.get('priority', 0)}   time limit: {said}"
        console.print(terms, highlight=False)
    if job.get("mail_type"):  # (sbatch --mail-type: who is told of what)
        console.print(f"mail: {job['mail_type']} to {job.get('mail_user') or '-'}", highlight=False)
    if job.get("licenses"):  # (sbatch -L)
        held = ",".join(f"{n}:{k}" for n, k in sorted(job["licenses"].items()))
        console.print(f"licenses: {held}", highlight=False)
    if job.get("comment"):  # (sbatch --comment)
        console.print(f"comment: {job['comment']}", highlight=False, markup=False)
    if job.get("deadline") is not None:  # (sbatch --deadline)
        when = time.strftime("%Y-%m-%d %H:%M:%S %z", time.localtime(job["deadline"]))
        console.print(f"deadline: {when}", highlight=False)
    from fusesched.cli.readiness import has_readiness, readiness_line, ready_cell

    if (ready := readiness_line(job)) is not None:  # (readiness probes)
        console.print(ready, highlight=False)
    if job.get("tasks"):
        table = Table(box=box.SIMPLE_HEAD, show_edge=False)
        probed = has_readiness(job["tasks"])
        reasons = any(t.get("reason") for t in job["tasks"])  # (why one ended: its agent's)
        extra = [*(["ready"] if probed else []), *(["reason"] if reasons else [])]
        for name in ("task", "node", "state", "exit", "gpus", *extra):
            table.add_column(name, no_wrap=name in ("task", "state"))  # what `logs --task` takes
        for t in job["tasks"]:
            code = t.get("exit_code")
            gpus = ",".join(str(i) for i in t.get("gpu_indices") or [])
            cells = [t["task_id"], t["node"], t["state"], "" if code is None else str(code), gpus]
            cells += [ready_cell(t)] if probed else []
            table.add_row(*cells, *([t.get("reason") or ""] if reasons else []))
        console.print(table)
        from fusesched.cli.efficiency import summary

        line = summary(client, job_id)  # what it used, in one line (fusesched eff: all)
        if line is not None:
            console.print(line, highlight=False)


def logs(
    job_id: Annotated[str, typer.Argument(help="Job id.")],
    task: Annotated[str | None, typer.Option(help="Task id (default: the first task).")] = None,
    follow: Annotated[
        bool, typer.Option("--follow", "-f", help="Keep printing new output.")
    ] = False,
    controller_url: ControllerOpt = None,
    token: TokenOpt = None,
    ca: CaOpt = None,
) -> None:
    """Print a job's output (stdout and stderr of its first task, or of --task).

    With --follow, until the log is complete: the job (or the task) has ended and all of its
    output has arrived. A log that ended without its agent saying where (a task lost with its
    node) gets a warning on stderr: its end may be missing."""
    client = _client(controller_url, token, ca)
    offset = 0
    while True:
        page = _call(client.log_page, job_id, task, offset)
        offset_before, offset = offset, page.next_offset
        sys.stdout.write(page.text)
        sys.stdout.flush()
        if page.more and page.next_offset != offset_before:  # (cut short: the rest at once)
            continue
        if not follow:
            return
        if page.complete:
            if not page.confirmed:
                err.print(
                    "[yellow]warning:[/] the end of this output may be missing (its agent did "
                    "not confirm it: the task was lost with its node, or its agent is too old "
                    "to say)",
                    highlight=False,
                )
            return
        # a controller older than complete logs: up to the first empty read after the end
        old_end = page.complete is None and not page.text
        if old_end and _call(client.show, job_id)["state"] in ("Completed", "Failed", "Cancelled"):
            return
        time.sleep(LOGS_POLL_S)


def nodes(
    controller_url: ControllerOpt = None,
    token: TokenOpt = None,
    ca: CaOpt = None,
    as_json: JsonOpt = False,
) -> None:
    """List the cluster's nodes with their capacity and what is free."""
    found = _call(_client(controller_url, token, ca).nodes)
    if as_json:
        _print_json(found)
        return
    table = Table(box=box.SIMPLE_HEAD, show_edge=False)
    drained = any(n.get("drain_reason") for n in found)
    columns = ("node", "state", "cpu", "memory", "gpus", "free cpu", "seen", "labels")
    for name in columns + (("drain reason",) if drained else ()):
        table.add_column(name)
    for n in found:
        cap, free = n["capacity"], n["free"]
        labels = ",".join(
            f"{k.rsplit('/', 1)[-1]}={v}" for k, v in n["labels"].items() if "hostname" not in k
        )
        table.add_row(
            n["name"],
            n["state"],
            cap.get("cpu", "0"),
            _memory(cap.get("memory", "0")),
            cap.get("nvidia.com/gpu", "0"),
            free.get("cpu", "0"),
            f"{n['last_heartbeat_s_ago']:.1f}s ago",
            labels,
            *((n.get("drain_reason") or "",) if drained else ()),
        )
    console.print(table)


def _memory(text: str) -> str:
    """A memory size to read at a glance: ``24683784Ki`` → ``23.5Gi`` (as given if odd)."""
    from fusesched.model.resources import QuantityError, glance_quantity, parse_quantity

    try:
        amount = parse_quantity("memory", text)
    except (QuantityError, ValueError):
        return text
    return glance_quantity("memory", amount) if amount >= 2**20 else text


def priority(
    job_id: Annotated[str, typer.Argument(help="Job id (a waiting job).")],
    controller_url: ControllerOpt = None,
    token: TokenOpt = None,
    ca: CaOpt = None,
    as_json: JsonOpt = False,
    version: VersionOpt = False,  # (sprio -V; eager: printed before anything else)
) -> None:
    """Explain a job's priority: age, fair share, size, QoS and job priority, weighted."""
    found = _call(_client(controller_url, token, ca).priority, job_id)
    if as_json:
        _print_json(found)
        return
    table = Table(box=box.SIMPLE_HEAD, show_edge=False, title=f"priority of job {job_id}")
    for name, justify in (
        ("factor", "left"),
        ("value", "right"),
        ("weight", "right"),
        ("contribution", "right"),
        ("detail", "left"),
    ):
        table.add_column(name, justify=justify)  # type: ignore[arg-type]
    for f in found["factors"]:
        table.add_row(
            f["name"],
            f"{f['value']:.4f}",
            f"{f['weight']:g}",
            f"{f['contribution']:.1f}",
            f["detail"],
        )
    table.add_row("total", "", "", f"{found['total']:.1f}", "", style="bold")
    console.print(table)


def register(app: typer.Typer) -> None:
    """Add the live commands to the ``fusesched`` command."""
    from fusesched.cli.admin import ca_app
    from fusesched.cli.servers import agent, controller, up

    for fn in (up, controller, agent):
        app.command(rich_help_panel="Run a cluster")(fn)
    app.add_typer(ca_app, rich_help_panel="Run a cluster")
    register_clients(app)


def register_clients(app: typer.Typer) -> None:
    """Add the client commands (what talks to a running controller)."""
    from fusesched.cli.admin import token_app
    from fusesched.cli.efficiency import eff
    from fusesched.cli.job_cancel import cancel
    from fusesched.cli.job_holds import hold, release, requeue, update
    from fusesched.cli.job_list import jobs
    from fusesched.cli.licenses import licenses
    from fusesched.cli.node_admin import drain, undrain
    from fusesched.cli.queue_status import queues, share
    from fusesched.cli.reconfigure import reconfigure
    from fusesched.cli.submission import SBATCH_CONTEXT, sbatch, submit

    commands = (submit, jobs, show, logs, cancel, hold, release, requeue, update, nodes)
    for fn in (*commands, eff, drain, undrain, queues, share, licenses, reconfigure, priority):
        app.command(rich_help_panel="Jobs and cluster")(fn)
    app.command(rich_help_panel="Jobs and cluster", context_settings=SBATCH_CONTEXT)(sbatch)
    from fusesched.cli import salloc, sinfo, srun

    srun.register(app)  # fusesched run, beside sbatch
    salloc.register(app)
    sinfo.register(app)
    app.add_typer(token_app, rich_help_panel="Jobs and cluster")
    from fusesched.cli.reservations import reservation_app

    app.add_typer(reservation_app, rich_help_panel="Jobs and cluster")
    from fusesched.cli import sacct, sacctmgr, scontrol, slurm_commands, slurm_names

    sacct.register(app)
    sacctmgr.register(app)
    scontrol.register(app)
    slurm_commands.register(app)
    slurm_names.register(app)  # (squeue, scancel, srun…: the commands above again)
