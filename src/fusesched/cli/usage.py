"""``fusesched usage``: CPU-hours, GPU-hours by model and estimated energy per tenant, user
and queue over a window, as Slurm's ``sreport`` shows them.

It asks the controller (``GET /v1/usage``, which shows each caller only what its role may
see), or, with ``--db URL``, reads the store directly (for operators with database access).
"""

from __future__ import annotations

import csv
import io
import sys
import time
from datetime import UTC, datetime
from enum import StrEnum
from typing import Annotated, Any

import typer
from rich import box
from rich.table import Table

from fusesched.cli.live import CaOpt, ControllerOpt, TokenOpt, _call, _client, _fail, console


class Format(StrEnum):
    TABLE = "table"
    JSON = "json"
    CSV = "csv"


def usage(
    start: Annotated[
        str, typer.Option(help="Window start: ISO date/time (UTC), epoch s, now or -7d.")
    ] = "-30d",
    end: Annotated[str, typer.Option(help="Window end, as --start.")] = "now",
    by: Annotated[
        str, typer.Option(help="Group by any of tenant, user, queue (comma-separated).")
    ] = "tenant,user",
    tenant: Annotated[str | None, typer.Option(help="Only this tenant.")] = None,
    user: Annotated[str | None, typer.Option(help="Only this user.")] = None,
    output: Annotated[Format, typer.Option("--format", help="table, json or csv.")] = Format.TABLE,
    db: Annotated[
        str | None,
        typer.Option(
            "--db", help="Read this store (sqlite:///…, postgresql://…) instead of a controller."
        ),
    ] = None,
    controller_url: ControllerOpt = None,
    token: TokenOpt = None,
    ca: CaOpt = None,
) -> None:
    """Usage over a window: jobs, CPU-hours, GPU-hours by GPU model, estimated energy (kWh)
    and the fair-share charge, per tenant, user and queue (like Slurm's sreport)."""
    from fusesched.store.usage import UsageQueryError, parse_by, parse_time

    now = time.time()
    try:
        fields = parse_by(by)
        window = (parse_time(start, now), parse_time(end, now))
    except UsageQueryError as exc:
        _fail(str(exc), 2)
    if db is not None:
        report = _from_store(db, window, fields, tenant, user, now)
    else:
        client = _client(controller_url, token, ca)
        report = _call(client.usage, window[0], window[1], fields, tenant, user)
    if output is Format.JSON:
        sys.stdout.write(_json(report) + "\n")
    elif output is Format.CSV:
        sys.stdout.write(to_csv(report))
    else:
        console.print(usage_table(report), crop=False)


def _from_store(
    url: str,
    window: tuple[float, float],
    fields: tuple[str, ...],
    tenant: str | None,
    user: str | None,
    now: float,
) -> dict[str, Any]:
    from sqlalchemy.exc import SQLAlchemyError

    from fusesched.api.schemas import usage_view
    from fusesched.store import NoStore, Store
    from fusesched.store.usage import UsageQueryError, usage_report

    try:
        with Store.existing(url) as store:  # a report creates no database
            found = usage_report(store, *window, fields, tenant, user, now=now)
    except (UsageQueryError, ValueError, NoStore) as exc:
        _fail(str(exc), 2)
    except SQLAlchemyError as exc:  # a URL it cannot parse, a store it cannot open or read
        _fail(f"cannot read the store {url}: {exc.__class__.__name__}: {exc.args[0]}", 2)
    return usage_view(found).model_dump(mode="json")


def _json(report: dict[str, Any]) -> str:
    import json

    return json.dumps(report, indent=2)


def _models(report: dict[str, Any]) -> list[str]:
    return sorted(report["total"]["gpu_hours"])


def _cells(report: dict[str, Any], row: dict[str, Any], label: str | None) -> list[str]:
    by: list[str] = report["by"]
    group = [row["group"].get(f, "") for f in by]
    if label is not None and by:
        group = [label, *[""] * (len(by) - 1)]
    gpu = row["gpu_hours"]
    return [
        *group,
        str(row["jobs"]),
        f"{row['cpu_hours']:.1f}",
        *(f"{gpu.get(m, 0.0):.1f}" for m in _models(report)),
        f"{row['energy_kwh_est']:.1f}",
        f"{row['billing']:.1f}",
    ]


def _headers(report: dict[str, Any]) -> list[str]:
    gpus = [f"gpu_hours_{m}" for m in _models(report)]
    return [*report["by"], "jobs", "cpu_hours", *gpus, "energy_kwh_est", "billing"]


def to_csv(report: dict[str, Any]) -> str:
    """The report as CSV: a header, one line per group and a ``TOTAL`` line."""
    out = io.StringIO()
    writer = csv.writer(out, lineterminator="\n")
    writer.writerow(_headers(report))
    for row in report["rows"]:
        writer.writerow(_cells(report, row, None))
    writer.writerow(_cells(report, report["total"], "TOTAL"))
    return out.getvalue()


def usage_table(report: dict[str, Any]) -> Table:
    """The report as a Rich table with a totals row."""
    start, end = (_day(report[k]) for k in ("start", "end"))
    scope = ", ".join(f"{k} {report[k]}" for k in ("tenant", "user") if report.get(k))
    title = f"Usage {start} – {end}" + (f" ({scope})" if scope else "")
    table = Table(title=title, box=box.SIMPLE_HEAD, show_edge=False)
    rows = [_cells(report, r, None) for r in report["rows"]]
    total = _cells(report, report["total"], "TOTAL")
    names = [*report["by"], "jobs", "CPU-h", *(f"GPU-h {m}" for m in _models(report))]
    for i, name in enumerate([*names, "kWh (est.)", "billing"]):
        # never cut: a column is as wide as its widest number or word
        width = max(*(len(w) for w in name.split()), *(len(c[i]) for c in [*rows, total]))
        numeric = i >= len(report["by"])
        table.add_column(name, justify="right" if numeric else "left", min_width=width)
    for cells in rows:
        table.add_row(*cells)
    table.add_section()
    table.add_row(*total, style="bold")
    return table


def _day(t: float) -> str:
    return datetime.fromtimestamp(t, UTC).strftime("%Y-%m-%d %H:%M UTC")


def register(app: typer.Typer) -> None:
    app.command(rich_help_panel="Jobs and cluster")(usage)
