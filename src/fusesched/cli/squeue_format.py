"""What ``fusesched jobs`` takes from ``squeue``: the output formats ``-o "%.10i %T"`` and
``-O "JobID,Name:20"`` that scripts parse, read into pieces and written as lines. The fields
are in :mod:`fusesched.cli.squeue_fields`, Slurm's state names and codes (``-t PD,R``) in
:mod:`fusesched.cli.squeue_states`; both are named here too, as before they moved.

Pure functions of the job views (``GET /v1/jobs``) and the format text; bad input raises
:class:`FormatError` (or ``ValueError`` for a state) with a message that says what is known.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Final

from fusesched.cli.squeue_fields import FIELDS, GPU, LONG_FIELDS, Field, slurm_time
from fusesched.cli.squeue_states import (
    ALL_STATES,
    NEVER_STATES,
    SLURM_STATES,
    StateMatch,
    known_states,
    matches,
    parse_states,
    slurm_state,
    state_code,
)

__all__ = [
    "ALL_STATES",
    "FIELDS",
    "GPU",
    "LONG_FIELDS",
    "NEVER_STATES",
    "SLURM_STATES",
    "Field",
    "FormatError",
    "Piece",
    "StateMatch",
    "known_states",
    "matches",
    "parse_format",
    "parse_long_format",
    "parse_states",
    "render",
    "slurm_state",
    "slurm_time",
    "state_code",
]

Job = dict[str, Any]

#: ``-O``'s width when a field names none (as squeue).
LONG_WIDTH: Final = 20
#: The widest a field may be (``%1000j``), and the most the widths of a line add up to.
MAX_WIDTH: Final = 1000
MAX_LINE: Final = 20_000


# ---------------------------------------------------------------------- formats


class FormatError(ValueError):
    """A format that cannot be used: the message says where and what is known."""


@dataclass(frozen=True)
class Piece:
    """A run of literal text (``field`` None) or one field with its width (None: as long as
    its value) and side: a value is cut to the width and padded to it, as Slurm's commands
    print a field, the last of a line too (:func:`fit`: in bytes, as theirs)."""

    text: str = ""
    field: Field | None = None
    width: int | None = None
    right: bool = False  # squeue's "%.10i": right-justified

    def render(self, value: str) -> str:
        if self.field is None:
            return self.text
        if self.width is None:
            return value
        return fit(value, self.width, self.right)


def fit(value: str, width: int, right: bool = False) -> str:
    """``value`` cut to ``width`` and padded to it with blanks (``right``: before it), the
    width counted in UTF-8 bytes as Slurm's ``printf("%-*.*s")`` counts it: ``%10j`` of
    ``héllo`` (6 bytes) is four blanks after it, and each line's columns stay where Slurm's
    are. A cut never splits a character (Slurm's would write its first bytes: text no UTF-8
    reader takes); the bytes left are blanks."""
    if value.isascii():
        cut = value[:width]
        return cut.rjust(width) if right else cut.ljust(width)
    cut, size = cut_bytes(value, width)
    blanks = " " * (width - size)
    return blanks + cut if right else cut + blanks


def cut_bytes(value: str, most: int) -> tuple[str, int]:
    """``value``'s first whole characters that take at most ``most`` UTF-8 bytes, and how
    many bytes they take."""
    size = 0
    for at, char in enumerate(value):
        step = len(char.encode("utf-8", "surrogateescape"))
        if size + step > most:
            return value[:at], size
        size += step
    return value, size


#: ``-o "%all"``: every field.
ALL: Final = "%all"
_SPEC: Final = re.compile(r"%(?P<side>[.-]?)(?P<width>[0-9]*)(?P<letter>.?)", re.DOTALL)


def parse_format(text: str, fields: Mapping[str, Field] = FIELDS) -> list[Piece]:
    """squeue's ``-o`` text: ``%[.|-][WIDTH]LETTER`` fields (``.``: right-justified; a width
    pads the value and cuts a longer one), ``%%`` a percent sign, ``%all`` every field, each
    followed by ``|`` (as Slurm's), anything else as written. ``fields``: the letters known
    (sinfo's are its own: :mod:`fusesched.cli.sinfo_format`)."""
    pieces: list[Piece] = []
    at = 0
    while (found := text.find("%", at)) >= 0:
        if found > at:
            pieces.append(Piece(text=text[at:found]))
        if text.startswith(ALL, found):
            for field in fields.values():
                pieces.extend((Piece(field=field), Piece(text="|")))
            at = found + len(ALL)
            continue
        spec = _SPEC.match(text, found)
        assert spec is not None  # (every part of it may be empty)
        letter = spec["letter"]
        if letter == "%" and not spec["side"] and not spec["width"]:
            pieces.append(Piece(text="%"))
        elif not letter:
            raise FormatError(f"format {text!r} ends inside a field: give a letter after '%'")
        elif letter not in fields:
            raise FormatError(
                f"unknown format field %{letter} in {text!r}; known: "
                + " ".join(f"%{k}" for k in fields)
                + " (and %% for a percent sign)"
            )
        else:
            width = _width(spec["width"], f"%{letter}") or None  # (%0i: as %i, as squeue)
            pieces.append(Piece(field=fields[letter], width=width, right=spec["side"] == "."))
        at = spec.end()
    if at < len(text):
        pieces.append(Piece(text=text[at:]))
    return _bounded(pieces, text)


#: ``-O``'s ``NAME:[.][WIDTH][SUFFIX]`` after the colon (a width of ``-3`` is 3, left-justified:
#: Slurm's reads it with strtol and prints it with printf's ``%-*s``).
_LONG_SIZE: Final = re.compile(
    r"(?P<right>\.?)(?P<minus>-?)(?P<digits>[0-9]*)(?P<suffix>.*)", re.DOTALL
)


def parse_long_format(
    text: str,
    long_fields: Mapping[str, str] = LONG_FIELDS,
    fields: Mapping[str, Field] = FIELDS,
    example: str = "JobID,Name",
) -> list[Piece]:
    """squeue's ``-O``, as Slurm 22.05's reads it: comma-separated long names (blank items
    skipped), each ``NAME`` (20 wide) or ``NAME:[.][WIDTH][SUFFIX]`` (``.``: right-justified;
    no width, or 0: as long as the value; ``SUFFIX``: text written after the field, such as
    ``|``). A value is cut to its width and padded to it, with nothing between the columns
    but the suffixes: ``JobID:5,Name:.8`` writes ``27      abc``. ``long_fields``: the names
    known (lower case), as letters of ``fields`` (sinfo's are its own:
    :mod:`fusesched.cli.sinfo_long`)."""
    pieces: list[Piece] = []
    if not text.strip(", "):
        raise FormatError(f"an empty --Format shows nothing: name fields, such as {example}")
    for raw in text.split(","):
        name, colon, size = raw.partition(":")  # (the suffix as written: "\x1f" is one)
        name = name.strip(" ")
        if not name and not colon:  # (``JobID,,Name``: as Slurm's)
            continue
        letter = long_fields.get(name.lower())
        if letter is None:
            raise FormatError(
                f"unknown field {name!r} in {text!r}; known: " + ",".join(sorted(long_fields))
            )
        spec = _LONG_SIZE.fullmatch(size)
        assert spec is not None  # (every part of it may be empty)
        width = _width(spec["digits"], name) if colon else LONG_WIDTH
        right = bool(spec["right"]) and not spec["minus"]
        pieces.append(Piece(field=fields[letter], width=width or None, right=right))
        if spec["suffix"]:
            pieces.append(Piece(text=spec["suffix"]))
    return _bounded(pieces, text)


def _width(digits: str, what: str) -> int:
    """A field's width as written (ASCII digits; ``""``: 0), at most :data:`MAX_WIDTH`."""
    value = digits.lstrip("0")  # (no int() of a 5000-digit string)
    if len(value) > len(str(MAX_WIDTH)) or (value and int(value) > MAX_WIDTH):
        shown = value if len(value) <= 20 else f"{value[:20]}… ({len(value)} digits)"
        raise FormatError(f"width {shown} of {what} is too wide (at most {MAX_WIDTH})")
    return int(value) if value else 0


def _bounded(pieces: list[Piece], text: str) -> list[Piece]:
    """``pieces`` when they print something and their widths add up to at most
    :data:`MAX_LINE` (each line is built in memory, a thousand of them at once)."""
    if not pieces:
        raise FormatError("an empty --format shows nothing: give fields, such as '%i %j'")
    wide = sum(p.width or 0 for p in pieces)
    if wide > MAX_LINE:
        raise FormatError(
            f"the fields of {text[:60]!r}{'…' if len(text) > 60 else ''} are {wide} characters "
            f"wide in all; at most {MAX_LINE}"
        )
    return pieces


def render(pieces: Sequence[Piece], jobs: Iterable[Job], header: bool = True) -> list[str]:
    """The lines squeue would print: the header (unless ``header`` is off), then a line a
    job. Each field is as wide as its width, the last of a line too, and the format's own
    text stays as written, trailing blanks included: ``-o '%10j'`` writes ``abc`` and seven
    blanks, as Slurm's squeue and sinfo do (their default formats end with a field of no
    width: ``%R``, ``%N``). A control character in a value (a job name's newline or terminal
    escape) is written ``?``: one line a job, and nothing another user named reaches the
    terminal as a command."""
    lines = []
    if header:
        lines.append("".join(p.render(p.field.header if p.field else "") for p in pieces))
    for job in jobs:
        lines.append(
            "".join(
                p.render(p.field.value(job).translate(_CONTROLS) if p.field else "") for p in pieces
            )
        )
    return lines


#: C0 and C1 control characters and DEL, each as ``?``.
_CONTROLS: Final = {c: "?" for c in (*range(0x20), *range(0x7F, 0xA0))}
