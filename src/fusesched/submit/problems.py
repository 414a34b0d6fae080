"""A pydantic validation error of a submission as one :class:`SubmitError`: the first problem
with its field (as the user wrote it) and line, the others listed after it."""

from __future__ import annotations

import difflib
from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import TYPE_CHECKING, Any

from fusesched.submit.errors import SubmitError

if TYPE_CHECKING:
    from pydantic import ValidationError

#: A field path as pydantic and the YAML reader give it: ``("groups", 0, "argv")``.
Loc = tuple[str | int, ...]


def format_loc(loc: Iterable[str | int]) -> str:
    """``("groups", 0, "resources")`` → ``groups[0].resources``."""
    out = ""
    for part in loc:
        if isinstance(part, int):
            out += f"[{part}]"
        else:
            out += f".{part}" if out else part
    return out


def _message(error: Mapping[str, Any], known: Sequence[str]) -> str:
    kind = error.get("type")
    loc = tuple(error.get("loc", ()))
    if kind == "extra_forbidden" and loc:
        field = str(loc[-1])
        close = difflib.get_close_matches(field, known, n=1, cutoff=0.6)
        return f"unknown field {field!r}" + (f"; did you mean {close[0]!r}?" if close else "")
    if kind == "missing":
        return "required field is missing"
    message = str(error.get("msg", "invalid value"))
    for prefix in ("Value error, ", "Assertion failed, "):
        if message.startswith(prefix):
            message = message[len(prefix) :]
    return message


def submit_error_from(
    exc: ValidationError,
    known: Sequence[str],
    *,
    source: str | None = None,
    locate: Callable[[Loc], int | None] | None = None,
    rename: Callable[[Loc], Loc] | None = None,
) -> SubmitError:
    """One :class:`SubmitError` for a pydantic error: the first problem with its field and line,
    the others listed after it (unknown fields first: they often explain the rest).

    ``known``: the field names an unknown field is matched against ("did you mean");
    ``rename`` maps a request field path to the path as the user wrote it; ``locate`` maps
    that path to a line of ``source``.
    """
    problems: list[tuple[bool, Loc, str]] = []
    for error in exc.errors():
        loc: Loc = tuple(p for p in error["loc"] if isinstance(p, str | int))
        if rename is not None:
            loc = rename(loc)
        problems.append((error.get("type") != "extra_forbidden", loc, _message(error, known)))
    problems.sort(key=lambda p: p[0])
    (_, first_loc, message), rest = problems[0], problems[1:]
    for _, loc, msg in rest:
        line = locate(loc) if locate else None
        where = f" (line {line})" if line is not None else ""
        message += f"; also {format_loc(loc) or 'the job'}{where}: {msg}"
    return SubmitError(
        message,
        source=source,
        line=locate(first_loc) if locate else None,
        field=format_loc(first_loc) or None,
    )
