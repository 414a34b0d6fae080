"""Which operating-system identity a task runs under: never root.

An agent running as root starts every task under an unprivileged uid that belongs to the job's
user: the uid the agent's configuration maps the user to, else the user's own account on this
node (when it exists and is not root), else a uid derived from the user name in a reserved range
(the same on every node, so files a job writes on shared storage belong to one owner). An agent
that is not root cannot switch users: its tasks run as the agent itself.

Before a task starts, :func:`check_reachable` verifies that the identity can reach its working
folder and execute its program, so a permission problem is a clear start failure instead of a
cryptic "permission denied" in the log.
"""

from __future__ import annotations

import os
import pwd
import stat
import subprocess
import zlib
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

#: uids handed to users without an account here: [UID_MIN, UID_MIN + UID_COUNT)
UID_MIN = 200_000
UID_COUNT = 100_000
ANONYMOUS = "anonymous"


class IdentityError(ValueError):
    """A task cannot run under the identity it was given (the message says why)."""


@dataclass(frozen=True, slots=True)
class Identity:
    name: str
    uid: int
    gid: int

    @property
    def groups(self) -> frozenset[int]:
        return frozenset({self.gid})


def derived_uid(user: str, uid_min: int = UID_MIN, count: int = UID_COUNT) -> int:
    """A stable uid for ``user`` in the reserved range (CRC-32 of the name)."""
    return uid_min + zlib.crc32(user.encode()) % count


def resolve(
    user: str,
    *,
    uid_map: Mapping[str, int] | None = None,
    uid_min: int = UID_MIN,
    uid_count: int = UID_COUNT,
) -> Identity:
    """The unprivileged identity ``user``'s tasks run under (see the module docstring)."""
    name = user or ANONYMOUS
    mapped = (uid_map or {}).get(name)
    if mapped is not None:
        if mapped == 0:
            raise IdentityError(f"user {name!r} is mapped to uid 0: tasks never run as root")
        return Identity(name, mapped, mapped)
    if name != "root":
        try:
            account = pwd.getpwnam(name)
        except KeyError:
            pass
        else:
            if account.pw_uid != 0:
                return Identity(name, account.pw_uid, account.pw_gid)
    uid = derived_uid(name, uid_min, uid_count)
    return Identity(name, uid, uid)


def can_switch_users() -> bool:
    return os.geteuid() == 0


def _allowed(st: os.stat_result, who: Identity, user_bit: int, group_bit: int, other: int) -> bool:
    if st.st_uid == who.uid:
        return bool(st.st_mode & user_bit)
    if st.st_gid in who.groups:
        return bool(st.st_mode & group_bit)
    return bool(st.st_mode & other)


def check_reachable(path: Path, who: Identity, *, execute: bool = False) -> None:
    """Raise :class:`IdentityError` unless ``who`` can reach ``path`` (every parent folder
    searchable) and, with ``execute``, execute it."""
    # strings, not pathlib: this runs a few times for every task started
    resolved = os.path.realpath(path)
    folder = "/"
    parts = [part for part in resolved.split("/") if part]
    for part in ["", *parts[:-1]]:
        folder = os.path.join(folder, part)
        st = os.stat(folder)
        if not _allowed(st, who, stat.S_IXUSR, stat.S_IXGRP, stat.S_IXOTH):
            raise IdentityError(
                f"{path} is not reachable by {who.name} (uid {who.uid}): "
                f"{folder} is not searchable by it (mode {stat.filemode(st.st_mode)})"
            )
    if execute:
        st = os.stat(resolved)
        if not _allowed(st, who, stat.S_IXUSR, stat.S_IXGRP, stat.S_IXOTH):
            raise IdentityError(f"{path} is not executable by {who.name} (uid {who.uid})")


def run_as(who: Identity, argv: list[str], timeout: float) -> subprocess.CompletedProcess[str]:
    """Run ``argv`` as ``who`` (no supplementary groups, a bare ``PATH``), its output
    captured as text; raises ``OSError`` or ``subprocess.SubprocessError``."""
    return subprocess.run(
        argv,
        user=who.uid,
        group=who.gid,
        extra_groups=[],
        env={"PATH": "/usr/bin:/bin"},
        capture_output=True,
        text=True,
        timeout=timeout,
        check=False,
    )


#: ``find`` tests for what a user may not read: a file it cannot read, a folder it cannot search.
_UNREADABLE = ("(", "!", "-readable", "-o", "-type", "d", "!", "-executable", ")")


def check_readable(path: Path | str, who: Identity) -> None:
    """Raise :class:`IdentityError` unless ``who`` may read all of ``path`` (every file
    readable, every folder searchable; links followed). The agent reads as root what a job
    names (a dataset's source, an image tarball), so it must check that the job's own user
    could: ``find -L PATH ( ! -readable -o -type d ! -executable )`` runs as ``who`` and must
    find nothing."""
    try:
        argv = ["/usr/bin/find", "-L", "--", str(path), *_UNREADABLE, "-print", "-quit"]
        done = run_as(who, argv, timeout=600)
    except (OSError, subprocess.SubprocessError) as exc:
        raise IdentityError(f"cannot check whether {who.name} may read {path}: {exc}") from None
    if done.returncode != 0 or done.stdout.strip():
        errors = done.stderr.strip().splitlines()
        what = done.stdout.strip() or (errors[-1] if errors else str(path))
        raise IdentityError(f"{who.name} (uid {who.uid}) may not read {what}")
