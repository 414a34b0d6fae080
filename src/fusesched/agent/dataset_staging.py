"""Where a dataset comes from and how it is copied: sources, stagers, the copy's permissions.

Sources are absolute paths or ``file://`` URIs on shared storage (:func:`source_path`).
Copying is pluggable (:class:`Stager`): ``copy`` (Python's shutil) and ``rsync``. A copy is
made readable (not writable) by every user (:func:`make_readable`), as tasks run under
unprivileged per-user uids. :class:`DatasetError` is what every part of the agent's dataset
handling raises when a dataset cannot be given to a task.
"""

from __future__ import annotations

import os
import shutil
import stat
import subprocess
from pathlib import Path
from typing import Protocol

from fusesched.api.wire import DatasetWire


class DatasetError(Exception):
    """A dataset cannot be given to a task; the message names it and says why."""


def source_path(dataset: DatasetWire) -> Path:
    """The shared path of ``dataset``'s source (an absolute path or ``file://`` URI)."""
    path = dataset.source.removeprefix("file://")
    if "://" in path or not path.startswith("/"):
        raise DatasetError(
            f"dataset {dataset.name}: source {dataset.source!r} is not an absolute path "
            "or file:// URI"
        )
    return Path(path)


def tree_size(path: Path) -> int:
    """Bytes of the files at ``path`` (a file or a folder; links followed, as copies do)."""
    if not path.is_dir():
        return path.stat().st_size
    total = 0
    for folder, _, files in os.walk(path, followlinks=True):
        for name in files:
            total += os.stat(os.path.join(folder, name)).st_size
    return total


def make_readable(path: Path) -> None:
    """Folders 0755 and files 0644 (0755 when executable by their owner): every task user
    can read the copy, none can change it."""

    def fix(item: str) -> None:
        mode = os.lstat(item).st_mode
        if stat.S_ISLNK(mode):
            return
        wanted = 0o755 if stat.S_ISDIR(mode) or mode & stat.S_IXUSR else 0o644
        os.chmod(item, wanted)

    fix(str(path))
    if path.is_dir() and not path.is_symlink():
        for folder, dirs, files in os.walk(path):
            for name in (*dirs, *files):
                fix(os.path.join(folder, name))


class Stager(Protocol):
    """Copies a dataset's source (a file or a folder) to ``dest``, which does not exist yet."""

    name: str

    def stage(self, source: Path, dest: Path) -> None: ...


class CopyStager:
    """Python's shutil: works everywhere."""

    name = "copy"

    def stage(self, source: Path, dest: Path) -> None:
        if source.is_dir():
            shutil.copytree(source, dest)
        else:
            shutil.copyfile(source, dest)


class RsyncStager:
    """``rsync -rLt``: resumable, fast on large trees, and the usual tool of sites."""

    name = "rsync"

    def __init__(self, rsync: str | None = None) -> None:
        found = rsync or shutil.which("rsync")
        if found is None:
            raise DatasetError("rsync is not installed on this node")
        self.rsync = found

    def stage(self, source: Path, dest: Path) -> None:
        src = f"{source}/" if source.is_dir() else str(source)
        done = subprocess.run(
            [self.rsync, "-rLt", src, str(dest)], capture_output=True, text=True, check=False
        )
        if done.returncode != 0:
            tail = done.stderr.strip().splitlines()[-1:] or [""]
            raise OSError(f"rsync exited with status {done.returncode}: {tail[0]}")


def make_stager(name: str) -> Stager:
    if name == "copy":
        return CopyStager()
    if name == "rsync":
        return RsyncStager()
    raise DatasetError(f"unknown stager {name!r} (copy, rsync)")
