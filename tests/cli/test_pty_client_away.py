"""``fusesched run --pty``'s client (cli/pty_client.py) with standard input not a terminal and
with a controller that goes away: a pipe's bytes are relayed as they come (no escapes) and its
end is one Ctrl-D; the terminal of a pipe is $LINES x $COLUMNS (else 24 x 80); a controller
that restarts is said once gone and once back, and the keystrokes its predecessor held but
the task had not read are sent again; one away for too long ends the relay saying why."""

from __future__ import annotations

import contextlib
import os
import threading
import time
from collections.abc import Iterator

import pytest

from fusesched.cli import pty_client
from fusesched.cli.pty_client import EOF_CHAR, Relay, attach, terminal
from fusesched.sdk import ControllerError


@pytest.fixture
def pipes() -> Iterator[tuple[int, int, int, int]]:
    """(stdin's read end, its write end, stdout's read end, its write end)"""
    stdin_r, stdin_w = os.pipe()
    stdout_r, stdout_w = os.pipe()
    yield stdin_r, stdin_w, stdout_r, stdout_w
    for fd in (stdin_r, stdin_w, stdout_r, stdout_w):
        with contextlib.suppress(OSError):
            os.close(fd)


def test_the_terminal_of_a_pipe_is_lines_by_columns(monkeypatch: pytest.MonkeyPatch) -> None:
    reader, writer = os.pipe()
    try:
        monkeypatch.setenv("LINES", "40")
        monkeypatch.setenv("COLUMNS", "100")
        assert (terminal(reader, "xterm").rows, terminal(reader, "xterm").cols) == (40, 100)
        monkeypatch.setenv("LINES", "0")
        monkeypatch.delenv("COLUMNS")
        assert (terminal(reader, "xterm").rows, terminal(reader, "xterm").cols) == (24, 80)
    finally:
        os.close(reader)
        os.close(writer)


class Task:
    """A terminal whose task reads every keystroke at once; its output ends once it has
    read the end of file. ``away``: (from, until) monotonic times when the controller cannot
    be reached; the keystrokes the relay held when it went away are lost with it."""

    def __init__(self, away: tuple[float, float] | None = None) -> None:
        self.read = bytearray()  # what the task has read
        self.held = b""  # what the relay holds, not yet read by the task
        self.away = away
        self.new_session = False
        self.lock = threading.Lock()

    def _reachable(self) -> None:
        if self.away is None:
            return
        now = time.monotonic()
        if self.away[0] <= now < self.away[1]:
            if not self.new_session:
                self.held, self.new_session = b"", True  # (lost with the controller)
            raise ControllerError(0, "cannot reach the controller: connection refused")

    def output(self, offset: int, wait: float) -> tuple[bytes, int, bool]:
        time.sleep(0.02)
        with self.lock:
            self._reachable()
            return b"", offset, self.read.endswith(EOF_CHAR)

    def input(
        self, offset: int, data: bytes, size: tuple[int, int] | None, wait: float, kept: int
    ) -> tuple[int, int]:
        with self.lock:
            self._reachable()
            end = len(self.read) + len(self.held)
            if self.new_session and offset != end:  # (the new session asks from its start)
                assert kept <= end
                return end, len(self.read)
            assert kept <= offset <= end
            self.held += data[end - offset :]
            if self.away is None or time.monotonic() >= self.away[0]:
                self.read += self.held  # (before the controller goes away: nobody reads)
                self.held = b""
            return offset + len(data), len(self.read)

    def ended(self) -> bool:
        return self.read.endswith(EOF_CHAR)


def test_a_pipe_is_relayed_as_it_comes_and_its_end_is_one_ctrl_d(
    pipes: tuple[int, int, int, int],
) -> None:
    stdin_r, stdin_w, _, stdout_w = pipes
    os.write(stdin_w, b"echo a\n~.\nexit 3\n")  # (no escapes without a terminal)
    os.close(stdin_w)
    task = Task()
    attach(task, stdin_r, stdout_w, lambda line: None)
    assert bytes(task.read) == b"echo a\n~.\nexit 3\n" + EOF_CHAR


def test_a_controller_that_restarts_is_waited_for_and_gets_the_keystrokes_again(
    pipes: tuple[int, int, int, int], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(pty_client, "RETRY_S", 0.05)
    stdin_r, stdin_w, _, stdout_w = pipes
    now = time.monotonic()
    task = Task(away=(now + 0.3, now + 0.8))
    os.write(stdin_w, b"ls\r")  # (held by the relay when it goes away: sent again)
    later = threading.Timer(0.5, lambda: (os.write(stdin_w, b"pwd\r"), os.close(stdin_w)))
    later.start()
    said: list[str] = []
    attach(task, stdin_r, stdout_w, said.append)
    later.join()
    assert bytes(task.read) == b"ls\rpwd\r" + EOF_CHAR
    assert len(said) == 2, said
    assert "the controller cannot be reached (cannot reach the controller" in said[0]
    assert "up to 60 s" in said[0] and "answers again" in said[1]


def test_a_controller_away_too_long_ends_the_relay_saying_why(
    pipes: tuple[int, int, int, int], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(pty_client, "RETRY_S", 0.05)
    stdin_r, _, _, stdout_w = pipes
    now = time.monotonic()
    said: list[str] = []
    relay = Relay(Task(away=(now, now + 60)), stdin_r, stdout_w, tty=False, say=said.append)
    relay.outage.limit_s = 0.3
    started = time.monotonic()
    relay.run()
    assert time.monotonic() - started < 5
    assert relay.failure == "the controller could not be reached for 0.3 s"
    assert len(said) == 1 and "up to 0.3 s" in said[0]


def test_the_jobs_end_is_waited_for_through_a_restart() -> None:
    """Once the terminal has ended, run asks for its job's end: while the controller is away
    (a restart) that is tried again, up to the limit; another refusal is not."""
    from fusesched.cli.pty_outage import through_outage

    clock = [0.0]
    answers: list[object] = [ControllerError(0, "refused"), ControllerError(503, "standby")]
    answers.append({"state": "Completed"})

    def call() -> object:
        answer = answers.pop(0)
        if isinstance(answer, Exception):
            raise answer
        return answer

    def sleep(seconds: float) -> None:
        clock[0] += seconds

    assert through_outage(call, clock=lambda: clock[0], sleep=sleep) == {"state": "Completed"}
    assert clock[0] == 1.0
    answers[:] = [ControllerError(0, "refused")] * 200
    with pytest.raises(ControllerError):
        through_outage(call, limit_s=5, clock=lambda: clock[0], sleep=sleep)
    answers[:] = [ControllerError(404, "no job")]
    with pytest.raises(ControllerError):
        through_outage(call, clock=lambda: clock[0], sleep=sleep)
