"""Slurm's ``sshare`` layout for ``fusesched share`` (``sshare``) when it is given one of
Slurm's options (``-U``, ``-u``, ``-A``, ``-o``, ``-n``, ``-p``, ``-P``): the fair-share tree
as associations, each an account (what ``sbatch -A`` names: a tenant) with, for a user's
association, its user and partition (the queue). Tools validate an account with
``sshare -U --format Account --noheader`` (Snakemake's SLURM executor).

Every user may submit under ``default``, the account of a job that names none (as sacct
shows it): each user's association to it is shown too, and without a tenancy configuration
(no tree) it is the only one."""

from __future__ import annotations

import re
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, replace
from typing import Any, Final

#: The account of a job that names none (``JobRequest.tenant``'s default, as sacct shows it).
DEFAULT_ACCOUNT: Final = "default"
#: Slurm's columns when ``--format`` is not given.
DEFAULT_FORMAT: Final = "Account,User,RawShares,NormShares,RawUsage,EffectvUsage,FairShare"
#: The widest column a format may ask for (Snakemake asks 256).
MAX_WIDTH: Final = 10_000
_WIDTH: Final = re.compile(r"-?[0-9]{1,5}")


@dataclass(frozen=True)
class Association:
    """One row of Slurm's sshare: an account of the tree or a user's association."""

    account: str
    depth: int  # 1: the organisation; a user's association is the deepest
    user: str = ""
    partition: str = ""
    raw_shares: float | None = None
    norm_shares: float | None = None
    raw_usage: float | None = None
    norm_usage: float | None = None
    level_fs: float | None = None
    fairshare: float | None = None


@dataclass(frozen=True)
class Field:
    header: str
    width: int
    left: bool
    cell: Callable[[Association], str]
    indent: bool = False  # (the account: indented by its depth)


def _fixed(value: float | None) -> str:
    return "" if value is None else f"{value:.6f}"


def _whole(value: float | None) -> str:
    return "" if value is None else f"{value:.0f}"


FIELDS: Final[Mapping[str, Field]] = {
    "account": Field("Account", 20, True, lambda a: a.account, indent=True),
    "user": Field("User", 10, False, lambda a: a.user),
    "partition": Field("Partition", 12, False, lambda a: a.partition),
    "rawshares": Field("RawShares", 10, False, lambda a: _whole(a.raw_shares)),
    "normshares": Field("NormShares", 11, False, lambda a: _fixed(a.norm_shares)),
    "rawusage": Field("RawUsage", 11, False, lambda a: _whole(a.raw_usage)),
    "normusage": Field("NormUsage", 11, False, lambda a: _fixed(a.norm_usage)),
    "effectvusage": Field("EffectvUsage", 13, False, lambda a: _fixed(a.norm_usage)),
    "levelfs": Field("LevelFS", 10, False, lambda a: _fixed(a.level_fs)),
    "fairshare": Field("FairShare", 10, False, lambda a: _fixed(a.fairshare)),
}


def parse_format(
    text: str, table: Mapping[str, Field] = FIELDS, where: str = "sshare --format"
) -> list[tuple[Field, int]]:
    """``Account%256,User`` as ``table``'s fields (by lower-case name) with their widths, as
    Slurm reads them: ``%N`` right-justified, ``%-N`` left-justified, no width or ``%0`` the
    field's own; a ``ValueError`` naming an unknown field or a bad width."""
    out = []
    for item in text.split(","):
        name, _, width = item.strip().partition("%")
        found = table.get(name.lower())
        if found is None:
            known = ", ".join(table)
            raise ValueError(f"{where}: unknown field {name!r} (known: {known})")
        if width and not (_WIDTH.fullmatch(width) and abs(int(width)) <= MAX_WIDTH):
            raise ValueError(
                f"{where}: {item.strip()!r}: the width after % is a number"
                f" from -{MAX_WIDTH} to {MAX_WIDTH}"
            )
        number = int(width) if width else 0
        out.append(
            (replace(found, left=number < 0) if number else found, abs(number) or found.width)
        )
    return out


def associations(rows: Sequence[Mapping[str, Any]], users: Sequence[str]) -> list[Association]:
    """The fair-share tree's rows (``GET /v1/fairshare``: ``org/tenant/queue/user`` paths) as
    associations — the tenant is the account of its queues and users, the queue a user's
    partition — then each of ``users``' association to ``default``, the account of a job that
    names none, which every user may name (without a tenancy configuration, the only one)."""
    out = []
    for row in rows:
        path = row["account"].split("/")
        out.append(
            Association(
                path[1] if len(path) > 1 else path[0],
                len(path),
                user=path[3] if len(path) > 3 else "",
                partition=path[2] if len(path) > 2 else "",
                raw_shares=row["shares"],
                norm_shares=row["norm_shares"],
                raw_usage=row["usage"],
                norm_usage=row["norm_usage"],
                level_fs=row.get("level_fs"),
                fairshare=row.get("factor"),
            )
        )
    return out + [Association(DEFAULT_ACCOUNT, 1, user=user) for user in users]


def select(
    found: Iterable[Association],
    *,
    users_only: bool,
    users: Sequence[str],
    accounts: Sequence[str],
) -> list[Association]:
    """Slurm's filters: the accounts and only ``users``' associations (the caller's, ``-u``'s
    or, ``-a``, all); ``users_only`` (``-U``) without the accounts above them; ``accounts``
    (``-A``) those accounts."""
    out = []
    for a in found:
        if users_only and not a.user:
            continue
        if a.user and a.user not in users:
            continue
        if accounts and a.account not in accounts:
            continue
        out.append(a)
    return out


def render(
    found: Sequence[Association],
    fields: Sequence[tuple[Field, int]],
    *,
    header: bool,
    delimiter: str | None,
    trailing: bool,
) -> list[str]:
    """Slurm's lines: fixed columns (each cut to its width and followed by a space, the
    accounts indented by depth, a dashed line under the header) or, with ``delimiter``,
    fields joined by it (``trailing``: after the last one too, as ``--parsable``)."""

    def line(cells: Sequence[str]) -> str:
        if delimiter is None:
            return "".join(
                f"{c[:w]:{'<' if f.left else '>'}{w}} "
                for c, (f, w) in zip(cells, fields, strict=True)
            )
        return delimiter.join(cells) + (delimiter if trailing else "")

    lines = []
    if header:
        lines.append(line([f.header for f, _ in fields]))
        if delimiter is None:
            lines.append(line(["-" * w for _, w in fields]))
    for a in found:
        cells = [f.cell(a) for f, _ in fields]
        if delimiter is None:
            cells = [
                " " * (a.depth - 1) + c if f.indent else c
                for c, (f, _) in zip(cells, fields, strict=True)
            ]
        lines.append(line(cells))
    return lines
