"""Waiting in the event loop until something changed (a long poll's wait): the pty relay's
buffers (controller/pty_relay.py) and srun's standard-input streams
(controller/stdin_streams.py) both wake their waiters this way."""

from __future__ import annotations

import asyncio
from collections.abc import Callable


class Changes:
    """A pulse that wakes every waiter (:meth:`pulse`), and a wait until a condition holds
    or a time has passed (:meth:`until`). Made and used in the event loop's thread."""

    def __init__(self) -> None:
        self._changed = asyncio.Event()

    def pulse(self) -> None:
        """Wake every waiter: something changed."""
        self._changed.set()
        self._changed = asyncio.Event()

    async def until(self, ready: Callable[[], bool], wait_s: float, max_wait_s: float) -> None:
        """Return once ``ready()`` holds, looked at after each pulse, or after ``wait_s``
        seconds (0 to ``max_wait_s``), whichever comes first."""
        loop = asyncio.get_running_loop()
        deadline = loop.time() + min(max(wait_s, 0.0), max_wait_s)
        while not ready():
            left = deadline - loop.time()
            if left <= 0:
                return
            try:
                await asyncio.wait_for(self._changed.wait(), left)
            except TimeoutError:
                return
