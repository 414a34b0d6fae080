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
(``bwrap --dev`` provides ``/dev``), set-uid/set-gid bits are cleared, and everything is owned
by the agent (root), never by the uids or user names the tarball records (which would let
whoever has that uid on this node change an image other users' tasks run). Symbolic links may
point anywhere: they are resolved inside the container, whose root is the image.

The agent (root) opens a tarball once and only if it is a regular file (a FIFO or a device in
its place is never opened); for a task under another identity, that identity must open the
very same file itself (:func:`fusesched.agent.users.check_opens`). The file is hashed and
unpacked from that one open file, and the bytes unpacked are hashed again: a tarball changed
while it is read (its owner may write to it) is refused instead of being cached under the
hash of other contents, where other users' tasks would find it.
"""

from __future__ import annotations

import bz2
import contextlib
import fcntl
import gzip
import hashlib
import io
import lzma
import os
import shutil
import stat
import tarfile
import threading
import zlib
from collections.abc import Iterator
from pathlib import Path
from typing import Any, BinaryIO

from fusesched.agent.users import Identity, check_opens

_CHUNK = 1 << 20

#: Mount points bwrap needs in a read-only root, created after unpacking if the image lacks them.
MOUNT_POINTS = ("proc", "dev", "tmp", "sys", "etc")
#: Files the runtime binds from the host (host network: same name resolution), created empty.
HOST_FILES = ("etc/hosts", "etc/resolv.conf")


class ImageError(Exception):
    """An image cannot be used; the message is the task's failed-to-start reason."""


def file_sha256(path: Path) -> str:
    with path.open("rb") as handle:
        return _sha256(handle)


def _sha256(handle: BinaryIO) -> str:
    digest = hashlib.sha256()
    while chunk := handle.read(_CHUNK):
        digest.update(chunk)
    return digest.hexdigest()


class _Hashing(io.RawIOBase):
    """Reads ``handle`` and hashes every byte read (the unpacked bytes, for the check)."""

    def __init__(self, handle: BinaryIO) -> None:
        self.handle = handle
        self.digest = hashlib.sha256()

    def readable(self) -> bool:
        return True

    def readinto(self, buffer: bytearray | memoryview) -> int:  # type: ignore[override]
        data = self.handle.read(len(buffer))
        self.digest.update(data)
        buffer[: len(data)] = data
        return len(data)


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
    # never the tarball's owners: as root, tarfile would chown to them (by name or uid)
    return checked.replace(uid=0, gid=0, uname="root", gname="root", deep=False)


def _decompressed(raw: io.BufferedReader[Any]) -> io.BufferedIOBase:
    """``raw`` decompressed as its first bytes say (gzip, bzip2, xz; else as is), read in
    order only, so every byte unpacked is a byte hashed."""
    magic = raw.peek(6)[:6]
    if magic.startswith(b"\x1f\x8b"):
        return gzip.GzipFile(fileobj=raw, mode="rb")
    if magic.startswith(b"BZh"):
        return bz2.BZ2File(raw)
    if magic.startswith(b"\xfd7zXZ\x00"):
        return lzma.LZMAFile(raw)
    return raw


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
        self._hashes: dict[tuple[int, int, int, int, int], str] = {}
        self._mutex = threading.Lock()

    def _digest(self, handle: BinaryIO, st: os.stat_result) -> str:
        # ctime too: a file's owner can set its mtime back, never its ctime
        key = (st.st_dev, st.st_ino, st.st_size, st.st_mtime_ns, st.st_ctime_ns)
        with self._mutex:
            known = self._hashes.get(key)
        if known is None:
            handle.seek(0)
            known = _sha256(handle)
            with self._mutex:
                self._hashes[key] = known
        return known

    def _forget(self, digest: str) -> None:
        with self._mutex:
            self._hashes = {k: v for k, v in self._hashes.items() if v != digest}

    def resolve(self, image: str, who: Identity | None = None) -> Path:
        """The root filesystem for ``image``; raises ``ImageError`` with a specific reason,
        or :class:`~fusesched.agent.users.IdentityError` when ``who`` (the task's identity, the
        agent being root) may not read the tarball."""
        try:  # O_PATH opens nothing: a FIFO or a device put there is never opened by root
            place = os.open(image, os.O_PATH | os.O_CLOEXEC)
        except FileNotFoundError:
            raise ImageError(f"image not found: {image}") from None
        except OSError as exc:
            raise ImageError(f"cannot read image {image}: {exc.strerror}") from None
        try:
            st = os.fstat(place)
            if stat.S_ISDIR(st.st_mode):  # bound by bwrap, which runs as the task's identity
                return Path(image).resolve()
            if not stat.S_ISREG(st.st_mode):
                raise ImageError(f"image is neither a directory nor a file: {image}")
            if who is not None:  # root reads it for the task: its user must read this file
                check_opens(image, st, who)
            try:
                fd = os.open(f"/proc/self/fd/{place}", os.O_RDONLY | os.O_CLOEXEC)
            except OSError as exc:
                raise ImageError(f"cannot read image {image}: {exc.strerror}") from None
        finally:
            os.close(place)
        with os.fdopen(fd, "rb") as handle:
            try:
                if not tarfile.is_tarfile(handle):
                    raise ImageError(
                        f"image is not a root-filesystem directory or a tarball: {image} "
                        "(.tar, .tar.gz, .tar.bz2, .tar.xz)"
                    )
                digest = self._digest(handle, st)
            except OSError as exc:
                raise ImageError(f"cannot read image {image}: {exc.strerror}") from None
            return self._unpacked(handle, image, digest)

    def _unpacked(self, handle: BinaryIO, image: str, digest: str) -> Path:
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
                self._unpack(handle, image, digest, entry, rootfs)
                marker.write_text(f"{image}\n")
        except OSError as exc:
            raise ImageError(f"cannot unpack image {image}: {exc}") from None
        return rootfs

    def _unpack(self, handle: BinaryIO, image: str, digest: str, entry: Path, rootfs: Path) -> None:
        if entry.exists():
            shutil.rmtree(entry)  # an interrupted earlier unpack
        staging = entry / f"rootfs.partial-{os.getpid()}-{threading.get_ident()}"
        staging.mkdir(parents=True)
        try:
            handle.seek(0)
            hashing = _Hashing(handle)
            raw = io.BufferedReader(hashing, _CHUNK)
            stream = _decompressed(raw)
            with tarfile.open(fileobj=stream, mode="r|") as archive:
                archive.extractall(staging, filter=_rootfs_filter)
            while stream.read(_CHUNK):  # to the end: a truncated compressed file fails here
                pass
            while raw.read(_CHUNK):  # what follows counts too
                pass
            if hashing.digest.hexdigest() != digest:
                self._forget(digest)
                raise ImageError(f"image {image} changed while it was being unpacked")
            for name in MOUNT_POINTS:
                target = staging / name
                if not target.exists() and not target.is_symlink():
                    target.mkdir(mode=0o755)
            for name in HOST_FILES:
                target = staging / name
                parent = target.parent
                # never through a link: the image's ``etc`` may point anywhere on the host
                if parent.is_symlink() or not parent.is_dir():
                    continue
                if not target.exists() and not target.is_symlink():
                    target.touch()
            staging.rename(rootfs)
        except (
            tarfile.TarError,
            EOFError,
            ValueError,
            KeyError,
            lzma.LZMAError,
            zlib.error,
        ) as exc:
            shutil.rmtree(entry, ignore_errors=True)
            raise ImageError(f"bad image {image}: {exc}") from None
        except BaseException:
            shutil.rmtree(entry, ignore_errors=True)
            raise
        self.unpacked += 1
