"""Which operating-system identity a task runs under: never root.

An agent running as root starts every task under an unprivileged uid that belongs to the job's
user: the uid the agent's configuration maps the user to, else the user's own account on this
node (when it exists and is not root), else a uid derived from the user name in a reserved range
(the same on every node, so files a job writes on shared storage belong to one owner). An agent
that is not root cannot switch users: its tasks run as the agent itself.

Before a task starts, :func:`check_reachable` verifies that the identity can reach its working
folder and execute its program, so a permission problem is a clear start failure instead of a
cryptic "permission denied" in the log. What the agent reads as root on a job's behalf must be
readable by the job's identity: :func:`check_readable` (a dataset's source, by ``find`` run as
it) and :func:`check_opens` (an image tarball: that identity opens the very file root opened).
:func:`check_private` verifies that the agent's own folders are root's alone. No task runs as
:data:`READER_UID`, which reads datasets' sources for the cache.
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
#: Reads datasets' sources for a root agent's cache (:mod:`fusesched.agent.dataset_staging`);
#: no task ever runs as it, so no task can tamper with a copy being made.
READER_UID = 65534


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
        if mapped == READER_UID:
            raise IdentityError(
                f"user {name!r} is mapped to uid {READER_UID}, which reads datasets for the "
                "agent: tasks never run as it"
            )
        return Identity(name, mapped, mapped)
    if name != "root":
        try:
            account = pwd.getpwnam(name)
        except KeyError:
            pass
        else:
            if account.pw_uid not in (0, READER_UID):
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
    names (a dataset's source), so it must check that the job's own user could:
    ``find -L PATH ( ! -readable -o -type d ! -executable )`` runs as ``who`` and must find
    nothing."""
    try:
        argv = ["/usr/bin/find", "-L", "--", str(path), *_UNREADABLE, "-print", "-quit"]
        done = run_as(who, argv, timeout=600)
    except (OSError, subprocess.SubprocessError) as exc:
        raise IdentityError(f"cannot check whether {who.name} may read {path}: {exc}") from None
    if done.returncode != 0 or done.stdout.strip():
        errors = done.stderr.strip().splitlines()
        what = done.stdout.strip() or (errors[-1] if errors else str(path))
        raise IdentityError(f"{who.name} (uid {who.uid}) may not read {what}")


# Opens its argument for reading as the shell's redirection does, then names what it opened.
_OPEN_AND_NAME = 'exec /usr/bin/stat -L -c "%d %i" /proc/self/fd/0 <"$1"'


def check_opens(path: Path | str, st: os.stat_result, who: Identity) -> None:
    """Raise :class:`IdentityError` unless ``who`` itself can open ``path`` for reading and
    gets the very file ``st`` describes (the one the agent opened as root). Unlike a check of
    the path followed by root's own open, nothing can be swapped in between: the kernel checks
    ``who``'s rights on the file root reads (a shell running as ``who`` opens it, and ``stat``
    names the file it got)."""
    try:
        done = run_as(who, ["/bin/sh", "-c", _OPEN_AND_NAME, "sh", str(path)], timeout=30)
    except (OSError, subprocess.SubprocessError) as exc:
        raise IdentityError(f"cannot check whether {who.name} may read {path}: {exc}") from None
    if done.returncode != 0 or done.stdout.split() != [str(st.st_dev), str(st.st_ino)]:
        raise IdentityError(f"{who.name} (uid {who.uid}) may not read {path}")


def check_private(path: Path | str) -> None:
    """Raise :class:`IdentityError` unless only root (the agent) can change ``path`` and the
    folders above it: each is owned by root or the agent's uid (links too, and the path they
    lead to), and none is writable by group or others unless sticky (``/tmp``: there, others
    cannot replace what root owns). A work dir or cache that a user made first (say, the
    default ``$TMPDIR/fusesched`` on a shared node) would let that user swap the agent's own
    files for links."""
    me = os.geteuid()
    for whole in (os.path.abspath(path), os.path.realpath(path)):
        folder = "/"
        for part in ["", *(p for p in whole.split("/") if p)]:
            folder = os.path.join(folder, part)
            st = os.lstat(folder)
            if st.st_uid not in (0, me):
                raise IdentityError(
                    f"{path}: {folder} belongs to uid {st.st_uid}, not to the agent; "
                    "the agent's folders must be its own"
                )
            open_to_others = st.st_mode & (stat.S_IWGRP | stat.S_IWOTH)
            if stat.S_ISDIR(st.st_mode) and open_to_others and not st.st_mode & stat.S_ISVTX:
                raise IdentityError(
                    f"{path}: {folder} is writable by others (mode {stat.filemode(st.st_mode)})"
                )
