"""How ``fusesched show`` prints readiness (the tasks' readiness probes, docs/SUBMIT.md
"Probes"): a line for the job and a column for its tasks. A controller older than probes
says nothing of readiness; neither does a job without a readiness probe."""

from __future__ import annotations

import time
from collections.abc import Mapping, Sequence
from typing import Any


def _since(at: object, now: float) -> str:
    if isinstance(at, bool) or not isinstance(at, int | float):
        return ""
    clock = time.strftime("%H:%M:%S", time.localtime(at))
    return f" since {clock} ({max(0, round(now - at))} s ago)"


def readiness_line(job: Mapping[str, Any], now: float | None = None) -> str | None:
    """``ready: no (1 of 2 tasks ready)``, ``ready: yes (2 of 2 tasks ready) since …``,
    ``ready: unknown (…)``, or None for a job that has no say (ended, no readiness probe)."""
    said = [t for t in job.get("tasks") or [] if t.get("ready") is not None]
    ready = job.get("ready")
    if ready is None and not said:
        return None
    count = sum(1 for t in said if t["ready"] is True)
    of = f"{count} of {len(said)} tasks ready"
    if ready is True:
        since = max((t.get("ready_since") or 0 for t in said), default=0)
        return f"ready: yes ({of}){_since(since or None, time.time() if now is None else now)}"
    if ready is False:
        return f"ready: no ({of})"
    return f"ready: unknown ({of}; the agent of another task does not report readiness)"


def ready_cell(task: Mapping[str, Any], now: float | None = None) -> str:
    """A task's ``ready`` column: ``yes``/``no`` with since when, ``?`` unknown, blank when
    it has no say."""
    ready = task.get("ready")
    if ready is None:
        return ""
    word = "yes" if ready else "no"
    return word + _since(task.get("ready_since"), time.time() if now is None else now)


def has_readiness(tasks: Sequence[Mapping[str, Any]]) -> bool:
    """Whether some task says whether it is ready (the table then has a ``ready`` column)."""
    return any(t.get("ready") is not None for t in tasks)
