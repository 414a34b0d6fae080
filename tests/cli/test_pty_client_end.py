"""``fusesched run --pty``'s client (cli/pty_client.py) at its job's end: the output is read
to its end, which the agent posts maybe after the job has ended (a command that ends at
once), not given up at the first empty poll after that end; waited for a bounded time."""

from __future__ import annotations

import os
import time

import pytest
from tests.cli.test_pty_client import Held
from tests.cli.test_pty_client_away import pipes  # noqa: F401 (a fixture)

from fusesched.cli import pty_client
from fusesched.cli.pty_client import Relay


class Ended(Held):
    """A terminal whose job has ended; its output polls answer ``pages`` in turn (bytes,
    closed), each ``pause`` seconds after it was asked, then nothing. ``waits``: the waits
    asked for."""

    def __init__(self, *pages: tuple[bytes, bool], pause: float = 0.0) -> None:
        super().__init__()
        self.pages = list(pages)
        self.pause = pause
        self.waits: list[float] = []

    def output(self, offset: int, wait: float) -> tuple[bytes, int, bool]:
        self.waits.append(wait)
        time.sleep(self.pause)
        if not self.pages:
            time.sleep(min(wait, 0.05))
            return b"", offset, False
        data, closed = self.pages.pop(0)
        return data, offset + len(data), closed


def relayed(endpoint: Ended, fds: tuple[int, int, int, int]) -> bytes:
    stdin_r, stdin_w, stdout_r, stdout_w = fds
    os.close(stdin_w)
    relay = Relay(endpoint, stdin_r, stdout_w, tty=False)
    relay.run()
    assert relay.failure is None
    os.close(stdout_w)
    return os.read(stdout_r, 4096)


def test_an_empty_poll_after_the_end_does_not_lose_the_last_output(
    pipes: tuple[int, int, int, int],  # noqa: F811 (the fixture)
) -> None:
    """The poll timed out as the job ended; the agent's post of what the task wrote last
    came just after: the next poll has it, and the output's end."""
    endpoint = Ended((b"", False), (b"/dev/pts/3\r\n", False), (b"", True))
    assert relayed(endpoint, pipes) == b"/dev/pts/3\r\n"
    assert endpoint.waits[0] == pty_client.OUTPUT_WAIT_S
    assert all(0 < wait <= pty_client.LAST_OUTPUT_S for wait in endpoint.waits[1:])


def test_an_end_that_never_comes_is_waited_for_a_bounded_time(
    pipes: tuple[int, int, int, int],  # noqa: F811 (the fixture)
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Its agent died with the task: run leaves :data:`LAST_OUTPUT_S` after it saw the end."""
    monkeypatch.setattr(pty_client, "LAST_OUTPUT_S", 0.3)
    began = time.monotonic()
    assert relayed(Ended(), pipes) == b""
    assert 0.3 <= time.monotonic() - began < 5


def test_output_still_coming_after_the_end_is_waited_for_as_it_comes(
    pipes: tuple[int, int, int, int],  # noqa: F811 (the fixture)
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Much written just before the exit: its agent posts the rest after the end, past
    :data:`LAST_OUTPUT_S` since run saw it; each post is waited for as long again."""
    monkeypatch.setattr(pty_client, "LAST_OUTPUT_S", 0.5)
    pages = [(b"", False), (b"a", False), (b"", False), (b"b", False), (b"", False)]
    endpoint = Ended(*pages, (b"c", True), pause=0.3)
    assert relayed(endpoint, pipes) == b"abc"
