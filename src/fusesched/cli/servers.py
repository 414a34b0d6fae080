"""The server commands: ``fusesched controller``, ``fusesched agent`` and ``fusesched up``."""

from __future__ import annotations

import contextlib
import signal
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Annotated

import typer

if TYPE_CHECKING:
    from fusesched.agent.config import AgentConfig
    from fusesched.cli.local import AgentLink
    from fusesched.controller.service import Controller

from fusesched.cli.live import CaOpt, DataDirOpt, _fail, console, err
from fusesched.cli.server_options import (
    InactiveLimitOpt,
    LicensesOpt,
    MailDomainOpt,
    MailFromOpt,
    PoolsOpt,
    PowerOpt,
    PtySessionsOpt,
    PurgeAfterOpt,
    SmtpOpt,
    SmtpUserOpt,
    StartTlsOpt,
    TenancyOpt,
    WebhookOpt,
    load_federation,
    load_licenses,
    load_power,
    load_tenancy,
    notify_config,
    purge_after,
)
from fusesched.controller.inactive import DEFAULT_INACTIVE_LIMIT_S
from fusesched.controller.pty_cap import DEFAULT_PER_USER


def _stop_on_signals() -> None:
    """SIGTERM (and SIGINT, even when a shell started us in the background with it ignored)
    end a server command through KeyboardInterrupt, so it shuts down cleanly: agents kill
    their tasks, the controller writes what it holds."""

    def interrupt(signum: int, _frame: object) -> None:
        raise KeyboardInterrupt(f"signal {signum}")

    signal.signal(signal.SIGTERM, interrupt)
    signal.signal(signal.SIGINT, interrupt)


class _Leading:
    """The controller SIGHUP reconfigures: none while the process starts (the handler is
    installed first, so that a SIGHUP then does not end it), stands by or stops."""

    def __init__(self) -> None:
        self.controller: Callable[[], Controller | None] = lambda: None


def _reconfigure_on_hangup() -> _Leading:
    """SIGHUP makes the controller re-read its tenancy file and apply it, as `fusesched
    reconfigure` does (Slurm's slurmctld takes SIGHUP so too); the outcome goes to stderr.
    Installed before anything else is done (a SIGHUP's default is to end the process): set
    the returned holder's ``controller`` once there is one (controller/reconfigure.py
    `on_hangup`: the handler only wakes a thread of its own)."""
    from fusesched.controller.reconfigure import on_hangup

    leading = _Leading()
    on_hangup(
        lambda: leading.controller(),
        lambda line: err.print(line, highlight=False, markup=False, soft_wrap=True),
    )
    return leading


def controller(
    data_dir: DataDirOpt = Path("fusesched-data"),
    host: Annotated[str, typer.Option(help="Address to listen on (loopback by default).")] = (
        "127.0.0.1"
    ),
    port: Annotated[int, typer.Option(min=0, max=65535, help="Port of the REST API.")] = 8642,
    db: Annotated[
        str | None,
        typer.Option(
            help="Database URL (default: SQLite in --data-dir), e.g. postgresql+psycopg://"
        ),
    ] = None,
    queue_order: Annotated[str, typer.Option(help="Queue-order policy.")] = "fcfs",
    backfill: Annotated[str, typer.Option(help="Backfill: none, easy, conservative.")] = "easy",
    placement: Annotated[str, typer.Option(help="Placement policy.")] = "best-fit",
    runtime_prediction: Annotated[
        str,
        typer.Option(
            "--runtime-prediction",
            help="Estimate run times from each user's finished jobs instead of trusting "
            "walltime requests (backfilling, shortest-first): none, user-last2, "
            "user-last2-request. See `fusesched policies`.",
        ),
    ] = "none",
    data_locality_weight: Annotated[
        float,
        typer.Option(
            "--data-locality-weight",
            min=0.0,
            help="How much a node caching a job's datasets is preferred, against the placement "
            "score (0: ignore where data is; docs/DATA.md).",
        ),
    ] = 1.0,
    data_locality_wait: Annotated[
        float,
        typer.Option(
            "--data-locality-wait",
            min=0.0,
            help="Seconds a job may wait for a node caching its datasets (0: never wait).",
        ),
    ] = 0.0,
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
    tenancy: TenancyOpt = None,
    licenses: LicensesOpt = None,
    pools: PoolsOpt = None,
    power: PowerOpt = None,
    standby: Annotated[
        bool,
        typer.Option(
            "--standby",
            help="Take part in leader election (needs a PostgreSQL --db): lead if no other "
            "controller of this database does, else stand by (every route answers 503 "
            '{"detail": "standby"}) and take over within seconds when the leader dies. Start '
            "every controller of the database with it; give agents and clients all their URLs "
            "(--controller URL1,URL2).",
        ),
    ] = False,
    smtp: SmtpOpt = None,
    mail_from: MailFromOpt = "",
    mail_domain: MailDomainOpt = "",
    smtp_starttls: StartTlsOpt = False,
    smtp_user: SmtpUserOpt = None,
    notify_webhook: WebhookOpt = None,
    inactive_limit: InactiveLimitOpt = DEFAULT_INACTIVE_LIMIT_S,
    pty_sessions: PtySessionsOpt = DEFAULT_PER_USER,
    purge_after_age: PurgeAfterOpt = None,
) -> None:
    """Run the controller: the scheduling core on the wall clock, the store and the REST API."""
    from sqlalchemy.exc import SQLAlchemyError

    from fusesched.controller.leader import StandbyUnsupported
    from fusesched.controller.server import ControllerServer
    from fusesched.policies.registry import CoreConfig, PolicyError

    leading = _reconfigure_on_hangup()
    try:
        core = CoreConfig(
            queue_order=queue_order,
            backfill=backfill,
            placement=placement,
            tenancy=load_tenancy(tenancy),
            runtime_prediction=runtime_prediction,
            data_locality_weight=data_locality_weight,
            data_locality_wait_s=data_locality_wait,
            licenses=load_licenses(licenses),
        )
    except PolicyError as exc:
        _fail(str(exc), 2)
    try:
        server = ControllerServer(
            data_dir,
            host,
            port,
            db,
            core,
            auth=auth,
            tls_cert=tls_cert,
            tls_key=tls_key,
            standby=standby,
            federation=load_federation(pools),
            power=load_power(power),
            notify=notify_config(
                smtp, mail_from, mail_domain, smtp_starttls, smtp_user, notify_webhook
            ),
            tenancy_file=tenancy,
            inactive_limit_s=inactive_limit,
            pty_sessions_per_user=pty_sessions,
            purge_after_s=purge_after(purge_after_age, core.tenancy),
        )
    except StandbyUnsupported as exc:
        _fail(str(exc), 2)
    except (OSError, ValueError) as exc:
        _fail(str(exc))
    except SQLAlchemyError as exc:  # --db: a URL it cannot parse, a file that is no database
        _fail(f"cannot open the store {db or data_dir}: {exc.__class__.__name__}: {exc.args[0]}")
    role = " (standby until it leads)" if standby else ""
    err.print(f"fusesched controller at [bold]{server.url}[/]{role} (data in {data_dir})")
    err.print(f"  web portal: {server.url}/portal/")
    if server.admin_token_path is not None:
        err.print(f"a cluster-admin token was written to {server.admin_token_path} (mode 0600)")
    if not auth:
        err.print(
            "[yellow]warning:[/] authentication is off: anyone who reaches it may do anything"
        )
    _stop_on_signals()
    leading.controller = lambda: getattr(server, "controller", None)  # (a standby: once it leads)
    with contextlib.suppress(KeyboardInterrupt):
        server.serve_forever()
    leading.controller = lambda: None
    if server.fenced is not None:
        _fail(f"lost leadership ({server.fenced}); exiting so that a restart stands by", 3)


def agent(
    controller_url: Annotated[
        str,
        typer.Option(
            "--controller",
            envvar="FUSESCHED_CONTROLLER",
            help="Controller URL to register with; several separated by commas (a leader and "
            "its standbys): the agent follows whichever leads.",
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

    from fusesched.agent.joining import JoinError
    from fusesched.agent.start import start_agent  # not cli.local: no controller imports

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
    err.print(f"agent [bold]{handle.name}[/] registered with {handle.client.url}")
    _stop_on_signals()
    try:
        while True:
            time.sleep(1)
    except KeyboardInterrupt:
        pass
    finally:
        handle.stop()


def _agent_link(name: str) -> AgentLink:
    from fusesched.cli.local import AGENT_LINKS

    if name not in AGENT_LINKS:
        _fail(f"unknown --agent-link {name!r}; choose from: {', '.join(AGENT_LINKS)}", 2)
    return "direct" if name == "direct" else "http"


def up(
    data_dir: DataDirOpt = Path("fusesched-data"),
    port: Annotated[int, typer.Option(min=0, max=65535, help="Port of the REST API.")] = 8642,
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
    tenancy: TenancyOpt = None,
    licenses: LicensesOpt = None,
    pools: PoolsOpt = None,
    power: PowerOpt = None,
    queue_order: Annotated[
        str, typer.Option(help="Queue-order policy (multifactor: fair share and QoS).")
    ] = "fcfs",
    agent_link: Annotated[
        str,
        typer.Option(
            help="How the local agents reach the controller: 'direct' (calls in this process) "
            "or 'http' (its REST API, as agents on other machines do)."
        ),
    ] = "direct",
    smtp: SmtpOpt = None,
    mail_from: MailFromOpt = "",
    mail_domain: MailDomainOpt = "",
    smtp_starttls: StartTlsOpt = False,
    smtp_user: SmtpUserOpt = None,
    notify_webhook: WebhookOpt = None,
    inactive_limit: InactiveLimitOpt = DEFAULT_INACTIVE_LIMIT_S,
    purge_after_age: PurgeAfterOpt = None,
) -> None:
    """Start a whole cluster here: a controller (SQLite) and local agent(s), in one command."""
    from fusesched.cli.local import LocalCluster
    from fusesched.policies.registry import CoreConfig, PolicyError

    leading = _reconfigure_on_hangup()
    try:
        core = CoreConfig(
            queue_order=queue_order,
            placement="best-fit",
            tenancy=load_tenancy(tenancy),
            licenses=load_licenses(licenses),
        )
    except PolicyError as exc:
        _fail(str(exc), 2)
    try:
        cluster = LocalCluster(
            data_dir,
            port=port,
            agents=agents,
            agent_config=config,
            auth=auth,
            core=core,
            federation=load_federation(pools),
            power=load_power(power),
            agent_link=_agent_link(agent_link),
            notify=notify_config(
                smtp, mail_from, mail_domain, smtp_starttls, smtp_user, notify_webhook
            ),
            tenancy_file=tenancy,
            inactive_limit_s=inactive_limit,
            purge_after_s=purge_after(purge_after_age, core.tenancy),
        ).start()
    except (ValueError, OSError) as exc:
        _fail(str(exc), 2)
    err.print(
        f"fusesched is up at [bold]{cluster.url}[/] with {agents} agent(s); data in {data_dir}\n"
        f"  web portal: {cluster.url}/portal/\n"
        f"  export FUSESCHED_CONTROLLER={cluster.url}"
    )
    if auth:
        path = cluster.server.admin_token_path or data_dir / "admin.token"
        err.print(f"  export FUSESCHED_TOKEN=$(cat {path})   # the cluster-admin token")
    _say_unresolved(cluster.agent_configs)
    _stop_on_signals()
    leading.controller = lambda: cluster.server.controller
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
        leading.controller = lambda: None
        cluster.stop()


def _say_unresolved(configs: Sequence[AgentConfig]) -> None:
    """Warn when this machine cannot resolve the local agents' node names: jobs' own
    ``MASTER_ADDR`` works, but a script resolving ``scontrol show hostnames`` does not."""
    from fusesched.cli.local import unresolved

    missing = unresolved([config.name for config in configs if config.name])
    if not missing:
        return
    addresses = sorted({str(config.address) for config in configs})
    err.print(
        f"  [yellow]note:[/] this machine does not resolve the node name(s) {', '.join(missing)}:"
        " jobs get MASTER_ADDR set to a node's address, but a script that resolves a name from"
        " `scontrol show hostnames` (torchrun's --rdzv_endpoint, mpirun --host) fails. To make"
        f" them resolve, add to /etc/hosts: {addresses[0]} {' '.join(missing)}",
        highlight=False,
    )
