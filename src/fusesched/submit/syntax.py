"""Small value syntaxes shared by the submission formats: durations, Slurm times, memory sizes,
job arrays and dependencies. Each parser raises ``ValueError`` with a message meant for people;
the format modules add the file and line."""

from __future__ import annotations

import itertools
import re
from typing import TYPE_CHECKING, Final

from fusesched.model.job import DependencyKind

if TYPE_CHECKING:  # (imported where used: the request models load NumPy, and the time and
    # duration parsers serve commands, squeue's, that need none of them)
    from fusesched.submit.request import ArrayRequest, DependencyRequest

_SLURM_TIME_RE: Final = re.compile(
    r"^(?:(?P<days>\d+)-)?(?P<a>\d+)(?::(?P<b>\d+))?(?::(?P<c>\d+))?$"
)
_UNIT_RE: Final = re.compile(r"(\d+(?:\.\d+)?)\s*(d|h|m|s)", re.ASCII)
_UNIT_SECONDS: Final = {"d": 86400, "h": 3600, "m": 60, "s": 1}
_UNLIMITED: Final = frozenset({"unlimited", "infinite", "-1"})
_MEMORY_RE: Final = re.compile(r"^(\d+)(?:([KMGT])B?)?$", re.IGNORECASE | re.ASCII)
_ARRAY_RANGE_RE: Final = re.compile(r"^(\d+)(?:-(\d+)(?::(\d+))?)?$", re.ASCII)
_MEMBER_RANGE_RE: Final = re.compile(r"^(\d+)(?:-(\d+))?$", re.ASCII)
_OUTSIDE_BRACKETS_COMMA: Final = re.compile(r",(?![^\[]*\])")
#: The most dependencies one ``-d`` names once its member ranges are read, each a request of
#: its own (a million cost the parser seconds and ~600 MiB): more members are a whole array's.
MAX_DEPENDENCIES: Final = 10_000


def parse_slurm_time(text: str) -> float | None:
    """Seconds from a Slurm time limit; None for no limit (``0``, ``UNLIMITED``, ``INFINITE``).

    Formats: ``MM``, ``MM:SS``, ``HH:MM:SS``, ``D-HH``, ``D-HH:MM``, ``D-HH:MM:SS``.
    """
    value = text.strip()
    if value.lower() in _UNLIMITED:
        return None
    match = _SLURM_TIME_RE.fullmatch(value)
    if match is None:
        raise ValueError(
            f"cannot read time {text!r} (formats: MM, MM:SS, HH:MM:SS, D-HH, D-HH:MM, D-HH:MM:SS)"
        )
    a, b, c = (int(match[g]) if match[g] is not None else None for g in ("a", "b", "c"))
    assert a is not None  # the regex requires it
    if match["days"] is not None:
        seconds = int(match["days"]) * 86400 + a * 3600 + (b or 0) * 60 + (c or 0)
    elif b is None:
        seconds = a * 60
    elif c is None:
        seconds = a * 60 + b
    else:
        seconds = a * 3600 + b * 60 + c
    return float(seconds) if seconds > 0 else None


def parse_duration(text: str) -> float | None:
    """Seconds from ``90s``, ``15m``, ``2h``, ``1h30m``, ``1.5d`` or a clock form with ``:`` or
    ``-`` (``01:30:00``, ``2-00:00:00``, as Slurm); None for ``unlimited``.

    A bare number is refused: it is unclear whether it means seconds or (as in Slurm) minutes.
    """
    value = text.strip().lower()
    if value in _UNLIMITED:
        return None
    if ":" in value or "-" in value:
        seconds = parse_slurm_time(value)
        if seconds is None:
            raise ValueError(f"duration {text!r} must be positive (or 'unlimited')")
        return seconds
    if re.fullmatch(r"\d+(\.\d+)?", value):
        raise ValueError(
            f"duration {text!r} has no unit: write e.g. '{value}s', '{value}m' or '{value}h'"
        )
    compact = value.replace(" ", "")
    parts = _UNIT_RE.findall(compact)
    if not parts or "".join(n + u for n, u in parts) != compact:
        raise ValueError(
            f"cannot read duration {text!r} (examples: 90s, 15m, 2h, 1h30m, 1d, 01:30:00)"
        )
    seconds = sum(float(n) * _UNIT_SECONDS[u] for n, u in parts)
    if seconds <= 0:
        raise ValueError(f"duration {text!r} must be positive (or 'unlimited')")
    return seconds


def parse_slurm_memory(text: str) -> int:
    """Bytes from a Slurm memory size: a whole number with K, M (the default), G or T, all
    powers of 1024, the unit optionally followed by B (``1GB``, ``512mb``: Slurm reads them,
    and tools such as submitit write them)."""
    match = _MEMORY_RE.match(text.strip())
    if match is None:
        raise ValueError(f"cannot read memory size {text!r} (examples: 4000, 500M, 64G, 1T)")
    power = "KMGT".index(match[2].upper()) + 1 if match[2] else 2
    return int(match[1]) << (10 * power)


def parse_array(text: str) -> ArrayRequest:
    """A job array from Slurm syntax: ``1-10``, ``1-10:2``, ``7``, ``1,3,5``, each with an
    optional ``%N`` limit on tasks running at once.

    Index lists must be evenly spaced (``1,3,5`` is ``1-5:2``); others are refused, since a
    job array here is a range.
    """
    from fusesched.submit.request import MAX_ARRAY_INDICES, ArrayRequest

    body, _, limit = text.strip().partition("%")
    max_parallel = None
    if limit:
        if not (limit.isascii() and limit.isdigit()) or int(limit) < 1:
            raise ValueError(f"array {text!r}: the %N limit must be a positive whole number")
        max_parallel = int(limit)
    pieces = [p.strip() for p in body.split(",")]
    ranges: list[tuple[int, int, int]] = []
    for piece in pieces:
        match = _ARRAY_RANGE_RE.fullmatch(piece)
        if match is None:
            raise ValueError(
                f"array {text!r}: cannot read {piece!r} (examples: 0-9, 1-10:2, 1,3,5)"
            )
        start = int(match[1])
        stop = int(match[2]) if match[2] is not None else start
        step = int(match[3]) if match[3] is not None else 1
        if stop < start:
            raise ValueError(f"array {text!r}: {piece!r} ends before it starts")
        if step < 1:
            raise ValueError(f"array {text!r}: the step in {piece!r} must be at least 1")
        ranges.append((start, stop, step))
    if sum((stop - start) // step + 1 for start, stop, step in ranges) > MAX_ARRAY_INDICES:
        raise ValueError(f"array {text!r} has more than {MAX_ARRAY_INDICES} indices")
    if len(ranges) == 1:
        start, stop, step = ranges[0]
        stop = start + (stop - start) // step * step
        return ArrayRequest(start=start, stop=stop, step=step, max_parallel=max_parallel)
    indices = sorted({i for start, stop, step in ranges for i in range(start, stop + 1, step)})
    steps = {b - a for a, b in itertools.pairwise(indices)}
    if len(steps) > 1:
        raise ValueError(
            f"array {text!r}: indices must be evenly spaced (like 1,3,5 or 0-20:5); "
            "submit the other indices as a second array"
        )
    step = steps.pop() if steps else 1
    return ArrayRequest(start=indices[0], stop=indices[-1], step=step, max_parallel=max_parallel)


#: The kinds ``-d`` takes with job ids, in the order the refusal of another kind lists them.
_KINDS_WITH_IDS: Final = (
    DependencyKind.AFTER,
    DependencyKind.AFTER_OK,
    DependencyKind.AFTER_NOT_OK,
    DependencyKind.AFTER_ANY,
    DependencyKind.AFTER_CORR,
)


def parse_dependencies(text: str) -> list[DependencyRequest]:
    """Slurm dependencies: ``after:ID[:ID…]`` (started), ``afterok``, ``afternotok`` and
    ``afterany`` (ended: successfully, in failure, however), ``aftercorr`` (an array's
    members, each after the other array's member of its index completed) and
    ``singleton`` (no ids), several joined by ``,`` (all must hold). An ID may be a job, an
    array member (``12_3``), some members (``12_[1-3]``, ``12_[1,5-7]``: each of them, as
    Slurm reads them) or a whole array (``12``, or Slurm's ``12_*``). ``?`` (any may hold),
    ``+time`` delays and other kinds are refused."""
    from fusesched.submit.request import DependencyRequest

    value = text.strip()
    if not value:
        raise ValueError("no dependency given (as in afterok:123, or singleton)")
    if "?" in value:
        raise ValueError(f"dependency {text!r}: '?' (any of) is not supported; use ',' (all of)")
    out: list[DependencyRequest] = []
    for raw in _OUTSIDE_BRACKETS_COMMA.split(value):
        part = raw.strip()
        if not part:
            raise ValueError(
                f"dependency {text!r}: an empty item (two ',' in a row, or one at an end)"
            )
        kind, colon, ids = part.partition(":")
        if kind == DependencyKind.SINGLETON:
            if colon:
                raise ValueError(
                    f"dependency {part!r}: singleton takes no job ids (it waits for the "
                    "earlier jobs of the same name and user)"
                )
            out.append(DependencyRequest(kind=DependencyKind.SINGLETON))
            continue
        if kind not in _KINDS_WITH_IDS:
            supported = ", ".join(f"{k}:ID" for k in _KINDS_WITH_IDS)
            raise ValueError(
                f"dependency {part!r} is not supported (use {supported} or "
                f"{DependencyKind.SINGLETON})"
            )
        job_ids = [i.strip() for i in ids.split(":")] if ids else []
        if not job_ids or not all(job_ids):
            raise ValueError(f"dependency {part!r}: give job ids, as in {kind}:123:124")
        for job_id in job_ids:
            if "+" in job_id:
                raise ValueError(f"dependency {part!r}: '+time' delays are not supported")
            whole = job_id.removesuffix("_*")  # (Slurm's name of a whole array)
            members = array_members(part, whole, len(out))
            if not whole or any(c in m for m in members for c in "*[]"):
                raise ValueError(
                    f"dependency {part!r}: cannot read job id {job_id!r} (as in 12, 12_3, "
                    "12_[1-3] or 12_*)"
                )
            out.extend(DependencyRequest(kind=DependencyKind(kind), job_id=m) for m in members)
    return out


def array_members(part: str, job_id: str, taken: int = 0) -> list[str]:
    """The ids ``job_id`` names in dependency ``part``: Slurm's ``12_[1-3,7]`` names array
    12's members 12_1, 12_2, 12_3 and 12_7 (each one; indices in brackets, single or
    ``N-M`` ranges, joined by ``,``); another id names itself. ``taken``: the dependencies
    already read, counted against the same limit."""
    array_id, bracket, body = job_id.partition("_[")
    if not bracket:
        return [job_id]
    if not array_id or not body.endswith("]"):
        raise ValueError(
            f"dependency {part!r}: cannot read {job_id!r} (array members go in brackets, "
            "as in 12_[1-3] or 12_[1,5-7])"
        )
    indices: dict[int, None] = {}
    for piece in body.removesuffix("]").split(","):
        match = _MEMBER_RANGE_RE.fullmatch(piece.strip())
        if match is None:
            raise ValueError(
                f"dependency {part!r}: cannot read index {piece!r} of {job_id!r} "
                "(as in 12_[1-3] or 12_[1,5-7])"
            )
        start = int(match[1])
        stop = int(match[2]) if match[2] is not None else start
        if stop < start:
            raise ValueError(f"dependency {part!r}: {piece!r} ends before it starts")
        if taken + len(indices) + stop - start + 1 > MAX_DEPENDENCIES:
            raise ValueError(
                f"dependency {part!r}: more than {MAX_DEPENDENCIES} dependencies in all; "
                f"for all of an array's members name the array ({array_id})"
            )
        indices.update(dict.fromkeys(range(start, stop + 1)))
    return [f"{array_id}_{i}" for i in indices]
