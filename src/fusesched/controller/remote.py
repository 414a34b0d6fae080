"""External clusters (Slurm, Kubernetes) as pools of the live controller.

Each external pool has a :class:`RemotePool`: a worker thread that owns the pool's
:class:`~fusesched.backends.base.Backend` and talks to the cluster, so that a slow or dead
cluster never holds the controller's lock. The worker

* lists the cluster's nodes every ``nodes_s`` and hands them to the controller, which shows
  them to the scheduling core as nodes named ``<pool>:<node>`` and labelled with the pool;
* submits the jobs the core started on those nodes and cancels the ones it stops;
* polls the states of the jobs it submitted every ``poll_s``, copies their output into the
  controller's log store, and reports every change.

Everything the worker learns reaches the controller through :meth:`Controller.remote_update`
(one call, under the lock) as :class:`Update` records. The one state model: a job the cluster
accepted is *running* for fusesched (its nodes are booked); the cluster's own queueing shows
as the job's reason (``pending in slurm``) until it starts, and the job's start time (what
usage is charged from) is the cluster's.

Nothing is lost: a job the cluster refuses fails with the cluster's reason; a job that cannot
be handed over because the cluster is unreachable goes back to the queue (and the pool's nodes
are marked down until the cluster answers again); a job the cluster forgets without a final
record is requeued.
"""

from __future__ import annotations

import logging
import queue
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field

from fusesched.backends.base import (
    Backend,
    BackendError,
    BackendRejected,
    BackendUnavailable,
    RemoteJob,
    RemoteNode,
    RemoteState,
    RemoteStatus,
)

log = logging.getLogger("fusesched.controller.remote")

#: polls in a row a submitted job may be missing from the cluster's answer before it is LOST
MISSING_POLLS = 3


@dataclass(frozen=True, slots=True)
class Update:
    """Something the worker learned, for the controller to apply under its lock.

    ``kind``: ``submitted`` (``external_id``), ``status`` (``status``), ``logs`` (``data``:
    stream name → whole contents), ``failed`` (``reason``, ``requeue``), ``nodes``
    (``nodes``), ``down`` (``reason``: the cluster cannot be reached).
    """

    kind: str
    pool: str
    task_id: str = ""
    external_id: str = ""
    status: RemoteStatus | None = None
    data: dict[str, bytes] = field(default_factory=dict)
    reason: str = ""
    requeue: bool = False
    nodes: tuple[RemoteNode, ...] = ()


@dataclass(slots=True)
class _Run:
    job: RemoteJob
    external_id: str | None = None
    missing: int = 0
    cancel: bool = False
    done: bool = False
    log_sizes: dict[str, int] = field(default_factory=dict)
    last: RemoteStatus | None = None  # the last status reported (only changes are)


class RemotePool:
    """One external cluster's worker (see the module docstring)."""

    def __init__(
        self,
        name: str,
        backend: Backend,
        deliver: Callable[[list[Update]], None],
        poll_s: float = 1.0,
        nodes_s: float = 15.0,
    ) -> None:
        self.name = name
        self.backend = backend
        self.deliver = deliver
        self.poll_s = poll_s
        self.nodes_s = nodes_s
        self._commands: queue.Queue[tuple[str, str, RemoteJob | None]] = queue.Queue()
        self._runs: dict[str, _Run] = {}  # task id -> run (touched by the worker only)
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._nodes_at = 0.0
        self._poll_at = 0.0
        self._retry: set[str] = set()  # cancels waiting for the cluster to answer
        self.reachable = True

    # ------------------------------------------------------------------ controller side

    def start(self) -> None:
        self._thread = threading.Thread(target=self._loop, name=f"pool-{self.name}", daemon=True)
        self._thread.start()

    def stop(self) -> None:
        self._stop.set()
        self._commands.put(("wake", "", None))
        if self._thread is not None:
            self._thread.join(timeout=5)

    def submit(self, task_id: str, job: RemoteJob) -> None:
        self._commands.put(("submit", task_id, job))

    def cancel(self, task_id: str) -> None:
        self._commands.put(("cancel", task_id, None))

    def adopt(self, task_id: str, job: RemoteJob, external_id: str) -> None:
        """Follow a job submitted before a controller restart."""
        self._commands.put(("adopt:" + external_id, task_id, job))

    def refresh_nodes(self) -> None:
        self._nodes_at = 0.0
        self._commands.put(("wake", "", None))

    # ------------------------------------------------------------------ worker

    def _loop(self) -> None:
        while not self._stop.is_set():
            updates: list[Update] = []
            try:
                self._work(updates)
            except Exception:  # a bug in one back end must not end the pool's thread
                log.exception("pool %s: worker step failed", self.name)
            if updates:
                self.deliver(updates)
            try:
                command = self._commands.get(timeout=self.poll_s)
            except queue.Empty:
                continue
            self._commands.put(command)  # handled by the next step, with any others

    def _work(self, updates: list[Update]) -> None:
        now = time.monotonic()
        if now - self._nodes_at >= self.nodes_s:
            self._nodes_at = now
            self._list_nodes(updates)
        while True:
            try:
                kind, task_id, job = self._commands.get_nowait()
            except queue.Empty:
                break
            if kind == "submit" and job is not None:
                self._submit(task_id, job, updates)
            elif kind == "cancel" and not self._cancel(task_id):
                self._retry.add(task_id)  # the cluster is out of reach: at the next poll
            elif kind.startswith("adopt:") and job is not None:
                self._runs[task_id] = _Run(job, external_id=kind.split(":", 1)[1])
        if now - self._poll_at >= self.poll_s:
            self._poll_at = now
            retry, self._retry = self._retry, set()
            self._retry = {task_id for task_id in sorted(retry) if not self._cancel(task_id)}
            self._poll(updates)

    def _list_nodes(self, updates: list[Update]) -> None:
        try:
            nodes = tuple(self.backend.nodes())
        except BackendError as exc:
            self._unreachable(str(exc), updates)
            return
        self.reachable = True
        updates.append(Update("nodes", self.name, nodes=nodes))

    def _unreachable(self, reason: str, updates: list[Update]) -> None:
        if self.reachable:
            log.warning("pool %s unreachable: %s", self.name, reason)
        self.reachable = False
        self._nodes_at = time.monotonic() - self.nodes_s + min(self.nodes_s, 5.0)
        updates.append(Update("down", self.name, reason=reason))

    def _submit(self, task_id: str, job: RemoteJob, updates: list[Update]) -> None:
        try:
            external = self.backend.submit(job)
        except BackendError as exc:
            self._not_submitted(task_id, exc, updates)
            return
        except Exception as exc:  # a bug must not leave the job handed over to nobody
            log.exception("pool %s: submitting %s failed", self.name, task_id)
            self._not_submitted(task_id, BackendUnavailable(f"internal error: {exc!r}"), updates)
            return
        self._runs[task_id] = _Run(job, external_id=external)
        # at once, not with the rest of the step: a controller crash must find it recorded
        self.deliver([Update("submitted", self.name, task_id, external_id=external)])

    def _not_submitted(self, task_id: str, exc: BackendError, updates: list[Update]) -> None:
        """A refusal fails the job with the cluster's reason; anything else (the cluster or
        its shared folder out of reach) puts it back in the queue."""
        if isinstance(exc, BackendRejected):
            reason = f"{self.name} rejected the job: {exc}"
            updates.append(Update("failed", self.name, task_id, reason=reason))
            return
        reason = f"{self.name} unreachable at submission: {exc}"
        updates.append(Update("failed", self.name, task_id, reason=reason, requeue=True))
        self._unreachable(str(exc), updates)

    def _cancel(self, task_id: str) -> bool:
        """Cancel a run; False when the cluster cannot be reached (try again later)."""
        run = self._runs.get(task_id)
        if run is None or run.external_id is None or run.done:
            return True
        try:
            self.backend.cancel(run.external_id)
        except BackendUnavailable:
            return False
        except BackendRejected as exc:
            log.warning("pool %s: cancelling %s: %s", self.name, run.external_id, exc)
        run.cancel = True
        return True

    def _poll(self, updates: list[Update]) -> None:
        live = {t: r for t, r in self._runs.items() if not r.done and r.external_id}
        if not live:
            return
        ids = [r.external_id for r in live.values() if r.external_id is not None]
        try:
            statuses = {s.external_id: s for s in self.backend.poll(ids)}
        except BackendError as exc:
            self._unreachable(str(exc), updates)
            return
        for task_id, run in live.items():
            status = statuses.get(run.external_id or "")
            if status is None:
                run.missing += 1
                if run.missing < MISSING_POLLS:
                    continue
                status = RemoteStatus(
                    run.external_id or "",
                    RemoteState.LOST,
                    reason=f"{self.name} no longer knows job {run.external_id}",
                )
            run.missing = 0
            self._copy_logs(task_id, run, updates)
            if status != run.last:
                run.last = status
                updates.append(Update("status", self.name, task_id, status=status))
            if status.state.terminal:
                run.done = True
                self._release(run.external_id or "")
        for task_id in [t for t, r in self._runs.items() if r.done]:
            del self._runs[task_id]

    def _release(self, external_id: str) -> None:
        try:
            self.backend.release(external_id)
        except BackendError as exc:  # the cluster keeps its record a little longer: harmless
            log.info("pool %s: releasing %s: %s", self.name, external_id, exc)

    def _copy_logs(self, task_id: str, run: _Run, updates: list[Update]) -> None:
        if run.external_id is None:
            return
        try:
            data = dict(self.backend.logs(run.external_id, run.job))
        except BackendError as exc:
            log.info("pool %s: logs of %s: %s", self.name, run.external_id, exc)
            return
        changed = {k: v for k, v in data.items() if run.log_sizes.get(k) != len(v)}
        if changed:
            run.log_sizes.update({k: len(v) for k, v in changed.items()})
            updates.append(Update("logs", self.name, task_id, data=data))
