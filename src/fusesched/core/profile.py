"""Free resources over future time, for conservative backfilling: :class:`Profile` (node by
node: the free matrix between one running job's estimated end and the next, with advance
reservations and licenses) and :class:`SumProfile` (the cluster's sums alone, when no job is
pinned to nodes). :func:`fusesched.core.backfill.conservative` reserves every waiting job a
slot in them."""

from __future__ import annotations

import bisect
from typing import TYPE_CHECKING

import numpy as np

from fusesched.core import completing, reservations
from fusesched.core.cluster import IntArray

if TYPE_CHECKING:
    from fusesched.core.placement import Plan
    from fusesched.core.records import JobRecord
    from fusesched.core.scheduler import SchedulerCore
    from fusesched.model.licenses import Licenses

#: A job that overran its estimate is assumed to end this long after "now".
OVERRUN_GRACE_S = 1e-6


class Profile:
    """Free resources over future time: ``frees[i]`` holds during ``[times[i], times[i+1])``."""

    def __init__(self, core: SchedulerCore, now: float, licensed: bool = False) -> None:
        self.core = core
        self.times: list[float] = [now]
        self.frees: list[IntArray] = [core.cluster.free.copy()]
        run = core.running.view()
        current = self.frees[0]
        for end, alloc in zip(run.ends.tolist(), run.allocations(0, len(run)), strict=True):
            t = end if end > now else now + OVERRUN_GRACE_S
            if t != self.times[-1]:
                current = current.copy()
                self.times.append(t)
                self.frees.append(current)
            np.add.at(current, alloc.nodes, alloc.amounts)
        # ``licensed`` (licenses are held or asked for): free licenses per breakpoint (they
        # come back at the running jobs' ends, which are breakpoints already)
        pool = core.licenses
        self.licenses = pool.profile(core, self.times, now) if licensed and pool else None
        if core.completing:  # what ended runs hold: free within a kill's grace, as overrun
            rows, amounts = completing.held_rows(core)
            for free in self.frees[self._split(now + OVERRUN_GRACE_S) :]:
                np.add.at(free, rows, amounts)
        self.booked = core.bookings is not None
        if self.booked:  # a job may gain nodes at a reservation's end: try it then too
            for t in reservations.stops(core, now):
                self._split(t)

    def _split(self, t: float) -> int:
        """Make ``t`` a breakpoint; return its index."""
        i = int(np.searchsorted(self.times, t, side="right")) - 1
        if self.times[i] == t:
            return i
        self.times.insert(i + 1, t)
        self.frees.insert(i + 1, self.frees[i].copy())
        if self.licenses is not None:
            self.licenses.insert(i + 1, dict(self.licenses[i]))
        return i + 1

    def _licensed(self, i: int, j: int, wanted: Licenses) -> bool:
        """Whether ``wanted`` is free all through breakpoints ``i`` to ``j - 1``."""
        assert self.licenses is not None
        counts = self.licenses[i:j] if j > i else self.licenses[i : i + 1]
        return all(c.get(n, 0) >= k for c in counts for n, k in wanted)

    def earliest(self, rec: JobRecord) -> tuple[int, Plan] | None:
        wanted = rec.spec.licenses if self.licenses is not None else ()
        for i, start in enumerate(self.times):
            end = start + rec.estimate
            j = int(np.searchsorted(self.times, end, side="left"))
            if wanted and not self._licensed(i, j, wanted):
                continue
            window = self.frees[i:j] if j > i else self.frees[i : i + 1]
            avail = np.minimum.reduce(window) if len(window) > 1 else window[0]
            if self.booked:
                plan = reservations.plan_at(self.core, rec, avail, start)
            else:
                plan = self.core.plan(rec, avail)
            if plan is not None:
                return i, plan
        return None

    def reserve(
        self, start: float, end: float, nodes: IntArray, amounts: IntArray, licenses: Licenses = ()
    ) -> None:
        first = self._split(start)
        stop = self._split(end)
        for i in range(first, stop):
            np.subtract.at(self.frees[i], nodes, amounts)
        if licenses and self.licenses is not None:
            for counts in self.licenses[first:stop]:
                for name, k in licenses:
                    counts[name] = counts.get(name, 0) - k


class SumProfile:
    """The free amount of one resource column over future time, for when every job involved
    is fluid in that column (its fit is decided by sums, see ``SchedulerCore.fluid_column``):
    the same reservations as :class:`Profile`, on numbers instead of per-node matrices."""

    def __init__(self, core: SchedulerCore, now: float, col: int) -> None:
        self.times: list[float] = [now]
        self.frees: list[int] = [core.cluster.free_sums[col]]
        run = core.running.view()
        released = run.column(col).tolist()
        for k, end in enumerate(run.ends.tolist()):
            t = end if end > now else now + OVERRUN_GRACE_S
            if t != self.times[-1]:
                self.times.append(t)
                self.frees.append(self.frees[-1])
            self.frees[-1] += int(released[k])
        if core.completing:  # (as in Profile)
            held = completing.held_sum(core, col)
            for i in range(self._split(now + OVERRUN_GRACE_S), len(self.frees)):
                self.frees[i] += held

    def earliest(self, need: int, duration: float) -> int | None:
        for i, start in enumerate(self.times):
            j = max(bisect.bisect_left(self.times, start + duration), i + 1)
            if min(self.frees[i:j]) >= need:
                return i
        return None

    def _split(self, t: float) -> int:
        i = bisect.bisect_right(self.times, t) - 1
        if self.times[i] == t:
            return i
        self.times.insert(i + 1, t)
        self.frees.insert(i + 1, self.frees[i])
        return i + 1

    def reserve(self, start: float, end: float, need: int) -> None:
        first = self._split(start)
        stop = self._split(end)
        for i in range(first, stop):
            self.frees[i] -= need
