"""Slurm host lists: ``node[01-03,07],gpu5`` → ``node01, node02, node03, node07, gpu5``.

Items are separated by commas outside brackets; each ``[...]`` holds numbers and ranges
(``lo-hi``, zero-padded to the width of ``lo`` as Slurm pads them), and several bracket groups
in one item multiply out (``r[1-2]n[1-2]`` → ``r1n1, r1n2, r2n1, r2n2``). Anything else —
unbalanced or nested brackets, an empty item, a range running backwards, a host file — is a
``ValueError`` that says what is wrong.
"""

from __future__ import annotations

import itertools
import re
from collections.abc import Sequence
from typing import Final

#: The most host names one list may expand to (a typo such as ``n[1-99999999]`` is refused).
MAX_HOSTS: Final = 100_000
#: The longest number a host name's range may hold.
MAX_DIGITS: Final = 18

_NAME_RE: Final = re.compile(r"^[A-Za-z0-9._-]*$")
_RANGE_RE: Final = re.compile(r"^(\d+)(?:-(\d+))?$", re.ASCII)


def expand_hostlist(text: str) -> list[str]:
    """The host names of a Slurm host list, in order, each once."""
    if "/" in text:
        raise ValueError(f"{text!r}: host files are not supported; list the nodes")
    names: list[str] = []
    for item in _items(text):
        names.extend(_expand_item(item))
        if len(names) > MAX_HOSTS:
            raise ValueError(f"{text!r} names more than {MAX_HOSTS:,} hosts")
    return list(dict.fromkeys(names))


def _items(text: str) -> list[str]:
    items: list[str] = []
    depth, start = 0, 0
    for k, ch in enumerate(text):
        if ch == "[":
            depth += 1
            if depth > 1:
                raise ValueError(f"{text!r}: brackets cannot nest")
        elif ch == "]":
            depth -= 1
            if depth < 0:
                raise ValueError(f"{text!r}: a ']' without its '['")
        elif ch == "," and depth == 0:
            items.append(text[start:k].strip())
            start = k + 1
    if depth:
        raise ValueError(f"{text!r}: a '[' without its ']'")
    items.append(text[start:].strip())
    if not all(items):
        raise ValueError(f"{text!r}: an empty host name (a stray comma?)")
    return items


def _expand_item(item: str) -> list[str]:
    parts = re.split(r"(\[[^\]]*\])", item)
    choices: list[list[str]] = []
    for part in parts:
        if part.startswith("["):
            choices.append(_numbers(item, part[1:-1]))
        elif not _NAME_RE.fullmatch(part):
            raise ValueError(f"{item!r}: a host name has letters, digits, '.', '_' and '-' only")
        else:
            choices.append([part])
    count = 1
    for choice in choices:
        count *= len(choice)
        if count > MAX_HOSTS:
            raise ValueError(f"{item!r} names more than {MAX_HOSTS:,} hosts")
    return ["".join(combo) for combo in itertools.product(*choices)]


def _numbers(item: str, inside: str) -> list[str]:
    out: list[str] = []
    for raw in inside.split(","):
        match = _RANGE_RE.fullmatch(raw.strip())
        if match is None:
            raise ValueError(
                f"{item!r}: cannot read [{inside}] (numbers and ranges such as [01-04,07])"
            )
        low, high = match.group(1), match.group(2)
        if max(len(low), len(high or "")) > MAX_DIGITS:
            raise ValueError(f"{item!r}: host numbers have at most {MAX_DIGITS} digits")
        # (counted before the names are made: many ranges in one pair of brackets add up)
        if len(out) + (1 if high is None else int(high) - int(low) + 1) > MAX_HOSTS:
            raise ValueError(f"{item!r} names more than {MAX_HOSTS:,} hosts")
        if high is None:
            out.append(low)
            continue
        if int(high) < int(low):
            raise ValueError(f"{item!r}: the range {low}-{high} runs backwards")
        width = len(low)
        out.extend(str(n).zfill(width) for n in range(int(low), int(high) + 1))
    return out


def tasks_per_node(counts: Sequence[int]) -> str:
    """Slurm's ``SLURM_TASKS_PER_NODE`` form: runs of equal counts as ``N(xK)`` (``[2, 2, 1]``
    → ``2(x2),1``)."""
    parts: list[str] = []
    k = 0
    while k < len(counts):
        run = 1
        while k + run < len(counts) and counts[k + run] == counts[k]:
            run += 1
        parts.append(f"{counts[k]}(x{run})" if run > 1 else str(counts[k]))
        k += run
    return ",".join(parts)


_NUMBERED: Final = re.compile(r"^(.*?)(\d+)$", re.ASCII)


def compress_hostlist(nodes: Sequence[str]) -> str:
    """Slurm's short form of a host list (``n1,n2,n3,n10,x`` → ``n[1-3,10],x``):
    consecutive names with the same prefix and a trailing number share one bracket, in
    order; a run of numbers one apart is a range when :func:`expand_hostlist` gives it back
    (the same width, or no zero-padding: ``n[9-10]``, ``n[08-10]``; ``n9,n010`` stay two)."""
    parts: list[str] = []
    k = 0
    while k < len(nodes):
        match = _NUMBERED.match(nodes[k])
        if match is None:
            parts.append(nodes[k])
            k += 1
            continue
        prefix = match.group(1)
        ranges: list[tuple[str, str]] = []
        while k < len(nodes):
            more = _NUMBERED.match(nodes[k])
            if more is None or more.group(1) != prefix:
                break
            number = more.group(2)
            if ranges and _follows(ranges[-1], number):
                ranges[-1] = (ranges[-1][0], number)
            else:
                ranges.append((number, number))
            k += 1
        if len(ranges) == 1 and ranges[0][0] == ranges[0][1]:
            parts.append(prefix + ranges[0][0])
            continue
        inner = ",".join(low if low == high else f"{low}-{high}" for low, high in ranges)
        parts.append(f"{prefix}[{inner}]")
    return ",".join(parts)


def _follows(run: tuple[str, str], number: str) -> bool:
    """Whether ``number`` extends the range ``run`` (low, high) so that it expands back to
    the same names: one more than its high end, and its width, or none of them padded."""
    low, high = run
    if int(number) != int(high) + 1:
        return False
    padded = any(len(n) > 1 and n.startswith("0") for n in (low, high, number))
    return len(number) == len(high) or not padded
