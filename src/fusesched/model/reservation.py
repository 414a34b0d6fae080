"""Advance reservations (Slurm's ``scontrol create reservation``): nodes set aside for a
time window, for some users or tenants — or for nobody (a maintenance window).

The rules the scheduling core applies are in :mod:`fusesched.core.reservations`; what they
mean for users is in docs/RESERVATIONS.md.
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass
from datetime import UTC, datetime

from fusesched.model.times import LATEST_TIME

#: A reservation's name: what ``sbatch --reservation`` names, so no spaces or commas.
RESERVATION_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.-]{0,63}$")

#: Times at or after this are wall-clock Unix seconds (shown as dates); earlier ones are a
#: simulation's seconds (shown as numbers).
WALL_CLOCK_FROM = 1e9


@dataclass(frozen=True, slots=True)
class Reservation:
    """``nodes`` reserved from ``start`` until ``end`` (Unix seconds, or simulated ones) for
    the jobs submitted into it by one of ``users`` or ``tenants``; with neither, for nobody
    (maintenance: no job runs on those nodes in the window)."""

    name: str
    nodes: tuple[str, ...]
    start: float
    end: float
    users: tuple[str, ...] = ()
    tenants: tuple[str, ...] = ()

    def __post_init__(self) -> None:
        if not RESERVATION_NAME.fullmatch(self.name):
            raise ValueError(
                f"reservation name {self.name!r}: letters, digits, '_', '.', '-' (at most 64, "
                "starting with a letter or digit)"
            )
        if not self.nodes:
            raise ValueError(f"reservation {self.name}: needs at least one node")
        if len(set(self.nodes)) != len(self.nodes):
            raise ValueError(f"reservation {self.name}: a node is listed twice")
        if not (math.isfinite(self.start) and math.isfinite(self.end)):
            raise ValueError(f"reservation {self.name}: start and end must be finite times")
        if max(self.start, self.end) > LATEST_TIME:
            raise ValueError(
                f"reservation {self.name}: start and end must come before the end of year "
                f"9999 ({LATEST_TIME:.0f})"
            )
        if "" in self.users or "" in self.tenants:
            raise ValueError(f"reservation {self.name}: a user or tenant name is empty")
        if self.end <= self.start:
            raise ValueError(
                f"reservation {self.name}: the end ({when(self.end)}) must come after the "
                f"start ({when(self.start)})"
            )

    @property
    def maintenance(self) -> bool:
        """Reserved for nobody: no job may be submitted into it."""
        return not self.users and not self.tenants

    def admits(self, user: str, tenant: str) -> bool:
        """Whether a job of ``user`` in ``tenant`` may be submitted into it."""
        return user in self.users or tenant in self.tenants

    def overlaps(self, other: Reservation) -> bool:
        """Whether the two share a node in overlapping windows."""
        if self.start >= other.end or other.start >= self.end:
            return False
        return not set(self.nodes).isdisjoint(other.nodes)


def when(t: float) -> str:
    """A time as people read it: a UTC date for wall-clock times, else the number (and
    past the last date there is, the number: a running job's end may be that far)."""
    if WALL_CLOCK_FROM <= t <= LATEST_TIME:
        return datetime.fromtimestamp(t, UTC).strftime("%Y-%m-%d %H:%M:%S UTC")
    return f"{t:g}"
