"""``fusesched reservation create|list|update|delete``: advance reservations, as Slurm's
``scontrol create|update|delete reservation`` (docs/RESERVATIONS.md). Creating, changing and
deleting is for cluster-admins."""

from __future__ import annotations

import time
from typing import Annotated, Any

import typer
from rich import box
from rich.table import Table

from fusesched.cli.entry import HELP_MARKUP
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
)
from fusesched.hostlist import expand_hostlist
from fusesched.model.reservation import RESERVATION_NAME, when
from fusesched.model.times import LATEST_TIME
from fusesched.submit.begin import FORMS, parse_begin

reservation_app = typer.Typer(
    rich_markup_mode=HELP_MARKUP,
    name="reservation",
    help="Advance reservations: nodes set aside for a time window (scontrol create reservation).",
    no_args_is_help=True,
)


def _names(text: str | None) -> list[str]:
    return [n.strip() for n in (text or "").split(",") if n.strip()]


def window(start: str, end: str | None, duration: str | None, now: float) -> tuple[float, float]:
    """(start, end) in Unix seconds from ``--start`` and ``--end`` or ``--duration``;
    ``ValueError`` with a message for people."""
    if (end is None) == (duration is None):
        raise ValueError("give --end or --duration (one of them)")
    try:
        begins = parse_begin(start, now)
    except ValueError as exc:
        raise ValueError(f"--start: {_plain(exc)}") from None
    _bounded("--start", begins)
    if duration is not None:
        return begins, _bounded("--duration", begins + _duration(duration))
    assert end is not None
    try:
        ends = parse_begin(end, now)
    except ValueError as exc:
        raise ValueError(f"--end: {_plain(exc)}") from None
    return begins, _bounded("--end", ends)


def changed_window(
    start: str | None, end: str | None, duration: str | None, now: float
) -> dict[str, float]:
    """What ``update`` sends for ``--start``, ``--end`` and ``--duration`` (each may be left
    out; ``--duration`` counts from the new start, or the kept one: the controller adds
    it); ``ValueError`` with a message for people."""
    if end is not None and duration is not None:
        raise ValueError("give --end or --duration, not both")
    out: dict[str, float] = {}
    if start is not None:
        try:
            out["start"] = _bounded("--start", parse_begin(start, now))
        except ValueError as exc:
            raise ValueError(f"--start: {_plain(exc)}") from None
    if end is not None:
        try:
            out["end"] = _bounded("--end", parse_begin(end, now))
        except ValueError as exc:
            raise ValueError(f"--end: {_plain(exc)}") from None
    if duration is not None:
        out["duration_s"] = _bounded("--duration", _duration(duration))
    return out


def _duration(text: str) -> float:
    """``--duration`` in seconds; ``ValueError`` with a message for people."""
    # (imported here: the submission parsers load NumPy, and every client command, squeue's
    # too, imports this module to build its command table)
    from fusesched.submit.syntax import parse_duration

    try:
        seconds = parse_duration(text)
    except ValueError as exc:
        raise ValueError(f"--duration: {exc}") from None
    if seconds is None:
        raise ValueError("--duration: a reservation needs an end (not 'unlimited')")
    return float(seconds)


def _bounded(option: str, t: float) -> float:
    if not t <= LATEST_TIME:
        raise ValueError(f"{option}: past the end of year 9999 (times end there)")
    return t


def _plain(exc: ValueError) -> str:
    """A begin-time reader's message, for a reservation's start or end."""
    return str(exc).replace("begin time", "time")


@reservation_app.command("create")
def create(
    name: Annotated[str, typer.Argument(help="The reservation's name (sbatch --reservation).")],
    nodes: Annotated[
        str, typer.Option("--nodes", "-w", help="Host list, as Slurm's: 'node[1-4],gpu7'.")
    ],
    start: Annotated[str, typer.Option("--start", help=f"When it starts: {FORMS}.")],
    end: Annotated[str | None, typer.Option("--end", help="When it ends (as --start).")] = None,
    duration: Annotated[
        str | None, typer.Option("--duration", help="How long: 2h, 90m, 1d, 01:30:00.")
    ] = None,
    users: Annotated[
        str | None, typer.Option("--users", help="Comma-separated users whose jobs may run in it.")
    ] = None,
    tenants: Annotated[
        str | None, typer.Option("--tenants", help="Comma-separated tenants whose jobs may.")
    ] = None,
    controller_url: ControllerOpt = None,
    token: TokenOpt = None,
    ca: CaOpt = None,
    as_json: JsonOpt = False,
) -> None:
    """Reserve nodes for a window. With neither --users nor --tenants it is a maintenance
    reservation: no job runs on those nodes in the window. Other jobs may still start there
    if their time limit ends them before the start; running jobs are not touched (the
    command warns about those that run into the window)."""
    if not RESERVATION_NAME.fullmatch(name):
        _fail(f"invalid reservation name {name!r} (letters, digits, '_', '.', '-')", 2)
    try:
        hosts = expand_hostlist(nodes)
        begins, ends = window(start, end, duration, time.time())
    except ValueError as exc:
        _fail(str(exc), 2)
    if not hosts:
        _fail("--nodes names no node", 2)
    client = _client(controller_url, token, ca)
    answer = _call(
        client.create_reservation, name, hosts, begins, ends, _names(users), _names(tenants)
    )
    if as_json:
        _print_json(answer)
        return
    res = answer["reservation"]
    console.print(
        f"Reservation {res['name']} created: {len(res['nodes'])} node(s), "
        f"{_time(res['start'])} to {_time(res['end'])}",
        highlight=False,
    )
    for warning in answer["warnings"]:
        err.print(f"[yellow]warning:[/] {warning}", highlight=False)


@reservation_app.command("list")
def list_(
    controller_url: ControllerOpt = None,
    token: TokenOpt = None,
    ca: CaOpt = None,
    as_json: JsonOpt = False,
) -> None:
    """The reservations that have not ended, by start."""
    client = _client(controller_url, token, ca)
    found: list[dict[str, Any]] = _call(client.reservations)
    if as_json:
        _print_json(found)
        return
    if not found:
        console.print("no reservations")
        return
    table = Table(box=box.SIMPLE_HEAD)
    for column in ("name", "state", "start", "end", "nodes", "for"):
        table.add_column(column)
    for res in found:
        who = [*(f"user {u}" for u in res["users"]), *(f"tenant {t}" for t in res["tenants"])]
        table.add_row(
            res["name"],
            "active" if res["active"] else "waiting",
            _time(res["start"]),
            _time(res["end"]),
            _compact(res["nodes"]),
            ", ".join(who) or "maintenance",
        )
    console.print(table)


@reservation_app.command("update")
def update(
    name: Annotated[str, typer.Argument(help="The reservation's name.")],
    start: Annotated[str | None, typer.Option("--start", help=f"A new start: {FORMS}.")] = None,
    end: Annotated[str | None, typer.Option("--end", help="A new end (as --start).")] = None,
    duration: Annotated[
        str | None,
        typer.Option("--duration", help="A new length from the (new or kept) start: 2h, 90m."),
    ] = None,
    nodes: Annotated[
        str | None, typer.Option("--nodes", "-w", help="New nodes, a host list: 'node[1-4]'.")
    ] = None,
    users: Annotated[
        str | None, typer.Option("--users", help="New users, comma-separated ('' for none).")
    ] = None,
    tenants: Annotated[
        str | None, typer.Option("--tenants", help="New tenants, comma-separated ('' for none).")
    ] = None,
    controller_url: ControllerOpt = None,
    token: TokenOpt = None,
    ca: CaOpt = None,
    as_json: JsonOpt = False,
) -> None:
    """Change a reservation (scontrol update reservation); what is not given is kept. The
    same checks as create. Running jobs are not touched; jobs waiting to run in it follow
    the change, and are rejected if their user or tenant is no longer listed, or if they no
    longer fit on its nodes."""
    try:
        times = changed_window(start, end, duration, time.time())
        hosts = expand_hostlist(nodes) if nodes is not None else None
    except ValueError as exc:
        _fail(str(exc), 2)
    if hosts is not None and not hosts:
        _fail("--nodes names no node", 2)
    if not times and hosts is None and users is None and tenants is None:
        _fail(
            "nothing to change: give --start, --end or --duration, --nodes, --users or --tenants", 2
        )
    client = _client(controller_url, token, ca)
    answer = _call(
        client.update_reservation,
        name,
        start=times.get("start"),
        end=times.get("end"),
        duration_s=times.get("duration_s"),
        nodes=hosts,
        users=None if users is None else _names(users),
        tenants=None if tenants is None else _names(tenants),
    )
    if as_json:
        _print_json(answer)
        return
    res = answer["reservation"]
    console.print(
        f"Reservation {res['name']} updated: {len(res['nodes'])} node(s), "
        f"{_time(res['start'])} to {_time(res['end'])}",
        highlight=False,
    )
    for warning in answer["warnings"]:
        err.print(f"[yellow]warning:[/] {warning}", highlight=False)


@reservation_app.command("delete")
def delete(
    name: Annotated[str, typer.Argument(help="The reservation's name.")],
    controller_url: ControllerOpt = None,
    token: TokenOpt = None,
    ca: CaOpt = None,
) -> None:
    """Delete a reservation: its nodes are ordinary again, and the jobs waiting to run in it
    are rejected."""
    client = _client(controller_url, token, ca)
    _call(client.delete_reservation, name)
    console.print(f"Reservation {name} deleted", highlight=False)


def _time(t: float) -> str:
    """A start or end as the controller's reasons show it (UTC; a number past year 9999)."""
    return when(float(t))


def _compact(nodes: list[str], shown: int = 6) -> str:
    if len(nodes) <= shown:
        return ",".join(nodes)
    return ",".join(nodes[:shown]) + f",… ({len(nodes)})"
