"""A relay session opened anew by a controller that restarted (controller/pty_relay.py): its
two ends had come to offsets of their own under the old one; each stream starts where its
first caller says, the writer sends again what the old session held (it keeps what its reader
has not acknowledged, and says so: ``kept``), the reader skips what it had read, and the
window's size reaches the agent though the new session numbers sizes from 1 again."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable
from typing import TypeVar

from fusesched.controller.pty_relay import Pipe, PtySession, Taken

T = TypeVar("T")


def run(coroutine: Awaitable[T]) -> T:
    async def wrapped() -> T:
        return await coroutine

    return asyncio.run(wrapped())


def fresh() -> PtySession:
    return PtySession("1", "1.main.0", "n0", 0.0)


def test_the_agent_first_is_asked_for_what_it_kept_and_the_client_reads_on() -> None:
    session = fresh()
    # the old session had taken the output up to 100; the client had read 90 when last said
    assert run(session.put_output(100, b"xyz", False, 0.0, 0.0, kept=90)) == Taken(90, 90)
    again = run(session.put_output(90, b"0123456789xyz", False, 0.0, 0.0, kept=90))
    assert again == Taken(103, 90)
    page = run(session.read_output(97, 0.0, 0.0))  # (the client had read up to 97)
    assert (page.data, page.next_offset) == (b"789xyz", 103)
    taken = run(session.put_output(103, b"!", False, 0.0, 0.0, kept=90))
    assert taken == Taken(104, 97)  # (the agent may forget what was read)


def test_the_client_first_sets_where_the_agent_sends_again_from() -> None:
    session = fresh()
    page = run(session.read_output(97, 0.0, 0.0))
    assert (page.data, page.next_offset, page.closed) == (b"", 97, False)
    assert run(session.put_output(100, b"xyz", True, 0.0, 0.0, kept=90)) == Taken(97, 97)
    assert run(session.put_output(97, b"789xyz", True, 0.0, 0.0, kept=90)) == Taken(103, 97)
    page = run(session.read_output(97, 0.0, 0.0))
    assert (page.data, page.closed) == (b"789xyz", True)


def test_a_reader_ahead_of_what_was_sent_again_skips_to_its_offset() -> None:
    pipe = Pipe(limit=8)
    assert pipe.place(92, kept=90) == 90  # (a new stream: from what the writer kept)
    assert pipe.write(90, b"01") == 92
    assert pipe.read(97) == b""  # the reader had read up to 97 under the old session
    assert pipe.place(92, kept=90) == 92 and pipe.write(92, b"23456789") == 100
    assert bytes(pipe.data) == b"789" and pipe.base == 97


def test_keystrokes_taken_by_the_old_session_reach_the_agent_again() -> None:
    session = fresh()
    got = run(session.read_input(40, 0, 0.0, 0.0))  # the agent had read up to 40
    assert (got.data, got.next_offset) == (b"", 40)
    assert run(session.type_in(44, b"ls\r", None, 0.0, 0.0, kept=38)) == Taken(40, 40)
    assert run(session.type_in(40, b"pwd\rls\r", None, 0.0, 0.0, kept=38)) == Taken(47, 40)
    got = run(session.read_input(40, 0, 0.0, 0.0))
    assert got.data == b"pwd\rls\r"


def test_the_window_size_reaches_an_agent_that_counted_further_before() -> None:
    session = fresh()
    run(session.type_in(0, b"", (50, 160), 0.0, 0.0, kept=0))  # (the new session's size 1)
    got = run(session.read_input(0, 7, 0.0, 0.0))  # the agent had had size 7 of the old one
    assert (got.size, got.size_seq) == ((50, 160), 1)
    again = run(session.read_input(0, got.size_seq, 0.0, 0.0))
    assert again.size is None
