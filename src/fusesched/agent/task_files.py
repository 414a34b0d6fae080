"""Files in a task's folder, which its (unprivileged) user owns, read or made by the agent
(root) without being led elsewhere by a link, a FIFO or a file the user made."""

from __future__ import annotations

import base64
import binascii
import os
import stat
from pathlib import Path
from typing import BinaryIO

#: The launch file (``TaskLaunch.files``) that holds a job step's task's standard input,
#: base64 (``srun``'s: agent/step_stdin.py, controller/steps.py). An agent writes it decoded
#: as :data:`STDIN_NAME` (:func:`write_stdin`), which the task's shim opens as its standard
#: input (agent/task_shim.py); an agent older than it writes it as it came, a file of no
#: use, and the task's standard input stays ``/dev/null``, as before.
STDIN_FILE = "fusesched.stdin.b64"
#: The task's standard input in its folder (no launch file can take the name: theirs start
#: with a letter or digit).
STDIN_NAME = ".fusesched-stdin"


def open_task_file(path: Path) -> BinaryIO:
    """Open a file of a task's folder (its log, its pid file) for reading as the agent (root).
    The folder is the task user's: a link or a FIFO put in the file's place is refused
    (``OSError``), so the agent never reads another file on the user's behalf (hard links
    to others' files are refused by the kernel's ``fs.protected_hardlinks``, on by
    default)."""
    fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK)
    if not stat.S_ISREG(os.fstat(fd).st_mode):
        os.close(fd)
        raise OSError(f"{path} is not a regular file")
    return os.fdopen(fd, "rb")


def read_pid_file(path: Path) -> tuple[int, int]:
    """(pid, start time) from a task's pid file, only if this agent's user wrote it: the
    file lies in the task user's folder, and a file that user made (or a link) must not
    make the agent kill someone else's processes (``ValueError`` / ``OSError``)."""
    with open_task_file(path) as handle:
        st = os.fstat(handle.fileno())
        if st.st_uid != os.geteuid() or st.st_nlink != 1:
            raise ValueError(f"{path} was not written by the agent")
        pid_text, start_text = handle.read().decode().split()
    return int(pid_text), int(start_text)


def make_tmp(folder: Path) -> None:
    """Make a missing TMPDIR folder like /tmp (sticky, writable by all), without following a
    link put in its place."""
    try:
        folder.mkdir(parents=True)
    except FileExistsError:
        return  # (made already, by this agent before or another one now)
    fd = os.open(folder, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW)
    try:
        os.fchmod(fd, 0o1777)
    finally:
        os.close(fd)


def write_stdin(task_dir: Path, text: str) -> bool:
    """Write a task's standard input (:data:`STDIN_FILE`'s ``text``, base64) decoded into its
    folder as :data:`STDIN_NAME`, mode 0600, never through a link nor over a file there
    (the folder is handed to the task's user with the rest: agent/spawn.py); False when
    ``text`` is not base64 (``OSError`` when it cannot be written)."""
    try:
        data = base64.b64decode(text, validate=True)
    except (binascii.Error, ValueError):
        return False
    flags = os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW
    with os.fdopen(os.open(task_dir / STDIN_NAME, flags, 0o600), "wb") as out:
        out.write(data)
    return True
