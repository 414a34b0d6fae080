"""The jobs a restarted controller knows that the core does not hold yet, and who must wait
behind them.

After a restart the core gets the recovered jobs late: the waiting ones once the nodes are
back (``ctl.held``), then only once the nodes back can hold them (``ctl.waiting``), the
running ones once adopted. A job whose dependency names one of those (itself, its array, an
array of theirs, or an earlier namesake of a ``singleton``) would find it unknown in the core
and be cancelled, so it waits behind it, outside the core (:func:`hold_back`); a job whose
dependencies the core can settle goes to it at once (controller/recovery.py).

An :class:`Unsubmitted` counts keys, not events, so that a batch of submissions handed over
in order reads each one's dependencies in constant time (a recovery may hand over thousands).
"""

from __future__ import annotations

import heapq
from collections import Counter
from collections.abc import Iterable, Sequence
from typing import TYPE_CHECKING

from fusesched.model.events import ArrayRecalled, Event, JobSubmitted
from fusesched.model.job import DependencyKind, JobSpec

if TYPE_CHECKING:
    from fusesched.controller.service import Controller

#: ("job", id): that job (or a whole array submitted as one); ("array", id): a member of
#: array ``id``, or what ended of it before the restart
Key = tuple[str, str]


def spec_keys(spec: JobSpec) -> list[Key]:
    """The keys under which a job (an array submitted as one) answers the dependencies."""
    if spec.array_parent:
        return [("job", spec.id), ("array", spec.array_parent)]
    return [("job", spec.id)]


class _Seqs:
    """The job numbers of a name's jobs waiting here, the first at hand: a ``singleton``
    waits only on earlier ones (in the order the core would have taken them, as it does), so
    namesakes submitted together (an array's members) go one after the other, not each
    behind the others for ever. Removed numbers leave the heap lazily."""

    def __init__(self) -> None:
        self.counts: Counter[int] = Counter()
        self.heap: list[int] = []

    def count(self, seq: int, n: int) -> None:
        self.counts[seq] += n
        if n > 0 and self.counts[seq] == n:
            heapq.heappush(self.heap, seq)

    def first(self) -> int | None:
        heap = self.heap
        while heap and self.counts[heap[0]] <= 0:
            heapq.heappop(heap)
        return heap[0] if heap else None


class Unsubmitted:
    """The jobs known to the controller that the core does not hold yet: the submissions of
    ``events`` and, while the jobs left running wait for their nodes (``adopt_until``),
    those (after it, only a job a dependency names is looked up: one an external cluster
    runs may wait for its answer longer)."""

    def __init__(self, ctl: Controller, events: Iterable[Event]) -> None:
        self.ctl = ctl
        self.keys: Counter[Key] = Counter()
        self.named: dict[tuple[str, str], _Seqs] = {}  # (name, user) -> their numbers
        for event in events:
            self.add(event)
        if ctl.adopt_until:
            for live in ctl.jobs.values():
                if live.adopting:
                    self._count(live.spec, 1)

    def add(self, event: Event) -> None:
        self._count(event, 1)

    def remove(self, event: Event) -> None:
        self._count(event, -1)

    def _count(self, what: Event | JobSpec, n: int) -> None:
        if isinstance(what, ArrayRecalled):
            self.keys[("array", what.array_id)] += n
            return
        spec = what.job if isinstance(what, JobSubmitted) else what
        if not isinstance(spec, JobSpec):
            return
        for key in spec_keys(spec):
            self.keys[key] += n
        if spec.name:
            self.named.setdefault((spec.name, spec.user), _Seqs()).count(self._seq(spec), n)

    def _seq(self, spec: JobSpec) -> int:
        """The job number of ``spec`` (of an array submitted as one: its first member's);
        -1 for a job no live record holds (it waits on nothing, and before all else)."""
        live = self.ctl.jobs.get(spec.id)
        if live is None and spec.array is not None and spec.array_index is None:
            live = self.ctl.jobs.get(f"{spec.id}_{spec.array.indices[0]}")
        return live.seq if live is not None else -1

    def _has(self, key: Key) -> bool:
        return self.keys[key] > 0

    def _namesake(self, spec: JobSpec) -> bool:
        """Whether a job of ``spec``'s name and user submitted before it waits here."""
        seqs = self.named.get((spec.name, spec.user))
        first = seqs.first() if seqs is not None else None
        return first is not None and first < self._seq(spec)

    def waits_for(self, spec: JobSpec) -> str | None:
        """The job a dependency of ``spec`` names that the core does not hold yet (``""``
        for an earlier namesake of a ``singleton``), or ``None`` when there is none."""
        for dep in spec.dependencies:
            if dep.kind is DependencyKind.SINGLETON:
                if spec.name and self._namesake(spec):
                    return ""
                continue
            target = dep.job_id
            live = self.ctl.jobs.get(target)
            if live is not None and live.adopting:
                return target
            parent = live.spec.array_parent if live is not None else None
            if self._has(("job", target)) or self._has(("array", target)):
                return target
            if parent and self._has(("job", parent)):  # (an array submitted as one)
                return target
        return None


def submitted_ids(events: Iterable[Event]) -> set[str]:
    """The ids of the jobs (of the arrays submitted as one) ``events`` submit."""
    return {event.job.id for event in events if isinstance(event, JobSubmitted)}


def reason(target: str) -> str:
    """What a job waiting outside the core for ``target`` (:meth:`Unsubmitted.waits_for`)
    waits for, as the core says of a job waiting on its dependencies."""
    return f"Dependency: job {target}" if target else "Dependency"


def hold_back(
    ctl: Controller, pending: Unsubmitted, events: Sequence[Event], job_ids: list[str], target: str
) -> None:
    """A new job (``job_ids``: its array's members) waits behind ``target``, outside the
    core, with ``events`` (its submission, after what the core must know first). It shows
    ``Dependency`` meanwhile, unless held (a reason the core replaces once it explains the
    job, cleared when it starts: ``Persistence.recovered_wait``)."""
    ctl.waiting.extend(events)
    for event in events:
        pending.add(event)
    why = reason(target)
    for job_id in job_ids:
        if ctl.jobs[job_id].hold is None:
            ctl.persist.job_reason(job_id, why)
            ctl.persist.recovered_wait(job_id)
