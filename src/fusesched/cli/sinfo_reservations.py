"""``fusesched sinfo -T/--reservation``: the advance reservations (``GET /v1/reservations``)
in sinfo's layout, as Slurm's prints them::

    RESV_NAME     STATE           START_TIME             END_TIME     DURATION  NODELIST
    maint        ACTIVE  2026-12-07T22:23:20  2026-12-07T23:23:20     01:00:00  n[1-4]

The name as wide as the widest (``RESV_NAME`` at least), then the state (``ACTIVE`` once its
window has opened, else ``INACTIVE``), the window in local time, its length (``[D-]HH:MM:SS``)
and the nodes as a host list; ``No reservations in the system`` when there is none. As in
Slurm, ``-o``/``-O`` and the node filters do not apply. Pure: the views in, the text out.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from typing import Any, Final

from fusesched.cli.live import slurm_hms
from fusesched.cli.scontrol_show import stamp
from fusesched.hostlist import compress_hostlist

NONE: Final = "No reservations in the system"
HEADER: Final = ("RESV_NAME", "STATE", "START_TIME", "END_TIME", "DURATION", "NODELIST")


def record(res: Mapping[str, Any]) -> dict[str, Any]:
    """One reservation as a line says it (and ``--json`` prints it)."""
    start, end = float(res["start"]), float(res["end"])
    return {
        "name": str(res["name"]),
        "state": "ACTIVE" if res.get("active") else "INACTIVE",
        "start_time": stamp(start),
        "end_time": stamp(end),
        "duration": slurm_hms(max(0, math.ceil(end - start))),
        "nodelist": compress_hostlist(list(res.get("nodes") or [])) or "(null)",
    }


def lines(found: Sequence[Mapping[str, Any]], header: bool) -> list[str]:
    """What ``sinfo -T`` prints for the reservations ``found`` (their order kept)."""
    if not found:
        return [NONE]
    said = [record(res) for res in found]
    width = max(len(HEADER[0]), *(len(r["name"]) for r in said))

    def line(name: str, state: str, start: str, end: str, length: str, nodes: str) -> str:
        return f"{name:<{width}}  {state:>8}  {start:>19}  {end:>19}  {length:>11}  {nodes}"

    out = [line(*HEADER)] if header else []
    out.extend(
        line(r["name"], r["state"], r["start_time"], r["end_time"], r["duration"], r["nodelist"])
        for r in said
    )
    return out
