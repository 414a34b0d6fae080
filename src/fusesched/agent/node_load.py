"""The node's free memory and load average, as Slurm's slurmd reports them (``FreeMem``,
``CPULoad``): read from ``/proc`` at each full heartbeat (two small files, a few
microseconds), for ``sinfo %e %O`` and ``scontrol show node``.

Free memory is the kernel's ``MemFree`` (what Slurm's slurmd reports: its ``sysinfo()``
``freeram``), not ``MemAvailable``: page cache counts as used. The load averages are the
1- and 5-minute ones of ``/proc/loadavg``; Slurm's ``CPULoad`` is the 5-minute one.
A figure that cannot be read is None (printed ``N/A``), never an error.
"""

from __future__ import annotations

import logging
import math
from collections.abc import Callable
from pathlib import Path

import httpx

from fusesched.agent.step_answers import refuses_field
from fusesched.api.wire import LOAD_FIELD, NodeLoadWire

log = logging.getLogger(__name__)

PROC = Path("/proc")


def read_node_load(proc: Path = PROC) -> NodeLoadWire | None:
    """The node's free memory and load averages now; None when neither can be read."""
    free = _free_memory(proc / "meminfo")
    load1, load5 = _load_averages(proc / "loadavg")
    if free is None and load1 is None and load5 is None:
        return None
    return NodeLoadWire(free_memory_bytes=free, load1=load1, load5=load5)


def _free_memory(path: Path) -> int | None:
    """``MemFree`` of ``/proc/meminfo`` in bytes (the file says kB: KiB)."""
    try:
        with path.open("rb") as handle:
            for line in handle:
                if line.startswith(b"MemFree:"):
                    words = line.split()
                    kib = int(words[1])
                    return kib * 1024 if kib >= 0 else None
    except (OSError, ValueError, IndexError):
        return None
    return None


def _load_averages(path: Path) -> tuple[float | None, float | None]:
    """The 1- and 5-minute load averages of ``/proc/loadavg``."""
    try:
        words = path.read_bytes().split()
        values = (float(words[0]), float(words[1]))
    except (OSError, ValueError, IndexError):
        return None, None
    one, five = (v if math.isfinite(v) and v >= 0 else None for v in values)
    return one, five


class LoadReports:
    """What an agent's full beats say of its node's load: ``reader``'s figures (None: no
    reader), until a controller older than the heartbeat's ``load`` field refuses it (422);
    from then on none, until ``refused`` is reset (the agent registers again)."""

    def __init__(self, reader: Callable[[], NodeLoadWire | None] | None) -> None:
        self.reader = reader
        self.refused = False

    def read(self) -> NodeLoadWire | None:
        """The figures for a full beat; None when not reported (no reader, refused, or the
        reading failed: a failure never stops the beat)."""
        if self.reader is None or self.refused:
            return None
        try:
            return self.reader()
        except Exception:
            log.exception("reading the node's free memory and load failed")
            return None

    def refused_by(self, response: httpx.Response, url: str) -> bool:
        """Whether ``response`` is a controller older than the field refusing a beat for it
        (then no later beat carries it)."""
        if response.status_code != 422 or not refuses_field(response, LOAD_FIELD):
            return False
        if not self.refused:
            log.info("the controller at %s is older than node load reports: beats go without", url)
        self.refused = True
        return True
