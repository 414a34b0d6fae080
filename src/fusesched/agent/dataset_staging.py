"""Where a dataset comes from and how it is copied: sources, stagers, the copy's permissions.

Sources are absolute paths or ``file://`` URIs on shared storage (:func:`source_path`).
Copying is pluggable (:class:`Stager`): ``copy`` (Python's shutil) and ``rsync``. A copy is
made readable (not writable) by every user (:func:`make_readable`), as tasks run under
unprivileged per-user uids. :class:`DatasetError` is what every part of the agent's dataset
handling raises when a dataset cannot be given to a task.

An agent running as root never reads a source itself (a link in the source, swapped after
any check, would make root copy whatever it points to): :class:`ReaderStager` has ``tar``
read it as an unprivileged identity (:data:`READER`, ``nobody``) and unpacks the stream, so
the kernel checks that identity's rights on every file as it is read; device nodes and FIFOs
are never read (skipped), links never kept pointing out, and the copy is root's.
"""

from __future__ import annotations

import os
import shutil
import stat
import subprocess
import tarfile
import tempfile
from collections.abc import Callable
from pathlib import Path
from typing import Protocol

from fusesched.agent.users import READER_UID, Identity, run_as
from fusesched.api.wire import DatasetWire

#: Who reads a source for a root agent's cache: what it may read, every user may read (the
#: copies are readable by all), and no task runs as it (:func:`fusesched.agent.users.resolve`).
READER = Identity("nobody", READER_UID, READER_UID)


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


class ReaderStager:
    """``tar --dereference`` running as ``reader`` streams the source; the agent unpacks it
    (see the module docstring). For agents running as root, whatever ``stager`` says."""

    name = "tar"

    def __init__(self, reader: Identity = READER) -> None:
        found = shutil.which("tar", path="/usr/bin:/bin")
        if found is None:
            raise DatasetError("tar is not installed on this node")
        self.tar = found
        self.reader = reader

    def size(self, source: Path) -> int:
        """Bytes of ``source`` as the reader sees it (``du``, links followed)."""
        done = run_as(self.reader, ["/usr/bin/du", "-sbL", "--", str(source)], timeout=600)
        words = done.stdout.split()
        if done.returncode != 0 or not words or not words[0].isdigit():
            raise OSError(f"cannot measure {source}: {done.stderr.strip()[-200:]}")
        return int(words[0])

    def stage(self, source: Path, dest: Path) -> None:
        if not source.name or dest.name != source.name:
            raise OSError(f"cannot copy {source} to {dest}")
        argv = [self.tar, "--create", "--file=-", "--dereference", "-C", str(source.parent)]
        argv += ["--", source.name]
        with tempfile.TemporaryFile() as errors:
            tar = subprocess.Popen(
                argv,
                stdin=subprocess.DEVNULL,
                stdout=subprocess.PIPE,
                stderr=errors,
                cwd="/",
                env={"PATH": "/usr/bin:/bin"},
                user=self.reader.uid,
                group=self.reader.gid,
                extra_groups=[],
            )
            assert tar.stdout is not None
            try:
                with tarfile.open(fileobj=tar.stdout, mode="r|") as archive:
                    archive.extractall(dest.parent, filter=_copy_filter(source.name))
                while tar.stdout.read(1 << 20):
                    pass
            except BaseException:
                tar.kill()
                raise
            finally:
                tar.stdout.close()
                code = tar.wait()
            if code != 0:
                errors.seek(0)
                tail = errors.read().decode(errors="replace").strip().splitlines()[-1:] or [""]
                raise OSError(f"tar (as {self.reader.name}) exited with status {code}: {tail[0]}")


def _copy_filter(top: str) -> Callable[[tarfile.TarInfo, str], tarfile.TarInfo | None]:
    """tarfile's ``data`` filter (no absolute or escaping names or links, no set-uid bits,
    the agent's ownership), devices and FIFOs skipped, nothing outside ``top``."""

    def keep(member: tarfile.TarInfo, dest: str) -> tarfile.TarInfo | None:
        if member.isdev() or member.isfifo() or member.issym():  # (links: dereferenced)
            return None
        name = os.path.normpath(member.name)
        if name != top and not name.startswith(top + "/"):
            return None
        return tarfile.data_filter(member, dest)

    return keep


def make_stager(name: str) -> Stager:
    if name == "copy":
        return CopyStager()
    if name == "rsync":
        return RsyncStager()
    raise DatasetError(f"unknown stager {name!r} (copy, rsync)")
