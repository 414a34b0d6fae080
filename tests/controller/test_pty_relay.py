"""The relay of ``fusesched run --pty`` (controller/pty_relay.py): bounded byte streams with
offsets (a chunk sent again is taken once, an answer lost is read again), long polls that
wait on the session's changes, and the sessions' lifetime."""

from __future__ import annotations

import asyncio
import time

import pytest

from fusesched.controller.pty_relay import (
    DONE_KEEP_S,
    MAX_OUTPUT_BUFFER,
    STALE_S,
    Gap,
    Pipe,
    PtyRelay,
    PtySession,
    TaskRef,
)


def test_a_pipe_takes_a_chunk_sent_again_once_and_only_what_fits() -> None:
    pipe = Pipe(limit=8)
    assert pipe.write(0, b"abcd") == 4
    assert pipe.write(0, b"abcdef") == 6  # (sent again with more: the new part is taken)
    assert pipe.write(6, b"ghijkl") == 8  # full: two of six
    assert bytes(pipe.data) == b"abcdefgh"
    with pytest.raises(Gap):
        pipe.write(9, b"x")  # past the end


def test_reading_from_an_offset_acknowledges_what_is_before_it() -> None:
    pipe = Pipe(limit=8)
    pipe.write(0, b"abcdefgh")
    assert pipe.read(0) == b"abcdefgh"
    assert pipe.read(0) == b"abcdefgh"  # (the answer was lost: read again)
    assert pipe.read(5, most=2) == b"fg"
    assert pipe.base == 5 and pipe.room() == 5
    with pytest.raises(Gap):
        pipe.read(4)  # acknowledged: gone
    with pytest.raises(Gap):
        pipe.read(9)
    pipe.closed = True
    assert not pipe.drained() and pipe.read(8) == b"" and pipe.drained()


def run(coroutine):  # type: ignore[no-untyped-def]
    return asyncio.run(coroutine)


def test_a_read_of_the_output_waits_for_it_and_a_write_wakes_it() -> None:
    async def scenario() -> tuple[float, object]:
        session = PtySession("1", "1.main.0", "n0", 0.0)
        reader = asyncio.create_task(session.read_output(0, 5.0, 0.0))
        await asyncio.sleep(0.05)
        assert not reader.done()  # (waiting, not spinning)
        started = time.monotonic()
        assert (await session.put_output(0, b"hello", False, 1.0, 0.0)).offset == 5
        page = await reader
        return time.monotonic() - started, page

    took, page = run(scenario())
    assert took < 0.5
    assert (page.data, page.next_offset, page.closed) == (b"hello", 5, False)  # type: ignore[attr-defined]


def test_a_long_poll_with_nothing_to_give_answers_empty_at_its_wait() -> None:
    session = PtySession("1", "1.main.0", "n0", 0.0)
    started = time.monotonic()
    page = run(session.read_output(0, 0.2, 0.0))
    assert page.data == b"" and not page.closed
    assert 0.15 < time.monotonic() - started < 2


def test_keystrokes_and_the_window_size_reach_the_agent_the_size_once() -> None:
    async def scenario() -> list[object]:
        session = PtySession("1", "1.main.0", "n0", 0.0)
        assert (await session.type_in(0, b"ls\r", (40, 120), 1.0, 0.0)).offset == 3
        again = await session.type_in(0, b"ls\r", None, 1.0, 0.0)  # (sent again: once)
        assert again.offset == 3
        first = await session.read_input(0, 0, 1.0, 0.0)
        again = await session.read_input(3, first.size_seq, 0.05, 0.0)
        return [first, again]

    first, again = run(scenario())
    assert (first.data, first.next_offset, first.size) == (b"ls\r", 3, (40, 120))  # type: ignore[attr-defined]
    assert (again.data, again.size, again.ended) == (b"", None, False)  # type: ignore[attr-defined]


def test_the_end_of_the_output_ends_the_agents_poll_and_reaches_the_client() -> None:
    async def scenario() -> list[object]:
        session = PtySession("1", "1.main.0", "n0", 0.0)
        polling = asyncio.create_task(session.read_input(0, 0, 5.0, 0.0))
        await asyncio.sleep(0.01)
        await session.put_output(0, b"bye\r\n", True, 1.0, 0.0)
        ended = await polling
        page = await session.read_output(0, 1.0, 0.0)
        late = (await session.type_in(0, b"x", None, 1.0, 0.0)).offset  # (nobody reads it)
        return [ended, page, late, session.done_at]

    ended, page, late, done_at = run(scenario())
    assert ended.ended  # type: ignore[attr-defined]
    assert (page.data, page.closed) == (b"bye\r\n", True)  # type: ignore[attr-defined]
    assert late == 1 and done_at == 0.0


def test_a_full_output_holds_the_agent_until_the_client_reads() -> None:
    async def scenario() -> tuple[int, int]:
        session = PtySession("1", "1.main.0", "n0", 0.0)
        big = b"x" * MAX_OUTPUT_BUFFER
        assert (await session.put_output(0, big, False, 0.0, 0.0)).offset == MAX_OUTPUT_BUFFER
        full = (await session.put_output(MAX_OUTPUT_BUFFER, b"y", False, 0.05, 0.0)).offset
        writer = asyncio.create_task(session.put_output(MAX_OUTPUT_BUFFER, b"y", False, 5.0, 0.0))
        await asyncio.sleep(0.01)
        await session.read_output(0, 0.0, 0.0)
        await session.read_output(1024, 0.0, 0.0)  # (what was read: room again)
        return full, (await writer).offset

    full, taken = run(scenario())
    assert full == MAX_OUTPUT_BUFFER  # nothing taken within its wait
    assert taken == MAX_OUTPUT_BUFFER + 1


def test_offsets_outside_the_stream_are_refused() -> None:
    session = PtySession("1", "1.main.0", "n0", 0.0)
    with pytest.raises(Gap):  # (a writer that keeps nothing cannot send again)
        run(session.type_in(5, b"x", None, 0.0, 0.0))
    run(session.put_output(0, b"ab", False, 0.0, 0.0))
    with pytest.raises(Gap):
        run(session.read_output(3, 0.0, 0.0))
    with pytest.raises(Gap):  # (kept after the chunk's own offset: nonsense)
        run(session.put_output(2, b"c", False, 0.0, 0.0, kept=3))


def test_sessions_are_dropped_once_read_to_their_end_or_stale() -> None:
    relay = PtyRelay()
    done = relay.open(TaskRef("1", "1.main.0", "n0"), 0.0)
    done.done_at = 10.0
    relay.open(TaskRef("2", "2.main.0", "n0"), 0.0)
    assert relay.of_job("2") is relay.get("2.main.0")
    relay.prune(10.0 + DONE_KEEP_S + 1)
    assert relay.get("1.main.0") is None and relay.get("2.main.0") is not None
    relay.prune(STALE_S + 1)
    assert relay.sessions == {}
    first = relay.open(TaskRef("3", "3.main.0", "n0"), 0.0)
    assert relay.open(TaskRef("3", "3.main.0", "n0"), 1.0) is first
    assert relay.open(TaskRef("3", "3-r1.main.0", "n1"), 2.0) is not first  # (a run of it again)


def test_a_jobs_steps_have_sessions_of_their_own() -> None:
    """A ``run --pty`` job's own terminal and its steps' (``srun --pty`` in it) are kept
    apart: the job's route finds the job's own, never a step's."""
    relay = PtyRelay()
    step = relay.open(TaskRef("4", "4.remote.1", "n1", step=True), 0.0)
    assert relay.of_job("4") is None
    own = relay.open(TaskRef("4", "4.main.0", "n0"), 0.0)
    second = relay.open(TaskRef("4", "4.remote.2", "n0", step=True), 0.0)
    assert relay.of_job("4") is own and relay.get("4.remote.1") is step
    assert len({id(own), id(step), id(second)}) == 3
