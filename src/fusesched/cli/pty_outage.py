"""The controller's absence as ``fusesched run --pty``'s relay lives through it (a restart, a
standby taking over): its calls fail (unreachable; 502, 503 or 504: not ready for the
terminal yet) and are tried again, for up to :data:`OUTAGE_S`. :class:`Outage` says once that
the controller is away and once that it is back, and when it has been away too long (the
relay's threads share one; the caller gives the clock); :func:`through_outage` tries one call
again until it is back (run's wait for the job's end once the terminal has ended)."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from typing import TypeVar

T = TypeVar("T")

#: The longest the terminal waits for the controller (seconds): a restart takes a few, a
#: standby's takeover some more, and the job's own InactiveLimit (at most 30 s for a terminal
#: job) counts from the controller's start.
OUTAGE_S = 60.0
#: The answers of a controller that is there but cannot serve the terminal yet: a proxy's,
#: a standby's, a restarted one's whose node has not reported the task again.
TRANSIENT = frozenset({502, 503, 504})


def transient(status: int) -> bool:
    """Whether a call that failed with ``status`` (0: no answer) is tried again."""
    return status == 0 or status in TRANSIENT


class Outage:
    """Tracks the controller's absence; ``tell`` says a line (stderr)."""

    def __init__(self, tell: Callable[[str], None], limit_s: float = OUTAGE_S) -> None:
        self.tell = tell
        self.limit_s = limit_s
        self.since: float | None = None  # (set: away since then)
        self._lock = threading.Lock()

    def failed(self, why: str, now: float) -> bool:
        """A call failed for the controller's absence (``why``) at ``now``: whether to try
        again (False once it has been away longer than :attr:`limit_s`)."""
        with self._lock:
            if self.since is None:
                self.since = now
                self.tell(
                    f"the controller cannot be reached ({why}); the terminal waits for it "
                    f"(up to {self.limit_s:g} s)"
                )
            return now - self.since < self.limit_s

    def worked(self) -> None:
        """A call went through: the controller is back, if it was away."""
        with self._lock:
            if self.since is None:
                return
            self.since = None
            self.tell("the controller answers again: the terminal goes on")


def through_outage(
    call: Callable[[], T],
    limit_s: float = OUTAGE_S,
    pause_s: float = 0.5,
    clock: Callable[[], float] = time.monotonic,
    sleep: Callable[[float], None] = time.sleep,
) -> T:
    """``call()``, tried again every ``pause_s`` while it fails for the controller's absence,
    for up to ``limit_s``; its last :class:`ControllerError` after that, or any other at
    once."""
    from fusesched.sdk import ControllerError

    deadline = clock() + limit_s
    while True:
        try:
            return call()
        except ControllerError as exc:
            if not transient(exc.status) or clock() >= deadline:
                raise
        sleep(pause_s)
