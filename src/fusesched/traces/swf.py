"""Standard Workload Format (SWF) loader.

An SWF file (Feitelson's Parallel Workloads Archive) is plain text, optionally gzipped. Header
lines start with ``;`` and many of them read ``; Key: value``; every other non-blank line is one
job record of 18 whitespace-separated numbers, ``-1`` meaning "unknown".

:func:`load_swf` reads a file into one NumPy column per field. :func:`rlscheduler_jobs` applies
the job clean-up of the RLScheduler evaluation (``anchors/rlscheduler/PROTOCOL.md`` section 1).

Parsing rules, all deliberate:

- gzip is detected by its magic bytes, whatever the file name.
- Any line whose first non-blank character is ``;`` is a comment wherever it appears; blank lines
  are skipped. ``; Key: value`` comments (the space after ``;`` is optional) fill
  :attr:`SwfHeader.other`; ``MaxNodes`` and ``MaxProcs`` become integers (the leading integer of
  the value, so ``338 (batch partition; 512 total)`` gives 338), and ``MaxProcs`` defaults to
  ``MaxNodes`` when absent, as in the RLScheduler artifact.
- A record needs at least the first 5 fields (job number, submit, wait, run time, allocated
  processors); missing trailing fields are filled with ``-1``. More than 18 fields is an error.
- Values are parsed as floating point. ``avg_cpu`` and ``used_mem`` stay float64; the other 16
  columns are int64, and a fractional value there is rounded to the nearest integer (ties to
  even). NaN, infinity and magnitudes of 2**53 or more are errors.
- Errors in the content raise :class:`TraceFormatError` naming the file and, where one line is
  at fault, its 1-based line number. A missing file raises the ordinary ``FileNotFoundError``.
"""

from __future__ import annotations

import gzip
import math
import re
import zlib
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from types import MappingProxyType
from typing import Any

import numpy as np
from numpy.typing import NDArray

__all__ = [
    "FIELD_NAMES",
    "RlJobs",
    "SwfHeader",
    "SwfTrace",
    "TraceFormatError",
    "load_swf",
    "rlscheduler_jobs",
]

FIELD_NAMES: tuple[str, ...] = (
    "job_id",
    "submit",
    "wait",
    "run",
    "alloc_procs",
    "avg_cpu",
    "used_mem",
    "req_procs",
    "req_time",
    "req_mem",
    "status",
    "user",
    "group",
    "app",
    "queue",
    "partition",
    "preceding_job",
    "think_time",
)
_FLOAT_FIELDS = frozenset({"avg_cpu", "used_mem"})
_MIN_FIELDS = 5
_MAX_ABS = 2.0**53
_GZIP_MAGIC = b"\x1f\x8b"
_HEADER_RE = re.compile(r"^\s*;\s*([A-Za-z][\w ./-]*?)\s*:(.*)$")
_LEADING_INT_RE = re.compile(r"^\s*([+-]?\d+)")

IntArray = NDArray[np.int64]
FloatArray = NDArray[np.float64]


class TraceFormatError(ValueError):
    """The trace file is not valid SWF; the message names the file and, if known, the line."""


@dataclass(frozen=True)
class SwfHeader:
    """The parsed ``; Key: value`` header comments.

    ``max_procs`` equals ``max_nodes`` when the file has no ``MaxProcs`` line. ``other`` maps every
    other key to its values in file order (keys such as ``Note`` or ``Partition`` repeat).
    """

    max_nodes: int | None
    max_procs: int | None
    other: Mapping[str, tuple[str, ...]] = field(default_factory=lambda: MappingProxyType({}))


@dataclass(frozen=True, eq=False)
class SwfTrace:
    """All records of one SWF file, one read-only NumPy column per SWF field, in file order."""

    path: Path
    header: SwfHeader
    job_id: IntArray
    submit: IntArray
    wait: IntArray
    run: IntArray
    alloc_procs: IntArray
    avg_cpu: FloatArray
    used_mem: FloatArray
    req_procs: IntArray
    req_time: IntArray
    req_mem: IntArray
    status: IntArray
    user: IntArray
    group: IntArray
    app: IntArray
    queue: IntArray
    partition: IntArray
    preceding_job: IntArray
    think_time: IntArray

    def __len__(self) -> int:
        return int(self.job_id.shape[0])


@dataclass(frozen=True, eq=False)
class RlJobs:
    """Jobs after the RLScheduler clean-up (PROTOCOL.md section 1), in job-number order.

    ``procs`` is n = max(allocated, requested processors); ``estimate`` is r (may be -1);
    ``run`` is the actual run time used by the simulation (never 0, -1 became 10).
    The cluster has ``max_nodes`` nodes of ``ppn`` = max_procs / max_nodes processors each.
    """

    job_id: IntArray
    submit: IntArray
    run: IntArray
    procs: IntArray
    estimate: IntArray
    max_nodes: int
    max_procs: int
    ppn: float
    user: IntArray | None = None  # the user per job (-1: unknown); not used by the protocol

    def __len__(self) -> int:
        return int(self.job_id.shape[0])


def load_swf(path: str | Path) -> SwfTrace:
    """Read an SWF file (plain or gzipped) into an :class:`SwfTrace`; see the module docstring."""
    path = Path(path)
    lines = _read_bytes(path).split(b"\n")
    comments = [(i, line) for i, line in enumerate(lines) if line.lstrip()[:1] == b";"]
    records = [line for line in lines if line.strip() and line.lstrip()[:1] != b";"]
    if not records:
        raise TraceFormatError(f"{path}: no job records found (empty file or only comments)")
    header = _parse_header(path, comments)
    table = _parse_fast(records)
    if table is None:
        table = _parse_slow(path, lines)
    _check_finite(path, lines, table)
    columns: dict[str, NDArray[Any]] = {}
    for index, name in enumerate(FIELD_NAMES):
        column = table[:, index]
        array = column.copy() if name in _FLOAT_FIELDS else np.rint(column).astype(np.int64)
        array.setflags(write=False)
        columns[name] = array
    return SwfTrace(path, header, **columns)


def rlscheduler_jobs(trace: SwfTrace) -> RlJobs:
    """Apply the RLScheduler job clean-up, in exactly the order of PROTOCOL.md section 1.

    1. n = max(allocated, requested processors);
    2. r = requested time, or the *raw* run time when the requested time is exactly -1
       (so r stays -1 when both are -1);
    3. a negative run time becomes 10 s;
    4. jobs whose run time is now 0 are dropped;
    5. jobs are stably sorted by job number.

    Raises ``ValueError`` when the header has no ``MaxNodes`` (the protocol sizes the cluster
    from it).
    """
    max_nodes, max_procs = trace.header.max_nodes, trace.header.max_procs
    if max_nodes is None or max_procs is None or max_nodes <= 0:
        raise ValueError(f"{trace.path}: the header needs a positive '; MaxNodes:' value")
    procs = np.maximum(trace.alloc_procs, trace.req_procs)
    estimate = np.where(trace.req_time == -1, trace.run, trace.req_time)
    run = np.where(trace.run < 0, 10, trace.run)
    keep = run != 0
    order = np.argsort(trace.job_id[keep], kind="stable")
    columns = (trace.job_id, trace.submit, run, procs, estimate, trace.user)
    arrays = [a[keep][order] for a in columns]
    for array in arrays:
        array.setflags(write=False)
    job_id, submit, run, procs, estimate, user = arrays
    return RlJobs(
        job_id, submit, run, procs, estimate, max_nodes, max_procs, max_procs / max_nodes, user
    )


def _read_bytes(path: Path) -> bytes:
    """The file's bytes, gunzipped when they start with the gzip magic number."""
    raw = path.read_bytes()
    if raw[:2] != _GZIP_MAGIC:
        return raw
    try:
        return gzip.decompress(raw)
    except (OSError, EOFError, zlib.error) as exc:
        raise TraceFormatError(f"{path}: corrupt gzip data ({exc})") from exc


def _parse_header(path: Path, comments: list[tuple[int, bytes]]) -> SwfHeader:
    """Collect ``; Key: value`` comments; MaxNodes/MaxProcs become integers."""
    other: dict[str, list[str]] = {}
    sizes: dict[str, int] = {}
    for index, raw in comments:
        match = _HEADER_RE.match(raw.decode("utf-8", errors="replace"))
        if match is None:
            continue
        key, value = match.group(1), match.group(2).strip()
        if key in ("MaxNodes", "MaxProcs"):
            number = _LEADING_INT_RE.match(value)
            if number is None:
                raise TraceFormatError(f"{path}:{index + 1}: {key} is not an integer: {value!r}")
            sizes[key] = int(number.group(1))
        else:
            other.setdefault(key, []).append(value)
    max_nodes = sizes.get("MaxNodes")
    max_procs = sizes.get("MaxProcs", max_nodes)
    frozen = MappingProxyType({key: tuple(values) for key, values in other.items()})
    return SwfHeader(max_nodes, max_procs, frozen)


def _parse_fast(records: list[bytes]) -> FloatArray | None:
    """Parse all records in bulk; ``None`` when they are not all well-formed 18-field lines."""
    try:
        table = np.loadtxt(records, dtype=np.float64, comments=None, ndmin=2)
    except ValueError:
        return None
    return table if table.shape[1] == len(FIELD_NAMES) else None


def _parse_slow(path: Path, lines: list[bytes]) -> FloatArray:
    """Line-by-line parse: pads short records with -1 and reports the first bad line."""
    rows: list[list[float]] = []
    for index, line in enumerate(lines):
        tokens = line.split()
        if not tokens or tokens[0].startswith(b";"):
            continue
        where = f"{path}:{index + 1}"
        if len(tokens) < _MIN_FIELDS and b"," in line:
            raise TraceFormatError(
                f"{where}: this looks like a CSV file (comma-separated), not SWF, whose "
                f"records are {len(FIELD_NAMES)} whitespace-separated numbers"
            )
        if len(tokens) < _MIN_FIELDS:
            raise TraceFormatError(
                f"{where}: too few fields ({len(tokens)}; an SWF record needs at least "
                f"{_MIN_FIELDS} of {len(FIELD_NAMES)})"
            )
        if len(tokens) > len(FIELD_NAMES):
            raise TraceFormatError(
                f"{where}: too many fields ({len(tokens)}; SWF has {len(FIELD_NAMES)})"
            )
        row = [_parse_number(where, position, token) for position, token in enumerate(tokens)]
        rows.append(row + [-1.0] * (len(FIELD_NAMES) - len(row)))
    return np.array(rows, dtype=np.float64)


def _parse_number(where: str, position: int, token: bytes) -> float:
    """One field as a float, or a TraceFormatError naming the field."""
    text = token.decode("utf-8", errors="replace")
    try:
        value = float(text)
    except ValueError:
        value = math.nan
    if not math.isfinite(value) or abs(value) >= _MAX_ABS or "_" in text:
        raise TraceFormatError(
            f"{where}: field {position + 1} ({FIELD_NAMES[position]}) is not a finite number "
            f"of magnitude below 2**53: {text!r}"
        )
    return value


def _check_finite(path: Path, lines: list[bytes], table: FloatArray) -> None:
    """Reject NaN, infinities and magnitudes that int64/float64 cannot hold exactly."""
    bad = ~(np.abs(table) < _MAX_ABS)  # also true for NaN
    if bad.any():
        _parse_slow(path, lines)  # raises with the line number of the first bad value
        raise TraceFormatError(f"{path}: a field holds a non-finite or too large number")
