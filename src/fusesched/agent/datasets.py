"""The node-local dataset cache, and how a task gets its datasets.

A job may declare datasets it reads (a name, a source on shared storage, a size). The agent
gives each task ``$FUSESCHED_DATA_<NAME>``: a copy in its node-local cache when it has one
(staged first if missing), else the shared source itself.

The cache (:class:`DatasetCache`) is a folder with a capacity in bytes. Each dataset lives
complete in ``<dir>/<name>/``: the copy (a file or a folder, named as the source is) and a small
metadata file (:data:`META_NAME`: source, size, last use). A dataset is copied into a hidden
sibling (``.staging-…``) and renamed into place, so a half-copied one is never used; the index
is rebuilt from the folder when the agent starts, and hidden leftovers are removed. Least
recently used datasets are evicted to keep the total within the capacity, except those pinned
by running tasks; a dataset that cannot fit even then is read from the shared source (logged).

Copying is pluggable (:class:`Stager`): ``copy`` (Python's shutil) and ``rsync``. Sources are
absolute paths or ``file://`` URIs. The cached copy is readable (not writable) by every user,
as tasks run under unprivileged per-user uids.

:class:`TaskData` prepares the datasets of each launch in a background thread, so a copy never
holds up the agent's loop; the runtime starts the task when they are ready.
"""

from __future__ import annotations

import contextlib
import json
import logging
import os
import queue
import shutil
import stat
import subprocess
import threading
import time
import uuid
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Protocol

from fusesched.agent.config import DataCacheConfig
from fusesched.agent.containers import Bind
from fusesched.agent.users import Identity, IdentityError, check_reachable
from fusesched.api.wire import DatasetWire, TaskLaunch
from fusesched.model.job import Dataset

log = logging.getLogger(__name__)

META_NAME = ".fusesched-dataset.json"
STAGING_PREFIX = ".staging-"
EVICTING_PREFIX = ".evicting-"
#: Where a container task sees its datasets (under the container's private /tmp).
DATA_IN_CONTAINER = "/tmp/fusesched-data"


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


def env_name(dataset: DatasetWire) -> str:
    """``FUSESCHED_DATA_<NAME>``; the name is checked as a job's dataset names are."""
    try:
        return Dataset(dataset.name, dataset.source, max(dataset.size_bytes, 0)).env_name
    except ValueError as exc:
        raise DatasetError(str(exc)) from None


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


# -- stagers -------------------------------------------------------------------------------


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


# -- the cache -----------------------------------------------------------------------------


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
    def from_config(cls, config: DataCacheConfig) -> DatasetCache:
        return cls(config.dir, config.capacity_bytes(), make_stager(config.stager))

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
            try:
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


# -- tasks ---------------------------------------------------------------------------------


@dataclass
class _Preparing:
    launch: TaskLaunch
    grants: list[DataGrant] = field(default_factory=list)
    failure: str | None = None
    done: bool = False
    cancelled: bool = False


class TaskData:
    """The datasets of each task: prepared in a background thread per launch (when a cache
    must stage), held while the task runs, released when it ends. Thread-safe."""

    def __init__(self, cache: DatasetCache | None) -> None:
        self.cache = cache
        self._lock = threading.Lock()
        self._preparing: dict[str, _Preparing] = {}
        self._held: dict[str, list[DataGrant]] = {}

    def begin(self, launch: TaskLaunch) -> None:
        """Start preparing ``launch``'s datasets; :meth:`ready` hands them over when done."""
        prep = _Preparing(launch)
        with self._lock:
            self._preparing[launch.task_id] = prep
        if self.cache is None:  # the shared sources: nothing to copy, nothing to wait for
            self._prepare(prep)
            return
        threading.Thread(
            target=self._prepare, args=(prep,), name=f"data-{launch.task_id}", daemon=True
        ).start()

    def _prepare(self, prep: _Preparing) -> None:
        grants: list[DataGrant] = []
        failure = None
        try:
            for dataset in prep.launch.datasets:
                env_name(dataset)
                grants.append(self._grant(dataset))
        except DatasetError as exc:
            failure = str(exc)
        except Exception as exc:  # never out of the thread: the task must hear why
            log.exception("preparing the datasets of task %s failed", prep.launch.task_id)
            failure = f"datasets: internal error: {exc!r}"
        with self._lock:
            prep.grants, prep.failure, prep.done = grants, failure, True
            cancelled = prep.cancelled
        if failure is not None or cancelled:
            self._release_all(grants)

    def _grant(self, dataset: DatasetWire) -> DataGrant:
        if self.cache is not None:
            return self.cache.acquire(dataset)
        source = source_path(dataset)
        if not source.exists():
            raise DatasetError(f"dataset {dataset.name}: source {dataset.source} not found")
        return DataGrant(dataset, source, cached=False)

    def ready(self) -> list[tuple[TaskLaunch, list[DataGrant] | str]]:
        """Launches whose datasets are ready (held until :meth:`release`) or failed (why)."""
        out: list[tuple[TaskLaunch, list[DataGrant] | str]] = []
        with self._lock:
            for task_id, prep in list(self._preparing.items()):
                if not prep.done:
                    continue
                del self._preparing[task_id]
                if prep.failure is not None:
                    out.append((prep.launch, prep.failure))
                else:
                    self._held[task_id] = prep.grants
                    out.append((prep.launch, prep.grants))
        return out

    def preparing(self) -> list[TaskLaunch]:
        with self._lock:
            return [p.launch for p in self._preparing.values()]

    def is_preparing(self, task_id: str) -> bool:
        with self._lock:
            return task_id in self._preparing

    def cancel(self, task_id: str) -> bool:
        """Forget a launch still being prepared (its copy goes on, into the cache); False
        when it is not being prepared."""
        with self._lock:
            prep = self._preparing.pop(task_id, None)
            if prep is None:
                return False
            prep.cancelled = True
            grants = prep.grants if prep.done and prep.failure is None else []
        self._release_all(grants)
        return True

    def release(self, task_id: str) -> None:
        """The task ended (or failed to start): its cached datasets may be evicted again."""
        with self._lock:
            grants = self._held.pop(task_id, [])
        self._release_all(grants)

    def _release_all(self, grants: Sequence[DataGrant]) -> None:
        if self.cache is not None:
            for grant in grants:
                self.cache.release(grant)


def task_view(
    grants: Sequence[DataGrant], *, container: bool, who: Identity | None
) -> tuple[dict[str, str], list[Bind]]:
    """The task's ``FUSESCHED_DATA_<NAME>`` variables and, in a container, the read-only
    binds that show it its datasets under :data:`DATA_IN_CONTAINER`. Raises
    :class:`DatasetError` when the task's user cannot reach one."""
    env: dict[str, str] = {}
    binds: list[Bind] = []
    for grant in grants:
        name = grant.dataset.name
        if who is not None:
            try:
                check_reachable(grant.path, who)
            except IdentityError as exc:
                raise DatasetError(f"dataset {name}: {exc}") from None
        path = str(grant.path)
        if container:
            path = f"{DATA_IN_CONTAINER}/{name}/{grant.path.name or 'data'}"
            binds.append(Bind(grant.path, path, read_only=True))
        env[env_name(grant.dataset)] = path
    return env, binds
