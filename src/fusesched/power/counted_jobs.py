"""Which waiting jobs power saving counts (pure: reads the core, changes nothing).

The simulator (:mod:`fusesched.sim.power`) and the live controller
(:mod:`fusesched.controller.power`) both hand :func:`counted_jobs` to
:func:`fusesched.power.pool_demand.waiting_demand`, so the two count the same jobs
(docs/ENERGY.md, "Waiting demand"):

* the core's waiting queue (``core.queue.records``: jobs that could not start at the last
  cycle), and the jobs whose begin time, requeue's backoff or advance reservation's start
  comes within ``horizon_s`` (``core.due_within``: they queue within one boot, and the nodes
  they need should be up by then);
* less the jobs that their **licenses** hold back (docs/LICENSES.md: asked-for licenses not
  all free) unless the running jobs that hold them give enough back within ``horizon_s``
  by their estimated ends (the core's own estimate and reckoning,
  :meth:`fusesched.core.licenses.LicensePool.available_at`, as EASY backfilling plans). A
  node woken for such a job idles until the licenses come back, and would be kept awake
  under it all that time (as ``held_nodes`` too: the job waits on licenses, not nodes). A
  holder with no estimated end or past it gives nothing back by this count: when is not
  known, so the job counts once the licenses are free (at most one boot later than a
  clairvoyant wake; the holder's own nodes are free by then, too).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from fusesched.core.records import JobRecord
    from fusesched.core.scheduler import SchedulerCore
    from fusesched.model.licenses import Licenses


def counted_jobs(core: SchedulerCore, now: float, horizon_s: float) -> list[JobRecord]:
    """The jobs power saving counts, in the queue's order and then the delayed ones' (the
    module docstring's rules); ``now``: the shell's clock."""
    jobs = [*core.queue.records, *core.due_within(horizon_s)]
    pool = core.licenses
    if pool is None or not jobs:
        return jobs
    free_by: dict[Licenses, bool] = {}  # (per license ask, worked out once)
    kept: list[JobRecord] = []
    for rec in jobs:
        wanted = rec.spec.licenses
        if wanted and not pool.fits(wanted):
            soon = free_by.get(wanted)
            if soon is None:  # (a holder with no estimated end, or past it: gives none back)
                at = pool.available_at(core, wanted, now, unknown_now=False)
                soon = free_by[wanted] = at <= now + horizon_s
            if not soon:
                continue
        kept.append(rec)
    return kept
