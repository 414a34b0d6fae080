"""``fusesched queues`` (each queue's jobs and quota, as ``sinfo``'s partitions and Kueue's
ClusterQueue status) and ``fusesched share`` (the fair-share tree, as Slurm's ``sshare``)."""

from __future__ import annotations

from typing import Any

from rich import box
from rich.table import Table

from fusesched.cli.live import (
    CaOpt,
    ControllerOpt,
    JsonOpt,
    TokenOpt,
    _call,
    _client,
    _print_json,
    console,
)


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


def share(
    controller_url: ControllerOpt = None,
    token: TokenOpt = None,
    ca: CaOpt = None,
    as_json: JsonOpt = False,
) -> None:
    """The fair-share tree (as Slurm's sshare): each account — organisation, tenant, queue,
    user — with its shares, its decayed usage and its fair-share factor (1: has used nothing
    of its share, 0: used the most over it). Needs a tenancy configuration."""
    found = _call(_client(controller_url, token, ca).fairshare)
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
