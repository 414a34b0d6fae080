"""Cluster licenses: floating licenses of commercial software (MATLAB, ANSYS, compilers)
counted cluster-wide by name, not tied to any node (Slurm's ``Licenses=`` and ``sbatch -L``).

The cluster's licenses are a core setting (``CoreConfig.licenses``: ``(("ansys", 4),
("matlab", 10))``); a job asks for some (``JobSpec.licenses``). A job starts only when every
license it asks for is free in the number it asks for; it holds them while it runs and gives
them back when it ends, is requeued or preempted. A job asking for a license the cluster does
not have, or for more than it has in all, is rejected at submission.

:class:`LicensePool` is the core's ledger (``core.licenses``, None when the cluster has no
licenses: then nothing here is ever called). The planners use it so that a job blocked by
licenses is not starved: EASY backfilling pushes the head's shadow time to when enough of its
licenses come back (from the running jobs' estimated ends) and lets a job that would still run
then take only licenses the head can spare (:func:`reserve`, :func:`may_backfill`);
conservative backfilling keeps a count per license in its time profile
(:meth:`LicensePool.profile`). Pure, like the rest of the core.
"""

from __future__ import annotations

import math
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from fusesched.core.planning import try_place
from fusesched.model.licenses import Licenses

if TYPE_CHECKING:
    from fusesched.core.cluster import IntArray
    from fusesched.core.placement import Allocation
    from fusesched.core.records import JobRecord
    from fusesched.core.scheduler import SchedulerCore


@dataclass(slots=True)
class LicensePool:
    """How many of each license exist and which running job holds how many."""

    total: dict[str, int]
    used: dict[str, int] = field(default_factory=dict)
    held: dict[str, Licenses] = field(default_factory=dict)  # job id -> what it holds

    @classmethod
    def of(cls, configured: Licenses) -> LicensePool | None:
        """The pool of a configuration (None when it declares no license)."""
        if not configured:
            return None
        return cls(dict(configured), dict.fromkeys(dict(configured), 0))

    def free(self, name: str) -> int:
        return max(0, self.total.get(name, 0) - self.used.get(name, 0))

    def balance(self, name: str) -> int:
        """:meth:`free` without the floor at 0: below 0 while adopted jobs hold more than a
        smaller configuration has (what they give back first fills that hole)."""
        return self.total.get(name, 0) - self.used.get(name, 0)

    def fits(self, wanted: Licenses) -> bool:
        """Every license of ``wanted`` is free now in that number."""
        total, used = self.total, self.used
        return all(total.get(n, 0) - used.get(n, 0) >= k for n, k in wanted)

    def take(self, job_id: str, wanted: Licenses) -> None:
        """``job_id`` starts holding ``wanted`` (an adopted job's too, even over the total:
        a smaller configuration after a restart leaves the excess in use until it ends)."""
        if not wanted or job_id in self.held:
            return
        self.held[job_id] = wanted
        for name, count in wanted:
            self.used[name] = self.used.get(name, 0) + count

    def give(self, job_id: str) -> bool:
        """``job_id`` stopped running: what it held is free again. True if it held any."""
        wanted = self.held.pop(job_id, None)
        if not wanted:
            return False
        for name, count in wanted:
            self.used[name] -= count
        return True

    def involved(self, records: Iterable[JobRecord]) -> bool:
        """Whether any license is held, or any of ``records`` asks for one."""
        return any(self.used.values()) or any(rec.spec.licenses for rec in records)

    def blocks(self, rec: JobRecord) -> bool:
        """Whether ``rec`` asks for licenses that are not all free now."""
        wanted = rec.spec.licenses
        return bool(wanted) and not self.fits(wanted)

    def shortage(self, wanted: Licenses) -> str:
        """Why ``wanted`` cannot be had now (``waiting for licenses: matlab 2 (1 of 10
        free)``), or ``""``."""
        short = [
            f"{n} {k} ({self.free(n)} of {self.total.get(n, 0)} free)"
            for n, k in wanted
            if self.free(n) < k
        ]
        return f"waiting for licenses: {', '.join(short)}" if short else ""

    def returns(
        self, core: SchedulerCore, now: float, *, unknown_now: bool = True
    ) -> list[tuple[float, str, int]]:
        """(time, name, count) of every license the running jobs give back, by their
        estimated ends, sorted by time. A job without an estimate or past it gives them
        back now (``unknown_now``: what backfilling plans with), or not at all."""
        jobs = core.jobs
        out: list[tuple[float, str, int]] = []
        for job_id, held in self.held.items():
            end = jobs[job_id].est_end
            if end is None or end < now:
                if not unknown_now:
                    continue
                end = now
            out.extend((end, name, count) for name, count in held)
        out.sort()
        return out

    def available_at(
        self, core: SchedulerCore, wanted: Licenses, now: float, *, unknown_now: bool = True
    ) -> float:
        """The earliest time ``wanted`` is free, counting only the running jobs' returns
        (``math.inf`` if never: asks for more than exist); ``unknown_now`` as
        :meth:`returns`."""
        if self.fits(wanted):
            return now
        free = {n: self.balance(n) for n, _ in wanted}
        need = dict(wanted)
        for t, name, count in self.returns(core, now, unknown_now=unknown_now):
            if name in need:
                free[name] += count
                if all(free[n] >= k for n, k in wanted):
                    return t
        return math.inf

    def spare_at(
        self, core: SchedulerCore, head: Licenses, at: float, now: float
    ) -> dict[str, int]:
        """Per license of ``head``: how many will be free at ``at`` (now plus the running
        jobs' returns by then) beyond what ``head`` needs — what a job still running then
        may take now without delaying it."""
        spare = {n: self.balance(n) - k for n, k in head}
        for t, name, count in self.returns(core, now):
            if t > at:
                break
            if name in spare:
                spare[name] += count
        return spare

    def profile(self, core: SchedulerCore, times: list[float], now: float) -> list[dict[str, int]]:
        """Free licenses during each ``[times[i], times[i+1])``, by the running jobs'
        estimated ends (``times`` sorted, its first ``now``; a job past its estimate gives
        them back at the second breakpoint, as the resource profile assumes)."""
        current = {n: self.balance(n) for n in self.total}
        counts = [current]
        returns = self.returns(core, now)
        k = 0
        for t in times[1:]:
            current = dict(current)
            while k < len(returns) and (returns[k][0] <= t):
                _, name, count = returns[k]
                current[name] = current.get(name, 0) + count
                k += 1
            counts.append(current)
        return counts


@dataclass(slots=True)
class LicenseHold:
    """What EASY backfilling keeps for a head that asks for licenses: per license, how many
    a job still running at the shadow time may take (see :meth:`LicensePool.spare_at`)."""

    spare: dict[str, int]


def reserve(
    core: SchedulerCore, head: JobRecord, shadow: float, now: float
) -> tuple[float, LicenseHold | None]:
    """The head's shadow time pushed to when its licenses come back, and what of them a
    long backfill job may take (None when the head asks for none)."""
    pool = core.licenses
    wanted = head.spec.licenses
    if pool is None or not wanted:
        return shadow, None
    at = max(shadow, pool.available_at(core, wanted, now))
    return at, LicenseHold(pool.spare_at(core, wanted, at, now))


def may_backfill(
    core: SchedulerCore, rec: JobRecord, short: bool, hold: LicenseHold | None
) -> bool:
    """Whether ``rec`` (asking for licenses) may start now behind the head: its licenses are
    free now and, if it would still run at the shadow time (``short`` False), it leaves the
    head what the head needs then (:func:`backfilled` takes them from ``hold`` once it
    starts)."""
    pool = core.licenses
    assert pool is not None
    wanted = rec.spec.licenses
    if not pool.fits(wanted):
        return False
    if short or hold is None:
        return True
    spare = hold.spare
    return all(spare.get(n, k) >= k for n, k in wanted)


def backfilled(rec: JobRecord, short: bool, hold: LicenseHold | None) -> None:
    """``rec`` started behind the head: a long job's licenses are no longer spare then."""
    if short or hold is None:
        return
    spare = hold.spare
    for n, k in rec.spec.licenses:
        if n in spare:
            spare[n] -= k


def licensed_try_place(
    core: SchedulerCore,
    rec: JobRecord,
    limit: IntArray | None = None,
    view: IntArray | None = None,
    search: bool = True,
    quota_checked: bool = False,
) -> Allocation | None:
    """:func:`fusesched.core.planning.try_place` for a cluster with licenses: a job whose
    licenses are not all free now is not placed. (Bound as the core's ``try_place`` only
    when licenses are configured, so a cluster without them pays nothing.)"""
    wanted = rec.spec.licenses
    if wanted:
        pool = core.licenses
        assert pool is not None
        if not pool.fits(wanted):
            return None
    return try_place(core, rec, limit, view, search, quota_checked)
