"""License lists: the cluster's floating licenses (``matlab:10,ansys:4``) and a job's request
(``{matlab: 2}``, ``sbatch -L matlab:2``), checked and kept as (name, count) pairs sorted by
name. How the core counts them is :mod:`fusesched.core.licenses`; docs/LICENSES.md says what
is supported."""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping
from typing import Final

#: Licenses as the core takes them: (name, count) pairs sorted by name, counts positive.
Licenses = tuple[tuple[str, int], ...]

#: A license name: a letter or digit, then letters, digits, ``_ . -`` (64 at most).
NAME_RE: Final = re.compile(r"[A-Za-z0-9][A-Za-z0-9_.-]{0,63}")  # (whole name: fullmatch)

#: The most of one license a cluster may declare (or a job ask for).
MAX_COUNT: Final = 1_000_000


class LicenseError(ValueError):
    """A malformed license list (configuration or request)."""


def check_name(name: object) -> str:
    """``name`` if it is a valid license name, else :class:`LicenseError` saying why."""
    if not isinstance(name, str) or not NAME_RE.fullmatch(name):
        shown = repr(name) if len(str(name)) <= 40 else f"{str(name)[:40]!r}…"
        raise LicenseError(
            f"invalid license name {shown}: a letter or digit, then letters, digits, "
            "'_', '.' or '-' (64 characters at most)"
        )
    return name


def check_count(name: str, count: object, *, allow_zero: bool = False) -> int:
    """``count`` as a whole number of licenses (≥ 1, or ≥ 0 with ``allow_zero``)."""
    low = 0 if allow_zero else 1
    if isinstance(count, bool) or not isinstance(count, int) or not low <= count <= MAX_COUNT:
        raise LicenseError(
            f"license {name}: the count must be a whole number from {low} to {MAX_COUNT}, "
            f"not {count!r}"
        )
    return count


def normalize(
    licenses: Mapping[str, object] | Iterable[tuple[str, object]], *, allow_zero: bool = False
) -> Licenses:
    """Checked (name, count) pairs sorted by name; a name given twice is an error."""
    pairs = licenses.items() if isinstance(licenses, Mapping) else licenses
    out: dict[str, int] = {}
    for name, count in pairs:
        check_name(name)
        if name in out:
            raise LicenseError(f"license {name} is given twice")
        out[name] = check_count(name, count, allow_zero=allow_zero)
    return tuple(sorted(out.items()))


def parse_licenses(text: str, *, allow_zero: bool = False, default: int | None = None) -> Licenses:
    """``NAME:N[,NAME:N…]`` (``matlab:10,ansys:4``); with ``default`` a bare ``NAME`` counts
    that many (sbatch ``-L matlab`` asks for one). Slurm's ``|`` (any one of) is refused."""
    text = text.strip()
    if not text:
        raise LicenseError("no licenses given: write NAME:COUNT[,NAME:COUNT…]")
    if "|" in text:
        raise LicenseError(
            f"{text!r}: '|' (any one of several licenses) is not supported; "
            "ask for every license the job needs, separated by commas"
        )
    pairs: list[tuple[str, object]] = []
    for item in text.split(","):
        item = item.strip()
        name, sep, count = item.partition(":")
        if not sep and "=" in item:  # (slurm.conf-like NAME=N is a common slip)
            name, sep, count = item.partition("=")
        name = name.strip()
        if not sep:
            if default is None:
                raise LicenseError(f"{item!r}: give a count, as {item or 'NAME'}:COUNT")
            pairs.append((check_name(name), default))
            continue
        count = count.strip()
        if not (count.isascii() and count.isdigit()) or len(count) > 7:
            raise LicenseError(
                f"license {name or '?'}: the count must be a whole number, not {count!r}"
            )
        pairs.append((check_name(name), int(count)))
    return normalize(pairs, allow_zero=allow_zero)


def format_licenses(licenses: Licenses) -> str:
    """``ansys:4,matlab:10``."""
    return ",".join(f"{name}:{count}" for name, count in licenses)


def refusal(configured: Licenses, wanted: Licenses) -> str:
    """Why a job asking for ``wanted`` can never run on a cluster with ``configured``, or
    ``""``."""
    if not wanted:
        return ""
    total = dict(configured)
    for name, count in wanted:
        have = total.get(name)
        if have is None:
            known = ", ".join(total) if total else "none (see the controller's --licenses)"
            return f"license {name!r} is not configured on this cluster; licenses: {known}"
        if count > have:
            return f"it asks for {count} {name} licenses; the cluster has {have} in all"
    return ""
