"""The node-local dataset cache: datasets copied from shared storage, least recently used out.

The cache (:class:`DatasetCache`) is a folder with a capacity in bytes. Each dataset lives
complete in ``<dir>/<name>/``: the copy (a file or a folder, named as the source is) and a small
metadata file (:data:`META_NAME`: source, size, last use). A dataset is copied into a hidden
sibling (``.staging-…``) with the cache's stager (:mod:`fusesched.agent.dataset_staging`) and
renamed into place, so a half-copied one is never used; the index is rebuilt from the folder
when the agent starts, and hidden leftovers are removed. Least recently used datasets are
evicted to keep the total within the capacity, except those pinned by running tasks; a dataset
that cannot fit even then is read from the shared source (logged). A dataset may also be
staged ahead of a job that will probably need it. How tasks use the cache is
:mod:`fusesched.agent.task_data`.
"""

from __future__ import annotations

import contextlib
import json
import logging
import os
import queue
import shutil
import threading
import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from fusesched.agent.config import DataCacheConfig
from fusesched.agent.dataset_staging import (
    CopyStager,
    DatasetError,
    ReaderStager,
    Stager,
    make_readable,
    make_stager,
    source_path,
    tree_size,
)
from fusesched.agent.users import IdentityError, check_readable
from fusesched.api.wire import DatasetWire

log = logging.getLogger(__name__)

META_NAME = ".fusesched-dataset.json"
STAGING_PREFIX = ".staging-"
EVICTING_PREFIX = ".evicting-"


@dataclass(frozen=True, slots=True)
class DataGrant:
    """Where a task reads a dataset: its cached copy (pinned until released) or the source."""

    dataset: DatasetWire
    path: Path
    cached: bool


@dataclass
class _Entry:
    name: str
    source: str
    data: str  # the copy's name inside <dir>/<name>/
    size_bytes: int
    last_used: float
    pins: int = 0

    def meta(self) -> dict[str, object]:
        return {
            "name": self.name,
            "source": self.source,
            "data": self.data,
            "size_bytes": self.size_bytes,
            "last_used": self.last_used,
        }


class DatasetCache:
    """Datasets copied into ``root``, at most ``capacity_bytes`` in all (see the module
    docstring). Thread-safe; copies happen outside the lock."""

    def __init__(
        self,
        root: Path | str,
        capacity_bytes: int,
        stager: Stager | None = None,
        *,
        clock: Callable[[], float] = time.time,
    ) -> None:
        if capacity_bytes <= 0:
            raise DatasetError(f"cache capacity must be more than 0 bytes, not {capacity_bytes}")
        self.root = Path(root).absolute()
        self.capacity_bytes = capacity_bytes
        self.stager = stager or CopyStager()
        self._clock = clock
        self._lock = threading.Condition()
        self._entries: dict[str, _Entry] = {}
        self._staging: dict[str, int] = {}  # name -> bytes reserved while it is copied
        self._ahead: queue.Queue[DatasetWire | None] = queue.Queue()
        self._ahead_names: set[str] = set()  # queued or being staged ahead
        self._worker: threading.Thread | None = None
        self.root.mkdir(parents=True, exist_ok=True)
        self.root.chmod(0o755)
        self._rebuild()

    @classmethod
    def from_config(cls, config: DataCacheConfig, *, as_root: bool = False) -> DatasetCache:
        """``as_root``: the agent runs tasks under other uids; it then never reads a source
        itself (:class:`~fusesched.agent.dataset_staging.ReaderStager`, whatever ``stager``)."""
        stager = ReaderStager() if as_root else make_stager(config.stager)
        return cls(config.dir, config.capacity_bytes(), stager)

    # -- index ---------------------------------------------------------------------------

    def _rebuild(self) -> None:
        """Load the datasets found complete in the folder; remove hidden leftovers."""
        for item in sorted(self.root.iterdir()):
            if item.name.startswith((STAGING_PREFIX, EVICTING_PREFIX)):
                log.info("removing an incomplete dataset copy: %s", item)
                _remove(item)
                continue
            entry = _read_meta(item)
            if entry is None:
                if not item.name.startswith("."):
                    log.warning("%s is not a cached dataset; left alone", item)
                continue
            self._entries[entry.name] = entry
        if self._entries:
            log.info("dataset cache %s holds %s", self.root, ", ".join(sorted(self._entries)))
        self._evict_to(self.capacity_bytes)  # the capacity may have shrunk

    def cached(self) -> list[str]:
        """The datasets held complete."""
        with self._lock:
            return sorted(self._entries)

    def used_bytes(self) -> int:
        """Bytes held, counting those being copied in."""
        with self._lock:
            return self._used()

    def _used(self) -> int:
        return sum(e.size_bytes for e in self._entries.values()) + sum(self._staging.values())

    def path_of(self, name: str) -> Path | None:
        with self._lock:
            entry = self._entries.get(name)
            return None if entry is None else self.root / name / entry.data

    # -- acquire / release -----------------------------------------------------------------

    def acquire(self, dataset: DatasetWire) -> DataGrant:
        """Where a task reads ``dataset``: its cached copy, staged first if missing, pinned
        until :meth:`release`; the shared source when it cannot fit. Raises
        :class:`DatasetError` (a missing source, a failed copy)."""
        return self._get(dataset, pin=True)

    def release(self, grant: DataGrant) -> None:
        """A task is done with ``grant``: its dataset may be evicted again."""
        if not grant.cached:
            return
        with self._lock:
            entry = self._entries.get(grant.dataset.name)
            if entry is not None and entry.pins > 0:
                entry.pins -= 1
                self._touch(entry)

    def _get(self, dataset: DatasetWire, *, pin: bool) -> DataGrant:
        name = dataset.name
        source = source_path(dataset)
        while True:
            with self._lock:
                while name in self._staging:
                    self._lock.wait()
                hit = self._hit(dataset, pin)
                if hit is not None:
                    return hit
            if not source.exists():
                raise DatasetError(f"dataset {name}: source {dataset.source} not found")
            if not self._readable_by_all(dataset, source):
                return DataGrant(dataset, source, cached=False)
            try:
                if isinstance(self.stager, ReaderStager):
                    size = self.stager.size(source)  # root does not walk the source either
                else:
                    size = tree_size(source)
            except OSError as exc:
                raise DatasetError(f"dataset {name}: cannot read {dataset.source}: {exc}") from None
            with self._lock:
                if name in self._staging:
                    continue  # another thread is staging it: wait for that copy
                hit = self._hit(dataset, pin)
                if hit is not None:
                    return hit  # another thread staged it meanwhile
                if not self._make_room(name, size):
                    log.warning(
                        "dataset %s (%d bytes) does not fit in the cache %s (%d of %d bytes "
                        "pinned); the task reads the shared source %s",
                        name, size, self.root, self._pinned(), self.capacity_bytes, source,
                    )  # fmt: skip
                    return DataGrant(dataset, source, cached=False)
                self._staging[name] = size
            return self._stage(dataset, source, size, pin)

    def _readable_by_all(self, dataset: DatasetWire, source: Path) -> bool:
        """With a :class:`ReaderStager`, whether its reader may read all of ``source``: the
        copies are readable by every user, so only what every user may read is copied (a
        task whose own user may read the rest reads it at its shared source)."""
        if not isinstance(self.stager, ReaderStager):
            return True
        try:
            check_readable(source, self.stager.reader)
        except IdentityError as exc:
            log.info("dataset %s is not cached (not readable by every user): %s", dataset.name, exc)
            return False
        return True

    def _hit(self, dataset: DatasetWire, pin: bool) -> DataGrant | None:
        """The cached copy of ``dataset`` (pinned), if held from the same source; a copy from
        another source is dropped when nothing uses it, else the shared source is used."""
        entry = self._entries.get(dataset.name)
        if entry is None:
            return None
        if entry.source != dataset.source:
            if entry.pins:
                log.warning(
                    "dataset %s: the cache holds it from %s (in use); reading %s directly",
                    dataset.name, entry.source, dataset.source,
                )  # fmt: skip
                return DataGrant(dataset, source_path(dataset), cached=False)
            self._evict(entry)
            return None
        if pin:
            entry.pins += 1
        self._touch(entry)
        return DataGrant(dataset, self.root / entry.name / entry.data, cached=True)

    def _stage(self, dataset: DatasetWire, source: Path, size: int, pin: bool) -> DataGrant:
        name = dataset.name
        data = source.name or "data"
        temp = self.root / f"{STAGING_PREFIX}{name}-{uuid.uuid4().hex[:8]}"
        started = time.monotonic()
        try:
            temp.mkdir()
            self.stager.stage(source, temp / data)
            make_readable(temp)
            size = tree_size(temp / data)
            entry = _Entry(name, dataset.source, data, size, self._clock(), pins=1 if pin else 0)
            _write_meta(temp, entry)
            os.rename(temp, self.root / name)
        except Exception as exc:
            _remove(temp)
            with self._lock:
                del self._staging[name]
                self._lock.notify_all()
            if isinstance(exc, FileNotFoundError) and not source.exists():
                raise DatasetError(f"dataset {name}: source {dataset.source} not found") from None
            raise DatasetError(f"dataset {name}: staging {dataset.source} failed: {exc}") from None
        with self._lock:
            del self._staging[name]
            self._entries[name] = entry
            self._lock.notify_all()
        log.info(
            "dataset %s staged into %s with %s (%d bytes, %.2f s)",
            name, self.root, self.stager.name, size, time.monotonic() - started,
        )  # fmt: skip
        return DataGrant(dataset, self.root / name / data, cached=True)

    # -- eviction --------------------------------------------------------------------------

    def _pinned(self) -> int:
        return sum(e.size_bytes for e in self._entries.values() if e.pins)

    def _make_room(self, name: str, size: int) -> bool:
        """Evict least recently used unpinned datasets until ``size`` more bytes fit; False
        (evicting nothing) when they cannot fit even then."""
        if self._pinned() + sum(self._staging.values()) + size > self.capacity_bytes:
            return False
        self._evict_to(self.capacity_bytes - size)
        return True

    def _evict_to(self, limit: int) -> None:
        for entry in sorted(self._entries.values(), key=lambda e: e.last_used):
            if self._used() <= limit:
                return
            if not entry.pins:
                self._evict(entry)

    def _evict(self, entry: _Entry) -> None:
        del self._entries[entry.name]
        doomed = self.root / f"{EVICTING_PREFIX}{entry.name}-{uuid.uuid4().hex[:8]}"
        try:
            os.rename(self.root / entry.name, doomed)
        except OSError as exc:
            log.warning("cannot evict dataset %s: %s", entry.name, exc)
            return
        log.info("dataset %s evicted from %s (%d bytes)", entry.name, self.root, entry.size_bytes)
        threading.Thread(target=_remove, args=(doomed,), daemon=True).start()

    def _touch(self, entry: _Entry) -> None:
        entry.last_used = max(self._clock(), entry.last_used)
        try:
            _write_meta(self.root / entry.name, entry)
        except OSError as exc:  # the index in memory stays right; a restart forgets the use
            log.warning("cannot record the use of dataset %s: %s", entry.name, exc)

    # -- staging ahead ---------------------------------------------------------------------

    def stage_ahead(self, dataset: DatasetWire) -> bool:
        """Copy ``dataset`` in the background (one at a time) ahead of a job that will
        probably need it; False when it is already cached, queued or being copied."""
        with self._lock:
            entry = self._entries.get(dataset.name)
            held = entry is not None and entry.source == dataset.source
            if held or dataset.name in self._ahead_names or dataset.name in self._staging:
                return False
            self._ahead_names.add(dataset.name)
            if self._worker is None:
                self._worker = threading.Thread(
                    target=self._stage_ahead_loop, name="dataset-stager", daemon=True
                )
                self._worker.start()
        self._ahead.put(dataset)
        return True

    def _stage_ahead_loop(self) -> None:
        while (dataset := self._ahead.get()) is not None:
            try:
                self._get(dataset, pin=False)
            except DatasetError as exc:
                log.warning("staging ahead failed: %s", exc)
            except Exception:  # never out of the worker
                log.exception("staging dataset %s ahead failed", dataset.name)
            finally:
                with self._lock:
                    self._ahead_names.discard(dataset.name)

    def idle(self) -> bool:
        """Nothing is queued or being copied (tests wait for this)."""
        with self._lock:
            return not self._ahead_names and not self._staging

    def close(self) -> None:
        """Stop the stage-ahead worker after the copy under way (if any)."""
        worker = self._worker
        if worker is not None:
            self._ahead.put(None)
            worker.join(timeout=1.0)
            self._worker = None


def _remove(path: Path) -> None:
    if path.is_dir() and not path.is_symlink():
        shutil.rmtree(path, ignore_errors=True)
    else:
        with contextlib.suppress(OSError):
            path.unlink()


def _write_meta(folder: Path, entry: _Entry) -> None:
    temp = folder / f"{META_NAME}.tmp"
    temp.write_text(json.dumps(entry.meta()), encoding="utf-8")
    temp.chmod(0o644)
    os.replace(temp, folder / META_NAME)


def _read_meta(folder: Path) -> _Entry | None:
    try:
        meta = json.loads((folder / META_NAME).read_text(encoding="utf-8"))
        entry = _Entry(
            name=str(meta["name"]),
            source=str(meta["source"]),
            data=str(meta["data"]),
            size_bytes=int(meta["size_bytes"]),
            last_used=float(meta["last_used"]),
        )
    except (OSError, ValueError, KeyError, TypeError):
        return None
    if entry.name != folder.name or not (folder / entry.data).exists():
        return None
    return entry
