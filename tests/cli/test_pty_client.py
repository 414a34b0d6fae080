"""``fusesched run --pty``'s client pieces (cli/pty_client.py): the terminal it asks for, raw
mode undone however the relay ends, ``~.`` heard while the controller cannot be reached, and
warnings that read right in raw mode."""

from __future__ import annotations

import fcntl
import os
import struct
import termios
import threading
import time
from collections.abc import Iterator
from typing import Any

import pytest

from fusesched.cli.pty_client import PLAIN_TERM, Left, attach, raw_mode, terminal, warn_anywhere


@pytest.fixture
def tty() -> Iterator[tuple[int, int]]:
    master, slave = os.openpty()
    fcntl.ioctl(master, termios.TIOCSWINSZ, struct.pack("HHHH", 33, 101, 0, 0))
    yield master, slave
    os.close(master)
    os.close(slave)


def test_the_terminal_asked_for_is_this_ones(tty: tuple[int, int]) -> None:
    _, slave = tty
    assert terminal(slave, "xterm-256color").model_dump() == {
        "term": "xterm-256color",
        "rows": 33,
        "cols": 101,
    }
    assert terminal(slave, None).term == PLAIN_TERM
    assert terminal(slave, "bad term;rm").term == PLAIN_TERM  # (not a terminfo name)


def test_raw_mode_is_undone_when_the_relay_fails(tty: tuple[int, int]) -> None:
    _, slave = tty
    before = termios.tcgetattr(slave)
    with pytest.raises(RuntimeError), raw_mode(slave):
        assert not termios.tcgetattr(slave)[3] & termios.ICANON
        raise RuntimeError("lost")
    assert termios.tcgetattr(slave) == before


class Unreachable:
    """A terminal whose controller cannot be reached: every call fails, as with no network."""

    def __init__(self) -> None:
        self.calls = 0

    def _fail(self) -> Any:
        from fusesched.sdk import ControllerError

        self.calls += 1
        raise ControllerError(0, "connection refused")

    def output(self, offset: int, wait: float) -> tuple[bytes, int, bool]:
        return self._fail()  # type: ignore[no-any-return]

    def input(
        self, offset: int, data: bytes, size: tuple[int, int] | None, wait: float, kept: int
    ) -> tuple[int, int]:
        return self._fail()  # type: ignore[no-any-return]

    def ended(self) -> bool:
        return self._fail()  # type: ignore[no-any-return]


def test_tilde_dot_leaves_while_the_controller_cannot_be_reached(tty: tuple[int, int]) -> None:
    master, slave = tty
    before = termios.tcgetattr(slave)
    endpoint = Unreachable()
    os.write(master, b"ls\r")
    later = threading.Timer(1.0, os.write, (master, b"~."))  # (while it retries)
    later.start()
    started = time.monotonic()
    with pytest.raises(Left):
        attach(endpoint, slave, slave, lambda line: None)
    assert time.monotonic() - started < 5 and endpoint.calls > 0
    assert termios.tcgetattr(slave) == before


def test_warnings_end_their_lines_in_raw_mode(
    tty: tuple[int, int], capfd: pytest.CaptureFixture[str]
) -> None:
    _, slave = tty
    with raw_mode(slave):
        warn_anywhere("the controller cannot be reached")
    said = capfd.readouterr().err
    assert said == "\r\nwarning: the controller cannot be reached\r\n"


class Held:
    """A terminal whose output poll is still waiting when the client leaves, and answers
    (the output's end) only once ``answer`` is set."""

    def __init__(self) -> None:
        self.answer = threading.Event()

    def output(self, offset: int, wait: float) -> tuple[bytes, int, bool]:
        self.answer.wait(10)
        return b"", offset, True

    def input(
        self, offset: int, data: bytes, size: tuple[int, int] | None, wait: float, kept: int
    ) -> tuple[int, int]:
        return offset + len(data), offset + len(data)

    def ended(self) -> bool:
        return True


def test_a_poll_answered_after_leaving_writes_to_no_reused_descriptor(
    tty: tuple[int, int],
) -> None:
    master, slave = tty
    endpoint = Held()
    os.write(master, b"~.")
    before = set(threading.enumerate())
    with pytest.raises(Left):
        attach(endpoint, slave, slave, lambda line: None)
    reader, writer = os.pipe()  # (the numbers of the relay's own pipe, closed by now)
    try:
        (polling,) = [t for t in set(threading.enumerate()) - before if t.name == "pty-output"]
        endpoint.answer.set()
        polling.join(5)
        os.set_blocking(reader, False)
        with pytest.raises(BlockingIOError):  # (nothing was written to this new pipe)
            os.read(reader, 64)
    finally:
        os.close(reader)
        os.close(writer)
