"""When the controller's scheduling loop runs its next cycle: :class:`Wake`."""

from __future__ import annotations

import threading
import time


class Wake:
    """When the scheduling loop runs its next cycle: as soon as it may (:meth:`set`: an exit,
    a node, a cancel), or at a given time (:meth:`set_at`: a submission, so that a stream of
    them shares a cycle instead of paying for one each)."""

    def __init__(self) -> None:
        self._cv = threading.Condition()
        self._now = False
        self._at: float | None = None  # time.monotonic() of a cycle asked for later

    def set(self) -> None:
        with self._cv:
            self._now = True
            self._cv.notify_all()

    def set_at(self, at: float) -> None:
        with self._cv:
            if self._at is None or at < self._at:
                self._at = at
                self._cv.notify_all()

    def clear(self) -> None:
        with self._cv:
            self._now = False
            self._at = None

    def wait(self, timeout: float) -> None:
        """Until :meth:`set`, the time given to :meth:`set_at`, or ``timeout`` seconds."""
        deadline = time.monotonic() + timeout
        with self._cv:
            while not self._now:
                until = deadline if self._at is None else min(deadline, self._at)
                left = until - time.monotonic()
                if left <= 0:
                    return
                self._cv.wait(left)
