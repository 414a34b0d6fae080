"""The agent's end of a ``run --pty`` terminal (agent/pty_bridge.py) against a relay played by
hand: once the controller has no session for the task any more (it refuses the task: 404,
409), the terminal is closed, so that the task gets SIGHUP and its job ends
(docs/SUBMIT.md, "Interactive jobs"), rather than an idle shell left running that nobody can
type to while run waits on it; while the controller cannot be reached (it restarts), the
task's output is read on and kept, and what a new session asks for is sent again, so that the
client reads every byte once."""

from __future__ import annotations

import os
import signal
import subprocess
import threading
import time
from pathlib import Path
from typing import Any

import httpx
import pytest

from fusesched.agent import pty_bridge
from fusesched.agent.pty_bridge import PtyBridge, RelayGone, open_pty
from fusesched.submit.terminal import Terminal


class GoneRelay:
    """A controller that lost the session: the keystrokes' poll is refused at once."""

    def __init__(self) -> None:
        self.posted: list[bytes] = []

    def read_input(self, task_id: str, offset: int, size_seq: int) -> dict[str, Any]:
        raise RelayGone("offset 5 is outside the stream's kept bytes (0-0)")

    def write_output(
        self, task_id: str, offset: int, data: bytes, eof: bool, kept: int
    ) -> tuple[int, int]:
        self.posted.append(data)
        return offset + len(data), offset + len(data)


def _holds(pid: int, path: str) -> bool:
    """Whether process ``pid`` runs ``sleep`` with the terminal ``path`` as its stdin."""
    try:
        command = Path(f"/proc/{pid}/cmdline").read_bytes().split(b"\0")[0]
        return command.endswith(b"sleep") and os.readlink(f"/proc/{pid}/fd/0") == path
    except OSError:
        return False


def test_an_idle_task_gets_sighup_once_the_relay_has_lost_its_keystrokes() -> None:
    pty = open_pty(Terminal(), None)
    task = subprocess.Popen(  # (as the shim: a session leader opening the slave by path)
        ["/bin/sh", "-c", 'exec 0<>"$1" 1>&0 2>&0; exec sleep 60', "sh", pty.path],
        start_new_session=True,
        # (a test run under nohup ignores SIGHUP, and a child would inherit that)
        preexec_fn=lambda: signal.signal(signal.SIGHUP, signal.SIG_DFL),
    )
    try:
        # (the hang-up reaches only a task holding the terminal: wait until sleep has it)
        deadline = time.monotonic() + 10
        while not _holds(task.pid, pty.path) and time.monotonic() < deadline:
            time.sleep(0.01)
        alive = lambda: task.poll() is None  # noqa: E731
        bridge = PtyBridge("7.main.0", pty, GoneRelay(), alive, threading.Event())  # type: ignore[arg-type]
        bridge.start()
        assert task.wait(10) == -signal.SIGHUP
    finally:
        task.kill()
        task.wait()


class RestartingRelay:
    """A relay whose client reads each chunk one post late (the agent hears of it one post
    later still); once ``first`` has come, the controller goes away (the chunk its client had
    not read is lost with it) and comes back ``away_s`` later with a new session, which asks
    for what the client has not read."""

    def __init__(self, first: bytes, away_s: float) -> None:
        self.first = first
        self.away_s = away_s
        self.read = bytearray()  # what the client has read
        self.held = b""  # what the relay holds, not yet read
        self.back_at: float | None = None  # (set: away until then)
        self.new_session = False
        self.closed = False
        self.lock = threading.Lock()

    def _reachable(self) -> None:
        if self.back_at is not None and time.monotonic() < self.back_at:
            raise httpx.ConnectError("connection refused")

    def read_input(self, task_id: str, offset: int, size_seq: int) -> dict[str, Any]:
        time.sleep(0.05)
        with self.lock:
            self._reachable()
            return {"data": "", "offset": offset, "size_seq": size_seq, "ended": self.closed}

    def write_output(
        self, task_id: str, offset: int, data: bytes, eof: bool, kept: int
    ) -> tuple[int, int]:
        with self.lock:
            self._reachable()
            end = len(self.read) + len(self.held)
            if self.new_session:
                self.new_session = False
                assert kept <= len(self.read)  # (the agent kept all the client had not read)
                if offset != end:
                    return end, len(self.read)
            assert kept <= offset <= end
            acked = len(self.read)
            self.read += self.held  # (the client reads what was there before)
            self.held = data[end - offset :]
            self.closed = eof
            if self.closed:
                self.read += self.held
            if self.first in self.read and self.back_at is None:
                self.held = b""  # lost with the controller
                self.back_at = time.monotonic() + self.away_s
                self.new_session = True
            return offset + len(data), acked


def test_the_output_written_while_the_controller_is_away_reaches_the_client_once(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(pty_bridge, "RETRY_S", 0.1)
    pty = open_pty(Terminal(), None)
    script = 'exec 0<>"$1" 1>&0 2>&0; echo first; echo second; sleep 0.3; seq 20000; echo last'
    task = subprocess.Popen(["/bin/sh", "-c", script, "sh", pty.path], start_new_session=True)
    relay = RestartingRelay(b"second", away_s=1.0)
    try:
        alive = lambda: task.poll() is None  # noqa: E731
        bridge = PtyBridge("7.main.0", pty, relay, alive, threading.Event())  # type: ignore[arg-type]
        bridge.start()
        deadline = time.monotonic() + 20
        while not relay.closed:
            assert time.monotonic() < deadline, bytes(relay.read[-200:])
            time.sleep(0.05)
    finally:
        task.kill()
        task.wait()
    numbers = "".join(f"{n}\r\n" for n in range(1, 20001))
    assert relay.read.decode() == f"first\r\nsecond\r\n{numbers}last\r\n"
