"""``fusesched licenses``: the cluster's licenses, as Slurm's ``scontrol show licenses``."""

from __future__ import annotations

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


def licenses(
    controller_url: ControllerOpt = None,
    token: TokenOpt = None,
    ca: CaOpt = None,
    as_json: JsonOpt = False,
) -> None:
    """Each cluster license (controller `--licenses`): how many exist, are in use by
    running jobs and are free, and what waiting jobs ask for (docs/LICENSES.md)."""
    found = _call(_client(controller_url, token, ca).licenses)
    if as_json:
        _print_json(found)
        return
    if not found:
        console.print("no licenses: the controller was started without --licenses")
        return
    table = Table(box=box.SIMPLE_HEAD, show_edge=False)
    for name in ("license", "total", "used", "free", "waiting (jobs)"):
        table.add_column(name, justify="left" if name == "license" else "right")
    for row in found:
        table.add_row(
            row["name"],
            str(row["total"]),
            str(row["in_use"]),
            str(row["free"]),
            f"{row['waiting_demand']} ({row['waiting_jobs']})",
        )
    console.print(table)
