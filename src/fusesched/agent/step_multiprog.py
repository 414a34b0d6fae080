"""``srun --multi-prog CONFIG`` inside a job: each task runs the program its line of the
configuration file names (Slurm's MPMD form), with no I/O but :func:`read_config`.

A line is ``RANKS PROGRAM [ARGS...]``: ``RANKS`` is ranks and ranges joined by commas
(``0``, ``1-3,7``) or ``*`` for every task no other line names (``*`` last); words are split
on blanks, and single quotes keep a word whole (blanks and all). ``%t`` in an argument is
the task's rank, ``%o`` its offset among the ranks its line names (``0,2-3``: 0, 1, 2). Lines
with ``#`` first are comments. Arguments given after the file on srun's command line follow
each task's own. As Slurm's srun, the file is read where srun runs, before the step starts.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from fusesched.agent.step_plan import StepError

#: The largest file, and the highest rank, a configuration may have.
MAX_CONFIG_BYTES = 1 << 20
MAX_RANK = 1 << 20


@dataclass(frozen=True, slots=True)
class ProgramLine:
    """One line: the ranks it names (None: ``*``), its program and arguments."""

    ranks: tuple[int, ...] | None
    argv: tuple[str, ...]


@dataclass(frozen=True, slots=True)
class MultiProg:
    """A configuration file's lines, in order, and its name (for messages)."""

    path: str
    lines: tuple[ProgramLine, ...]

    def argv(self, rank: int, extra: Sequence[str] = ()) -> tuple[str, ...] | None:
        """What task ``rank`` runs, ``%t``/``%o`` replaced and ``extra`` (srun's own
        arguments after the file) added; None when no line names it."""
        for line in self.lines:
            if line.ranks is None:
                offset = rank  # (``*``: offset within all the tasks)
            elif rank in line.ranks:
                offset = line.ranks.index(rank)
            else:
                continue
            head, *args = line.argv
            return (head, *(_substitute(a, rank, offset) for a in args), *extra)
        return None


def _substitute(arg: str, rank: int, offset: int) -> str:
    out: list[str] = []
    k = 0
    while k < len(arg):
        pair = arg[k : k + 2]
        if pair in ("%t", "%o"):
            out.append(str(rank if pair == "%t" else offset))
            k += 2
        else:
            out.append(arg[k])
            k += 1
    return "".join(out)


def read_config(path: str) -> MultiProg:
    """The configuration at ``path`` (relative: to srun's folder); :class:`StepError` for
    one that cannot be read or is not a configuration."""
    try:
        with open(path, "rb") as file:
            data = file.read(MAX_CONFIG_BYTES + 1)
    except OSError as exc:
        raise StepError(f"--multi-prog: cannot read {path}: {exc.strerror}") from None
    if len(data) > MAX_CONFIG_BYTES:
        raise StepError(f"--multi-prog: {path} is larger than {MAX_CONFIG_BYTES} bytes")
    return parse_config(path, data.decode("utf-8", errors="replace"))


def parse_config(path: str, text: str) -> MultiProg:
    """The lines of configuration ``text`` (from file ``path``); :class:`StepError` naming
    the line for a bad one."""
    lines: list[ProgramLine] = []
    seen: set[int] = set()
    for number, raw in enumerate(text.splitlines(), start=1):
        if raw.startswith("#") or not raw.strip():
            continue
        words = _words(raw, path, number)
        if len(words) < 2:
            raise StepError(f"--multi-prog: {path} line {number}: no program after its ranks")
        if lines and lines[-1].ranks is None:
            raise StepError(f"--multi-prog: {path} line {number}: '*' must be the last line")
        ranks = None if words[0] == "*" else _ranks(words[0], path, number)
        if ranks is not None:
            again = seen.intersection(ranks)
            if again:
                raise StepError(
                    f"--multi-prog: {path} line {number}: task {min(again)} is named twice"
                )
            seen.update(ranks)
        lines.append(ProgramLine(ranks, tuple(words[1:])))
    if not lines:
        raise StepError(f"--multi-prog: {path} names no program")
    return MultiProg(path, tuple(lines))


def _ranks(text: str, path: str, number: int) -> tuple[int, ...]:
    out: list[int] = []
    for item in text.split(","):
        low, dash, high = item.partition("-")
        if not _whole(low) or (dash and not _whole(high)):
            raise StepError(
                f"--multi-prog: {path} line {number}: {text!r} is not ranks such as 0, 1-3,7 or *"
            )
        first, last = int(low), int(high) if dash else int(low)
        if last < first or last > MAX_RANK:
            raise StepError(f"--multi-prog: {path} line {number}: {item!r} is not a range")
        out.extend(r for r in range(first, last + 1) if r not in out)
    return tuple(out)


def _whole(text: str) -> bool:
    return text.isascii() and text.isdigit() and len(text) <= 7


def _words(line: str, path: str, number: int) -> list[str]:
    """``line`` split on blanks, single quotes keeping what they hold as it is."""
    words: list[str] = []
    word: list[str] | None = None
    quoted = False
    for char in line:
        if quoted:
            if char == "'":
                quoted = False
            else:
                word.append(char)  # type: ignore[union-attr]
        elif char == "'":
            quoted = True
            word = word if word is not None else []
        elif char in " \t\r":
            if word is not None:
                words.append("".join(word))
                word = None
        else:
            word = word if word is not None else []
            word.append(char)
    if quoted:
        raise StepError(f"--multi-prog: {path} line {number}: a quote is not closed")
    if word is not None:
        words.append("".join(word))
    return words
