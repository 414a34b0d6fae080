"""Container images: a root-filesystem directory (used in place) or a tarball (unpacked once).

A tarball (``.tar``, ``.tar.gz``/``.tgz``, ``.tar.bz2``, ``.tar.xz``; detected by content, not
by name) is unpacked into ``<cache>/<sha256 of the file>/rootfs``. An exclusive ``flock`` on
``<cache>/<sha256>.lock`` makes every other task that needs the same image — in this agent or
in another agent on the same machine — wait for the one unpacking, then reuse the result, so a
gang of many tasks per node unpacks its image once. A ``.complete`` marker is written last, so
an interrupted unpack is redone rather than trusted.

Extraction is safe: member paths may not leave the root (``..``, absolute paths, or writing
through a symlink that points outside — tarfile's ``tar`` filter, which resolves already
extracted symlinks), hard links must point inside the root, device nodes and FIFOs are skipped
(``bwrap --dev`` provides ``/dev``), set-uid/set-gid bits are cleared. Symbolic links may point
anywhere: they are resolved inside the container, whose root is the image.
"""

from __future__ import annotations

import contextlib
import fcntl
import hashlib
import os
import shutil
import tarfile
import threading
from collections.abc import Iterator
from pathlib import Path

_CHUNK = 1 << 20

#: Mount points bwrap needs in a read-only root, created after unpacking if the image lacks them.
MOUNT_POINTS = ("proc", "dev", "tmp", "sys", "etc")
#: Files the runtime binds from the host (host network: same name resolution), created empty.
HOST_FILES = ("etc/hosts", "etc/resolv.conf")


class ImageError(Exception):
    """An image cannot be used; the message is the task's failed-to-start reason."""


def file_sha256(path: Path) -> str:
    digest = hashlib.sha256()
    with path.open("rb") as handle:
        while chunk := handle.read(_CHUNK):
            digest.update(chunk)
    return digest.hexdigest()


def _rootfs_filter(member: tarfile.TarInfo, dest: str) -> tarfile.TarInfo | None:
    if member.isdev() or member.isfifo():
        return None
    if member.islnk():
        target = os.path.realpath(os.path.join(dest, member.linkname.lstrip("/")))
        if os.path.commonpath([target, os.path.realpath(dest)]) != os.path.realpath(dest):
            raise tarfile.LinkOutsideDestinationError(member, target)
        member = member.replace(linkname=member.linkname.lstrip("/"), deep=False)
    symlink = member.linkname if member.issym() else None
    checked = tarfile.tar_filter(member, dest)
    if symlink is not None and checked.linkname != symlink:  # pragma: no cover - defensive
        checked = checked.replace(linkname=symlink, deep=False)
    return checked


@contextlib.contextmanager
def _locked(path: Path) -> Iterator[None]:
    fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o644)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)
        yield
    finally:
        os.close(fd)  # releases the lock


class ImageCache:
    """Resolves an image reference to a root filesystem directory on this node."""

    def __init__(self, cache_dir: Path | str) -> None:
        self.cache_dir = Path(cache_dir)
        self.unpacked = 0  # tarballs this instance unpacked (the rest came from the cache)
        self._hashes: dict[tuple[int, int, int, int], str] = {}
        self._mutex = threading.Lock()

    def _digest(self, path: Path) -> str:
        stat = path.stat()
        key = (stat.st_dev, stat.st_ino, stat.st_size, stat.st_mtime_ns)
        with self._mutex:
            known = self._hashes.get(key)
        if known is None:
            known = file_sha256(path)
            with self._mutex:
                self._hashes[key] = known
        return known

    def resolve(self, image: str) -> Path:
        """The root filesystem for ``image``; raises ``ImageError`` with a specific reason."""
        path = Path(image)
        if not path.exists():
            raise ImageError(f"image not found: {image}")
        if path.is_dir():
            return path.resolve()
        if not path.is_file():
            raise ImageError(f"image is neither a directory nor a file: {image}")
        try:
            if not tarfile.is_tarfile(path):
                raise ImageError(
                    f"image is not a root-filesystem directory or a tarball: {image} "
                    "(.tar, .tar.gz, .tar.bz2, .tar.xz)"
                )
            digest = self._digest(path)
        except OSError as exc:
            raise ImageError(f"cannot read image {image}: {exc.strerror}") from None
        return self._unpacked(path, digest)

    def _unpacked(self, tarball: Path, digest: str) -> Path:
        entry = self.cache_dir / digest
        rootfs = entry / "rootfs"
        marker = entry / ".complete"
        if marker.exists():
            return rootfs
        try:
            self.cache_dir.mkdir(parents=True, exist_ok=True)
            with _locked(self.cache_dir / f"{digest}.lock"):
                if marker.exists():
                    return rootfs
                self._unpack(tarball, entry, rootfs)
                marker.write_text(f"{tarball}\n")
        except OSError as exc:
            raise ImageError(f"cannot unpack image {tarball}: {exc}") from None
        return rootfs

    def _unpack(self, tarball: Path, entry: Path, rootfs: Path) -> None:
        if entry.exists():
            shutil.rmtree(entry)  # an interrupted earlier unpack
        staging = entry / f"rootfs.partial-{os.getpid()}-{threading.get_ident()}"
        staging.mkdir(parents=True)
        try:
            with tarfile.open(tarball, "r:*") as archive:
                archive.extractall(staging, filter=_rootfs_filter)
            for name in MOUNT_POINTS:
                target = staging / name
                if not target.exists() and not target.is_symlink():
                    target.mkdir(mode=0o755)
            for name in HOST_FILES:
                target = staging / name
                if target.parent.is_dir() and not target.exists() and not target.is_symlink():
                    target.touch()
            staging.rename(rootfs)
        except (tarfile.TarError, EOFError, ValueError, KeyError) as exc:
            shutil.rmtree(entry, ignore_errors=True)
            raise ImageError(f"bad image {tarball}: {exc}") from None
        except BaseException:
            shutil.rmtree(entry, ignore_errors=True)
            raise
        self.unpacked += 1
