"""The borrowing back-off of the tenancy gate (``borrow_backoff_s``; docs/TENANCY_RESULTS.md,
"Borrowing back-off"). Pure bookkeeping: the gate decides what a back-off forbids.

A job preempted while its queue borrowed may borrow again only after ``backoff_s``, doubled at
each such preemption; a job that ends of itself, or leaves the queue, is forgotten.
"""

from __future__ import annotations

import math


class BorrowBackoff:
    """Which jobs back off from borrowing, until when, and which back-offs just ended."""

    def __init__(self, backoff_s: float) -> None:
        self.backoff_s = backoff_s
        self._until: dict[str, tuple[int, float]] = {}  # job -> (times preempted so, until)
        self._queue: dict[str, str] = {}  # ... and its queue
        self._next = math.inf  # the earliest back-off still to end
        self._announced_at = -math.inf  # back-offs that ended by then were announced

    def __bool__(self) -> bool:
        return bool(self._until)

    def active(self, job_id: str, now: float) -> bool:
        """Whether ``job_id`` may not borrow now."""
        entry = self._until.get(job_id)
        return entry is not None and entry[1] > now

    def preempted(self, job_id: str, queue: str, now: float) -> None:
        """``job_id`` (of ``queue``, which borrowed) was preempted: it backs off, twice as long
        as the previous time."""
        times = self._until.get(job_id, (0, 0.0))[0] + 1
        until = now + self.backoff_s * 2 ** (times - 1)
        self._until[job_id] = (times, until)
        self._queue[job_id] = queue
        self._next = min(self._next, until)

    def drop(self, job_id: str) -> None:
        """``job_id`` ended of itself or left the queue: nothing to back off from."""
        if self._until.pop(job_id, None) is not None:
            del self._queue[job_id]

    def due(self, now: float) -> bool:
        """Whether some back-off ended by ``now`` and was not yet announced."""
        return now >= self._next

    def ended(self, now: float) -> set[str]:
        """The queues of the jobs whose back-off ended since the last call (their parked
        jobs should be checked again, as when quota is freed)."""
        queues: set[str] = set()
        later = math.inf
        for job_id, (_, until) in self._until.items():
            if until <= now:
                if until > self._announced_at:
                    queues.add(self._queue[job_id])
            else:
                later = min(later, until)
        self._announced_at = now
        self._next = later
        return queues

    def next_wakeup(self) -> float | None:
        """When the next back-off ends (a shell should run a cycle then), or None."""
        return None if self._next == math.inf else self._next
