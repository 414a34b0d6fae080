"""How a task gets its datasets: prepared per launch, held while it runs, shown to it.

A job may declare datasets it reads (a name, a source on shared storage, a size). The agent
gives each task ``$FUSESCHED_DATA_<NAME>``: a copy in its node-local cache
(:mod:`fusesched.agent.datasets`) when it has one (staged first if missing), else the shared
source itself. :class:`TaskData` prepares the datasets of each launch in a background thread, so
a copy never holds up the agent's loop; the runtime starts the task when they are ready.
:func:`task_view` is what the task sees of them (its variables and, in a container, its
read-only mounts).
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

from fusesched.agent.containers import Bind
from fusesched.agent.dataset_staging import DatasetError, source_path
from fusesched.agent.datasets import DataGrant, DatasetCache
from fusesched.agent.users import Identity, IdentityError, check_reachable, check_readable
from fusesched.api.wire import DatasetWire, TaskLaunch
from fusesched.model.job import Dataset

log = logging.getLogger(__name__)

#: Where a container task sees its datasets (under the container's private /tmp).
DATA_IN_CONTAINER = "/tmp/fusesched-data"


def env_name(dataset: DatasetWire) -> str:
    """``FUSESCHED_DATA_<NAME>``; the name is checked as a job's dataset names are."""
    try:
        return Dataset(dataset.name, dataset.source, max(dataset.size_bytes, 0)).env_name
    except ValueError as exc:
        raise DatasetError(str(exc)) from None


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

    def __init__(
        self,
        cache: DatasetCache | None,
        identities: Callable[[str], Identity] | None = None,
    ) -> None:
        self.cache = cache
        self.identities = identities  # job user -> who its tasks run as; None: the agent
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
            who = None
            if self.identities is not None and prep.launch.datasets:
                try:
                    who = self.identities(prep.launch.user)
                except IdentityError as exc:
                    raise DatasetError(str(exc)) from None
            for dataset in prep.launch.datasets:
                env_name(dataset)
                if who is not None:
                    may_read(dataset, who)  # before root copies it anywhere
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

    def set_walltime(self, task_id: str, walltime_s: float) -> None:
        """A launch still being prepared starts with this time limit (nothing when it is
        not being prepared)."""
        with self._lock:
            prep = self._preparing.get(task_id)
            if prep is not None:
                prep.launch = prep.launch.model_copy(update={"walltime_s": walltime_s})

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


def may_read(dataset: DatasetWire, who: Identity) -> None:
    """Raise :class:`DatasetError` unless ``who`` may read all of ``dataset``'s source: the
    agent copies it as root, so it must never hand a task what its user could not read."""
    try:
        check_readable(source_path(dataset), who)
    except IdentityError as exc:
        if "No such file or directory" in str(exc):  # as the user itself would see it
            missing = f"dataset {dataset.name}: source {dataset.source} not found"
            raise DatasetError(missing) from None
        raise DatasetError(f"dataset {dataset.name}: {exc}") from None


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
