"""``fusesched run --pty``'s client pieces (cli/pty_client.py): the terminal it asks for, and
raw mode undone however the relay ends."""

from __future__ import annotations

import fcntl
import os
import struct
import termios
from collections.abc import Iterator

import pytest

from fusesched.cli.pty_client import PLAIN_TERM, raw_mode, terminal


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
