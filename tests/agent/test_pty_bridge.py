"""The agent's end of a ``run --pty`` terminal (agent/pty_bridge.py) against a relay played by
hand: once the controller has no session for the task any more (a controller restart: the
relay is in its memory), the terminal is closed, so that the task gets SIGHUP and its job
ends (docs/SUBMIT.md, "Interactive jobs"), rather than an idle shell left running that
nobody can type to while run waits on it."""

from __future__ import annotations

import signal
import subprocess
import threading
from typing import Any

from fusesched.agent.pty_bridge import PtyBridge, RelayGone, open_pty
from fusesched.submit.terminal import Terminal


class GoneRelay:
    """A controller that lost the session: the keystrokes' poll is refused at once."""

    def __init__(self) -> None:
        self.posted: list[bytes] = []

    def read_input(self, task_id: str, offset: int, size_seq: int) -> dict[str, Any]:
        raise RelayGone("offset 5 is outside the stream's kept bytes (0-0)")

    def write_output(self, task_id: str, offset: int, data: bytes, eof: bool) -> int:
        self.posted.append(data)
        return offset + len(data)


def test_an_idle_task_gets_sighup_once_the_relay_has_lost_its_keystrokes() -> None:
    pty = open_pty(Terminal(), None)
    task = subprocess.Popen(  # (as the shim: a session leader opening the slave by path)
        ["/bin/sh", "-c", 'exec 0<>"$1" 1>&0 2>&0; exec sleep 60', "sh", pty.path],
        start_new_session=True,
    )
    try:
        alive = lambda: task.poll() is None  # noqa: E731
        bridge = PtyBridge("7.main.0", pty, GoneRelay(), alive, threading.Event())  # type: ignore[arg-type]
        bridge.start()
        assert task.wait(10) == -signal.SIGHUP
    finally:
        task.kill()
        task.wait()
