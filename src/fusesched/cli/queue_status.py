"""``fusesched queues`` (each queue's jobs and quota, as ``sinfo``'s partitions and Kueue's
ClusterQueue status) and ``fusesched share`` (the fair-share tree, as Slurm's ``sshare``)."""

from __future__ import annotations

import getpass
from typing import Annotated, Any

import typer
from rich import box
from rich.table import Table

from fusesched.cli import id_lists as il
from fusesched.cli import sshare_format as sf
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
)
from fusesched.cli.slurm_version import VersionOpt

ListOpt = list[str] | None


def quota_text(queue: dict[str, Any]) -> str:
    """A queue's quota columns as ``resource used/nominal``, each with what it borrows
    (``+N``); the flavour is named when the queue has several."""
    cells = queue.get("quota") or []
    flavors = {c["flavor"] for c in cells}
    parts = []
    for cell in cells:
        name = cell["resource"].rsplit("/", 1)[-1]
        if len(flavors) > 1:
            name = f"{cell['flavor']}:{name}"
        text = f"{name} {cell['used']}/{cell['nominal']}"
        if cell["borrowed"] not in ("0", "0m"):
            text += f" (+{cell['borrowed']} borrowed)"
        parts.append(text)
    return ", ".join(parts) if parts else "-"


def queues(
    controller_url: ControllerOpt = None,
    token: TokenOpt = None,
    ca: CaOpt = None,
    as_json: JsonOpt = False,
) -> None:
    """Each queue: its pending and running jobs and, for the tenancy configuration's queues
    (idle ones too), its tenant, cohort and quota in use against its nominal quota, with what
    it borrows from its cohort."""
    found = _call(_client(controller_url, token, ca).queues)
    if as_json:
        _print_json(found)
        return
    if not found:
        console.print("no queues: no tenancy configuration, and no job waits or runs")
        return
    table = Table(box=box.SIMPLE_HEAD, show_edge=False)
    for name in ("queue", "tenant", "cohort", "pending", "running", "quota (used/nominal)"):
        table.add_column(name, justify="right" if name in ("pending", "running") else "left")
    for q in found:
        table.add_row(
            q["name"],
            q.get("tenant") or "-",
            q.get("cohort") or "-",
            str(q["pending"]),
            str(q["running"]),
            quota_text(q),
        )
    console.print(table)


def _number(value: float | None, digits: int = 6) -> str:
    return "-" if value is None else f"{value:.{digits}f}"


def _caller() -> str:
    """The user Slurm's options show without ``-u`` or ``-a``: the local user name (a
    controller without authentication stores it; with a token the controller shows a user
    only their own associations)."""
    try:
        return getpass.getuser()
    except (KeyError, OSError):  # a uid with no account and no USER/LOGNAME
        _fail("sshare: cannot tell who you are (no user name for this uid; set USER)", 2)


def share(
    controller_url: ControllerOpt = None,
    token: TokenOpt = None,
    ca: CaOpt = None,
    as_json: JsonOpt = False,
    users_only: Annotated[
        bool,
        typer.Option("--Users", "-U", help="Slurm's: users' associations only, not the accounts."),
    ] = False,
    all_users: Annotated[
        bool, typer.Option("--all", "-a", help="Slurm's: every user's, not only yours.")
    ] = False,
    users: Annotated[
        ListOpt, typer.Option("--users", "-u", help="Slurm's: only these users' (a comma list).")
    ] = None,
    accounts: Annotated[
        ListOpt, typer.Option("--accounts", "-A", help="Slurm's: only these accounts (tenants).")
    ] = None,
    fmt: Annotated[
        str | None,
        typer.Option("--format", "-o", help="Slurm's fields, e.g. Account%256,User,FairShare."),
    ] = None,
    noheader: Annotated[bool, typer.Option("--noheader", "-n", help="Slurm's: no header.")] = False,
    parsable: Annotated[
        bool, typer.Option("--parsable", "-p", help="Slurm's: '|' after each field.")
    ] = False,
    parsable2: Annotated[
        bool, typer.Option("--parsable2", "-P", help="Slurm's: '|' between fields.")
    ] = False,
    version: VersionOpt = False,  # (eager: printed before anything else)
) -> None:
    """The fair-share tree (as Slurm's sshare): each account — organisation, tenant, queue,
    user — with its shares, its decayed usage and its fair-share factor (1: has used nothing
    of its share, 0: used the most over it). Needs a tenancy configuration. Slurm's options
    (-U -a -u -A -o -n -p -P) print it in Slurm's layout, tenants as accounts, your
    associations only unless -u or -a, with each user's account `default` (a job's when it
    names none; without a tenancy configuration the only one): `sshare -U -o Account -n`
    lists the accounts you may submit under."""
    slurm = users_only or all_users or users or accounts or fmt is not None or noheader
    slurm = slurm or parsable or parsable2
    if slurm and as_json:
        _fail("Slurm's options (-U -a -u -A -o -n -p -P) print Slurm's lines: leave out --json", 2)
    try:
        fields = sf.parse_format(fmt if fmt is not None else sf.DEFAULT_FORMAT)
        named = il.comma_list(users, "user"), il.comma_list(accounts, "account")
    except ValueError as exc:
        _fail(str(exc), 2)
    found = _call(_client(controller_url, token, ca).fairshare)
    if slurm:
        tree = sf.associations(found, [])
        if all_users:
            whom = sorted({a.user for a in tree if a.user} | {_caller()})
        else:
            whom = list(dict.fromkeys(named[0])) or [_caller()]
        rows = sf.select(
            sf.associations(found, whom), users_only=users_only, users=whom, accounts=named[1]
        )
        delimiter = "|" if parsable or parsable2 else None
        lines = sf.render(rows, fields, header=not noheader, delimiter=delimiter, trailing=parsable)
        if lines:
            typer.echo("\n".join(lines))
        return
    if as_json:
        _print_json(found)
        return
    if not found:
        console.print(
            "no fair share: the controller runs without a tenancy configuration "
            "(controller --tenancy, docs/TENANCY.md)"
        )
        return
    table = Table(box=box.SIMPLE_HEAD, show_edge=False)
    columns = ("account", "raw shares", "norm shares", "raw usage", "effective usage")
    for name in (*columns, "fair share"):
        table.add_column(name, justify="left" if name == "account" else "right")
    for row in found:
        name = row["account"].rsplit("/", 1)[-1]
        table.add_row(
            "  " * (row["depth"] - 1) + name,
            f"{row['shares']:g}",
            _number(row["norm_shares"]),
            f"{row['usage']:.0f}",
            _number(row["norm_usage"]),
            _number(row.get("factor")),
        )
    console.print(table)
