"""The live commands: run a controller or an agent, submit and watch jobs.

Every client command finds the controller through ``--controller URL`` or the
``FUSESCHED_CONTROLLER`` variable, and takes ``--json`` for machine-readable output. Heavy
modules are imported inside the commands, so ``fusesched submit`` starts quickly.
"""

from __future__ import annotations

import contextlib
import json
import signal
import sys
import time
from pathlib import Path
from typing import Annotated, Any, NoReturn

import typer
from rich import box
from rich.console import Console
from rich.table import Table

console = Console()
err = Console(stderr=True)

ControllerOpt = Annotated[
    str | None,
    typer.Option(
        "--controller",
        envvar="FUSESCHED_CONTROLLER",
        help="Controller URL (default: FUSESCHED_CONTROLLER, else http://127.0.0.1:8642).",
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
DataDirOpt = Annotated[
    Path,
    typer.Option("--data-dir", help="Where the database, logs and task files live."),
]


def _stop_on_signals() -> None:
    """SIGTERM (and SIGINT, even when a shell started us in the background with it ignored)
    end a server command through KeyboardInterrupt, so it shuts down cleanly: agents kill
    their tasks, the controller writes what it holds."""

    def interrupt(signum: int, _frame: object) -> None:
        raise KeyboardInterrupt(f"signal {signum}")

    signal.signal(signal.SIGTERM, interrupt)
    signal.signal(signal.SIGINT, interrupt)


def _fail(message: str, code: int = 1) -> NoReturn:
    err.print(f"[red]error:[/] {message}", highlight=False)
    raise typer.Exit(code)


def _client(url: str | None, token: str | None = None, ca: Path | None = None) -> Any:
    from fusesched.sdk import Client

    return Client(url, token=token, ca=ca)


def _call(fn: Any, *args: Any, **kwargs: Any) -> Any:
    from fusesched.sdk import ControllerError

    try:
        return fn(*args, **kwargs)
    except ControllerError as exc:
        _fail(str(exc), 2 if 400 <= exc.status < 500 else 1)


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


STATE_STYLE = {
    "Pending": "yellow",
    "Running": "cyan",
    "Completed": "green",
    "Failed": "red",
    "Cancelled": "magenta",
}


def jobs_table(jobs: list[dict[str, Any]], title: str | None = None) -> Table:
    table = Table(title=title, box=box.SIMPLE_HEAD, show_edge=False)
    for name in ("id", "name", "user", "type", "queue", "state", "exit", "time", "nodes"):
        table.add_column(name, justify="right" if name in ("exit", "time") else "left")
    for job in jobs:
        state = job["state"]
        code = job.get("exit_code")
        table.add_row(
            job["id"],
            job.get("name") or "",
            job.get("user") or "",
            job.get("type") or "",
            job.get("queue") or "",
            f"[{STATE_STYLE.get(state, 'white')}]{state}[/]",
            "" if code is None else str(code),
            _elapsed(job),
            ",".join(job.get("nodes") or []),
        )
    return table


# ---------------------------------------------------------------------- servers


def controller(
    data_dir: DataDirOpt = Path("fusesched-data"),
    host: Annotated[str, typer.Option(help="Address to listen on (loopback by default).")] = (
        "127.0.0.1"
    ),
    port: Annotated[int, typer.Option(help="Port of the REST API.")] = 8642,
    db: Annotated[
        str | None,
        typer.Option(
            help="Database URL (default: SQLite in --data-dir), e.g. postgresql+psycopg://"
        ),
    ] = None,
    queue_order: Annotated[str, typer.Option(help="Queue-order policy.")] = "fcfs",
    backfill: Annotated[str, typer.Option(help="Backfill: none, easy, conservative.")] = "easy",
    placement: Annotated[str, typer.Option(help="Placement policy.")] = "best-fit",
    auth: Annotated[
        bool,
        typer.Option(
            "--auth/--no-auth",
            help="Require API tokens (on by default; the first start writes a cluster-admin "
            "token to DATA_DIR/admin.token).",
        ),
    ] = True,
    tls_cert: Annotated[
        Path | None, typer.Option(help="Serve HTTPS with this certificate (see `ca issue`).")
    ] = None,
    tls_key: Annotated[Path | None, typer.Option(help="The certificate's private key.")] = None,
) -> None:
    """Run the controller: the scheduling core on the wall clock, the store and the REST API."""
    from fusesched.controller.server import ControllerServer
    from fusesched.policies.registry import CoreConfig, PolicyError

    try:
        core = CoreConfig(queue_order=queue_order, backfill=backfill, placement=placement)
    except PolicyError as exc:
        _fail(str(exc), 2)
    try:
        server = ControllerServer(
            data_dir, host, port, db, core, auth=auth, tls_cert=tls_cert, tls_key=tls_key
        )
    except (OSError, ValueError) as exc:
        _fail(str(exc))
    err.print(f"fusesched controller at [bold]{server.url}[/] (data in {data_dir})")
    if server.admin_token_path is not None:
        err.print(f"a cluster-admin token was written to {server.admin_token_path} (mode 0600)")
    if not auth:
        err.print(
            "[yellow]warning:[/] authentication is off: anyone who reaches it may do anything"
        )
    _stop_on_signals()
    with contextlib.suppress(KeyboardInterrupt):
        server.serve_forever()


def agent(
    controller_url: Annotated[
        str,
        typer.Option(
            "--controller", envvar="FUSESCHED_CONTROLLER", help="Controller URL to register with."
        ),
    ] = "http://127.0.0.1:8642",
    config: Annotated[
        Path | None, typer.Option(help="Agent config file (YAML): name, labels, resources…")
    ] = None,
    name: Annotated[str | None, typer.Option(help="Node name (default: the host name).")] = None,
    work_dir: Annotated[
        Path | None, typer.Option(help="Where task files and logs go on this node.")
    ] = None,
    join_token: Annotated[
        str | None,
        typer.Option(
            envvar="FUSESCHED_JOIN_TOKEN",
            help="One-time join token (from `fusesched token create --join`); the node's own "
            "credential is then kept in its work dir (mode 0600) and reused at restarts.",
            show_default=False,
            show_envvar=False,
        ),
    ] = None,
    ca: CaOpt = None,
) -> None:
    """Run a node agent: register this node, then launch and watch the tasks it is given."""
    import httpx

    from fusesched.agent.client import JoinError
    from fusesched.cli.local import start_agent

    try:
        handle = start_agent(
            controller_url, config, name=name, work_dir=work_dir, join_token=join_token, ca=ca
        )
    except (ValueError, OSError, JoinError) as exc:
        _fail(str(exc), 2)
    except httpx.HTTPStatusError as exc:
        _fail(f"the controller refused this node ({exc.response.status_code}): {exc.response.text}")
    except httpx.HTTPError as exc:
        _fail(f"cannot reach the controller at {controller_url}: {exc}")
    err.print(f"agent [bold]{handle.name}[/] registered with {controller_url}")
    _stop_on_signals()
    try:
        while True:
            time.sleep(1)
    except KeyboardInterrupt:
        pass
    finally:
        handle.stop()


def up(
    data_dir: DataDirOpt = Path("fusesched-data"),
    port: Annotated[int, typer.Option(help="Port of the REST API.")] = 8642,
    agents: Annotated[int, typer.Option(min=1, max=64, help="Local agents to start.")] = 1,
    config: Annotated[
        Path | None, typer.Option(help="Agent config file for the local agent(s).")
    ] = None,
    demo: Annotated[
        bool, typer.Option(help="Submit a small mixed workload, show it live, then stop.")
    ] = False,
    auth: Annotated[
        bool,
        typer.Option(
            "--auth/--no-auth",
            help="Require API tokens (off by default for this embedded cluster).",
        ),
    ] = False,
) -> None:
    """Start a whole cluster here: a controller (SQLite) and local agent(s), in one command."""
    from fusesched.cli.local import LocalCluster

    try:
        cluster = LocalCluster(
            data_dir, port=port, agents=agents, agent_config=config, auth=auth
        ).start()
    except (ValueError, OSError) as exc:
        _fail(str(exc), 2)
    err.print(
        f"fusesched is up at [bold]{cluster.url}[/] with {agents} agent(s); data in {data_dir}\n"
        f"  export FUSESCHED_CONTROLLER={cluster.url}"
    )
    if auth:
        path = cluster.server.admin_token_path or data_dir / "admin.token"
        err.print(f"  export FUSESCHED_TOKEN=$(cat {path})   # the cluster-admin token")
    _stop_on_signals()
    try:
        if demo:
            from fusesched.cli.live_demo import run_demo

            run_demo(cluster, console)
        else:
            while True:
                time.sleep(1)
    except KeyboardInterrupt:
        pass
    finally:
        cluster.stop()


# ---------------------------------------------------------------------- submission

#: sbatch takes Slurm's own options, so the command lets unknown options through to them.
SBATCH_CONTEXT = {"allow_extra_args": True, "ignore_unknown_options": True}


def _split_sbatch_args(args: list[str]) -> tuple[list[str], Path | None, list[str]]:
    """(options, script, script arguments): the script is the first existing file named."""
    for k, arg in enumerate(args):
        if not arg.startswith("-") and Path(arg).is_file():
            return args[:k], Path(arg), args[k + 1 :]
    return args, None, []


def submit(
    files: Annotated[
        list[Path],
        typer.Argument(
            help="Job files: fusesched YAML, Kubernetes Pod/Job YAML or a batch script."
        ),
    ],
    controller_url: ControllerOpt = None,
    token: TokenOpt = None,
    ca: CaOpt = None,
    as_json: JsonOpt = False,
) -> None:
    """Submit jobs; the format of each file is recognised from its content."""
    from fusesched.submit.errors import SubmitError
    from fusesched.submit.load import load_submission

    requests = []
    try:
        for path in files:
            for parsed in load_submission(path):
                requests.append(parsed.request)
                for warning in parsed.warnings:
                    err.print(f"[yellow]warning:[/] {warning}", highlight=False)
    except SubmitError as exc:
        _fail(str(exc), 2)
    client = _client(controller_url, token, ca)
    payload = [r.model_dump(mode="json", exclude_none=True) for r in requests]
    ids = (
        [_call(client.submit, payload[0])]
        if len(payload) == 1
        else _call(client.submit_many, payload)
    )
    if as_json:
        _print_json({"id": ids[0], "ids": ids} if len(ids) == 1 else {"ids": ids})
    else:
        for job_id in ids:
            console.print(f"Submitted job {job_id}", highlight=False)


def sbatch(
    ctx: typer.Context,
    controller_url: ControllerOpt = None,
    token: TokenOpt = None,
    ca: CaOpt = None,
    as_json: JsonOpt = False,
) -> None:
    """Submit a Slurm batch script: fusesched sbatch [SBATCH OPTIONS] SCRIPT.

    The script's #SBATCH directives are honoured; options given here override them, as with
    Slurm's sbatch (e.g. fusesched sbatch -N 2 --time=10:00 job.sh).
    """
    from fusesched.submit.errors import SubmitError
    from fusesched.submit.sbatch import load_sbatch

    options, script, rest = _split_sbatch_args(list(ctx.args))
    if script is None:
        _fail("no batch script given (usage: fusesched sbatch [OPTIONS] SCRIPT)", 2)
    if rest:
        _fail(f"arguments after the script are not supported: {' '.join(rest)}", 2)
    try:
        parsed = load_sbatch(script, options)
    except SubmitError as exc:
        _fail(str(exc), 2)
    request = parsed.request
    for warning in parsed.warnings:
        err.print(f"[yellow]warning:[/] {warning}", highlight=False)
    job_id = _call(
        _client(controller_url, token, ca).submit,
        request.model_dump(mode="json", exclude_none=True),
    )
    if as_json:
        _print_json({"id": job_id})
    else:
        console.print(f"Submitted batch job {job_id}", highlight=False)


# ---------------------------------------------------------------------- queries


def jobs(
    user: Annotated[str | None, typer.Option(help="Only this user's jobs.")] = None,
    state: Annotated[
        list[str] | None, typer.Option(help="Only jobs in this state (repeatable).")
    ] = None,
    queue: Annotated[str | None, typer.Option(help="Only this queue's jobs.")] = None,
    limit: Annotated[int, typer.Option(min=1, max=1000, help="At most this many.")] = 50,
    controller_url: ControllerOpt = None,
    token: TokenOpt = None,
    ca: CaOpt = None,
    as_json: JsonOpt = False,
) -> None:
    """List jobs, newest first."""
    found = _call(_client(controller_url, token, ca).jobs, user, state or (), queue, limit)
    if as_json:
        _print_json(found)
    else:
        console.print(jobs_table(found))


def show(
    job_id: Annotated[str, typer.Argument(help="Job id.")],
    controller_url: ControllerOpt = None,
    token: TokenOpt = None,
    ca: CaOpt = None,
    as_json: JsonOpt = False,
) -> None:
    """Show one job with its tasks."""
    job = _call(_client(controller_url, token, ca).show, job_id)
    if as_json:
        _print_json(job)
        return
    console.print(jobs_table([job]))
    if job.get("reason"):
        console.print(f"reason: {job['reason']}", highlight=False)
    if job.get("tasks"):
        table = Table(box=box.SIMPLE_HEAD, show_edge=False)
        for name in ("task", "node", "state", "exit", "gpus"):
            table.add_column(name)
        for t in job["tasks"]:
            code = t.get("exit_code")
            gpus = ",".join(str(i) for i in t.get("gpu_indices") or [])
            table.add_row(
                t["task_id"], t["node"], t["state"], "" if code is None else str(code), gpus
            )
        console.print(table)


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
    """Print a job's output (stdout and stderr of its first task, or of --task)."""
    client = _client(controller_url, token, ca)
    offset = 0
    while True:
        text = _call(client.logs, job_id, task, offset)
        sys.stdout.write(text)
        sys.stdout.flush()
        offset += len(text.encode())
        if not follow:
            return
        if not text and _call(client.show, job_id)["state"] in ("Completed", "Failed", "Cancelled"):
            return
        time.sleep(0.5)


def cancel(
    job_ids: Annotated[list[str], typer.Argument(help="Job ids.")],
    controller_url: ControllerOpt = None,
    token: TokenOpt = None,
    ca: CaOpt = None,
    as_json: JsonOpt = False,
) -> None:
    """Cancel jobs (running ones get SIGTERM, then SIGKILL after a grace period)."""
    client = _client(controller_url, token, ca)
    done = {job_id: _call(client.cancel, job_id) for job_id in job_ids}
    if as_json:
        _print_json({"cancelled": [j for ids in done.values() for j in ids]})
        return
    for job_id, ids in done.items():
        console.print(
            f"Cancelling {', '.join(ids)}" if ids else f"Job {job_id} had already finished",
            highlight=False,
        )


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
    for name in ("node", "state", "cpu", "memory", "gpus", "free cpu", "seen", "labels"):
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
            cap.get("memory", "0"),
            cap.get("nvidia.com/gpu", "0"),
            free.get("cpu", "0"),
            f"{n['last_heartbeat_s_ago']:.1f}s ago",
            labels,
        )
    console.print(table)


def queues(
    controller_url: ControllerOpt = None,
    token: TokenOpt = None,
    ca: CaOpt = None,
    as_json: JsonOpt = False,
) -> None:
    """Pending and running jobs per queue."""
    found = _call(_client(controller_url, token, ca).queues)
    if as_json:
        _print_json(found)
        return
    table = Table(box=box.SIMPLE_HEAD, show_edge=False)
    for name in ("queue", "pending", "running"):
        table.add_column(name, justify="left" if name == "queue" else "right")
    for q in found:
        table.add_row(q["name"], str(q["pending"]), str(q["running"]))
    console.print(table)


# ---------------------------------------------------------------------- tokens

token_app = typer.Typer(
    name="token", help="Make, list and revoke API tokens (admins).", no_args_is_help=True
)


@token_app.command("create")
def token_create(
    user: Annotated[str, typer.Argument(help="Whose token (not for --join).")] = "",
    role: Annotated[
        str, typer.Option(help="user, tenant-admin or cluster-admin (people's tokens).")
    ] = "user",
    tenant: Annotated[str, typer.Option(help="Tenant (default: your own).")] = "",
    join: Annotated[
        bool, typer.Option("--join", help="A one-time join token for a node instead.")
    ] = False,
    node: Annotated[
        str | None, typer.Option(help="With --join: only this node name may use it.")
    ] = None,
    expires: Annotated[
        float | None, typer.Option(help="Seconds until the token expires (default: never).")
    ] = None,
    controller_url: ControllerOpt = None,
    token: TokenOpt = None,
    ca: CaOpt = None,
    as_json: JsonOpt = False,
) -> None:
    """Make a token. It is printed once: only its hash is kept."""
    if not join and not user:
        _fail("name the user the token is for (or use --join for a node)", 2)
    made = _call(
        _client(controller_url, token, ca).create_token,
        user,
        tenant=tenant,
        role=role,
        kind="join" if join else "user",
        node=node,
        expires_in_s=expires,
    )
    if as_json:
        _print_json(made)
        return
    sys.stdout.write(made["token"] + "\n")
    what = f"join token for {node or 'any node'}" if join else f"{made['role']} {made['user']}"
    err.print(f"token {made['id']} ({what}, tenant {made['tenant'] or '-'}); shown only once")


@token_app.command("list")
def token_list(
    kind: Annotated[str | None, typer.Option(help="user, join, agent or job.")] = None,
    revoked: Annotated[bool, typer.Option("--revoked", help="Include revoked tokens.")] = False,
    controller_url: ControllerOpt = None,
    token: TokenOpt = None,
    ca: CaOpt = None,
    as_json: JsonOpt = False,
) -> None:
    """List tokens (never their secrets)."""
    found = _call(_client(controller_url, token, ca).tokens, kind, revoked)
    if as_json:
        _print_json(found)
        return
    table = Table(box=box.SIMPLE_HEAD, show_edge=False)
    for name in ("id", "kind", "user", "tenant", "role", "node/job", "created", "state"):
        table.add_column(name)
    for t in found:
        state = "revoked" if t["revoked"] else ("used" if t.get("used_at") else "valid")
        table.add_row(
            t["id"],
            t["kind"],
            t["user"],
            t["tenant"],
            t["role"],
            t.get("node") or t.get("job_id") or "",
            _ago(t["created_at"]),
            state,
        )
    console.print(table)


@token_app.command("revoke")
def token_revoke(
    token_ids: Annotated[list[str], typer.Argument(help="Token ids (from `token list`).")],
    controller_url: ControllerOpt = None,
    token: TokenOpt = None,
    ca: CaOpt = None,
) -> None:
    """Revoke tokens: they stop working at once."""
    client = _client(controller_url, token, ca)
    for token_id in token_ids:
        _call(client.revoke_token, token_id)
        console.print(f"Revoked token {token_id}", highlight=False)


# ---------------------------------------------------------------------- certificates

ca_app = typer.Typer(
    name="ca", help="The cluster's certificate authority, for TLS.", no_args_is_help=True
)
CaDirOpt = Annotated[Path, typer.Option("--dir", help="Folder of the CA's files.")]


@ca_app.command("init")
def ca_init(folder: CaDirOpt = Path("fusesched-ca")) -> None:
    """Create the cluster's CA: DIR/ca.crt (give it to clients, --ca) and DIR/ca.key (0600)."""
    from fusesched.tls import init_ca

    try:
        cert = init_ca(folder)
    except OSError as exc:
        _fail(str(exc), 2)
    console.print(f"CA certificate {cert}; key {folder / 'ca.key'} (keep it private)")


@ca_app.command("issue")
def ca_issue(
    folder: CaDirOpt = Path("fusesched-ca"),
    name: Annotated[str, typer.Option(help="Certificate name (files DIR/NAME.crt, .key).")] = (
        "controller"
    ),
    host: Annotated[
        list[str] | None, typer.Option(help="Host name or IP address it is for (repeatable).")
    ] = None,
    days: Annotated[int, typer.Option(min=1, help="Validity in days.")] = 825,
) -> None:
    """Issue a server certificate signed by the CA (for `controller --tls-cert --tls-key`)."""
    from fusesched.tls import issue

    try:
        cert, key = issue(folder, name, host or ["127.0.0.1", "localhost"], days)
    except (OSError, ValueError) as exc:
        _fail(str(exc), 2)
    console.print(f"certificate {cert}; key {key} (mode 0600)")


def register(app: typer.Typer) -> None:
    """Add the live commands to the ``fusesched`` command."""
    for fn in (up, controller, agent):
        app.command(rich_help_panel="Run a cluster")(fn)
    app.add_typer(ca_app, rich_help_panel="Run a cluster")
    register_clients(app)


def register_clients(app: typer.Typer) -> None:
    """Add the client commands (what talks to a running controller)."""
    for fn in (submit, jobs, show, logs, cancel, nodes, queues):
        app.command(rich_help_panel="Jobs and cluster")(fn)
    app.command(rich_help_panel="Jobs and cluster", context_settings=SBATCH_CONTEXT)(sbatch)
    app.add_typer(token_app, rich_help_panel="Jobs and cluster")
