"""The escapes typed to ``fusesched run --pty`` (and ``srun --pty``), as ssh's: at the start
of a line (after Enter, or first thing), ``~.`` ends the client (the terminal restored) even
while the controller cannot be reached, and ``~~`` sends one ``~``; a ``~`` followed by any
other byte is sent as typed, with it. Pure: :class:`Escapes` reads the keystrokes as they
come, in chunks of any size (a ``~`` at a chunk's end waits for the next one)."""

from __future__ import annotations

#: The escape character, and what follows it.
TILDE = ord("~")
LEAVE = ord(".")
#: What ends a line (Enter is ``\r`` in raw mode; ``\n`` when pasted).
LINE_ENDS = frozenset(b"\r\n")


class Escapes:
    """The keystrokes' escapes: :meth:`feed` each chunk read."""

    def __init__(self) -> None:
        self.line_start = True  # the next byte is the first of a line
        self.tilde = False  # a ``~`` at a line's start was read; what follows decides

    def feed(self, data: bytes) -> tuple[bytes, bool]:
        """What of ``data`` goes to the task's terminal, and whether ``~.`` was typed (the
        bytes after it are not read: the client ends)."""
        out = bytearray()
        for byte in data:
            if self.tilde:
                self.tilde = False
                if byte == LEAVE:
                    return bytes(out), True
                if byte == TILDE:  # ``~~``: one ``~``, and the line has started
                    out.append(TILDE)
                    self.line_start = False
                    continue
                out.append(TILDE)  # not an escape: the ``~`` goes too, then this byte
            elif self.line_start and byte == TILDE:
                self.tilde = True
                continue
            out.append(byte)
            self.line_start = byte in LINE_ENDS
        return bytes(out), False
