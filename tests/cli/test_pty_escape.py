"""ssh's escapes as ``run --pty`` and ``srun --pty`` read them (cli/pty_escape.py): ``~.`` at
a line's start leaves, ``~~`` sends one ``~``, any other ``~`` goes as typed; the keystrokes
may come in chunks of any size."""

from __future__ import annotations

import pytest

from fusesched.cli.pty_escape import Escapes


def feed(*chunks: bytes) -> tuple[bytes, bool]:
    escapes = Escapes()
    sent = b""
    for chunk in chunks:
        out, left = escapes.feed(chunk)
        sent += out
        if left:
            return sent, True
    return sent, False


@pytest.mark.parametrize(
    ("chunks", "sent", "left"),
    [
        ((b"~.",), b"", True),  # (first thing: a line's start)
        ((b"ls\r~.rm -rf\r",), b"ls\r", True),  # (what follows it is never sent)
        ((b"ls\n~.",), b"ls\n", True),  # (a pasted newline ends a line too)
        ((b"echo a~.b\r",), b"echo a~.b\r", False),  # (not at a line's start)
        ((b"~~.\r",), b"~.\r", False),  # (~~: one ~, and the line has begun)
        ((b"\r~~~.",), b"\r~~.", False),
        ((b"~/bin/x\r",), b"~/bin/x\r", False),  # (any other byte: the ~ goes too)
        ((b"~\r~.",), b"~\r", True),  # (~ then Enter: both sent, a new line begins)
        ((b"ls\r~", b"."), b"ls\r", True),  # (a ~ at a chunk's end waits for the next)
        ((b"ls\r~", b"~", b"."), b"ls\r~.", False),
        ((b"~", b""), b"", False),  # (still waiting: nothing sent yet)
        ((b"\x03~.",), b"\x03~.", False),  # (Ctrl-C is no line's end)
    ],
)
def test_escapes(chunks: tuple[bytes, ...], sent: bytes, left: bool) -> None:
    assert feed(*chunks) == (sent, left)
