"""Fair share across a restart: a controller that starts hands its core the usage of the runs
its store shows ended (docs/TENANCY.md, "Usage across restarts").

The core keeps fair-share usage in memory only. At start, before recovery changes anything
and before the first cycle, the runs that ended recently enough to weigh
(:func:`~fusesched.core.past_usage.recalled_since`: within 20 half-lives, all of them
without decay) are read from the job rows (:func:`~fusesched.store.past_runs.ended_runs`)
and charged as the core charged them while they ran. Jobs left running are charged by the
core from their start once adopted (controller/adoption.py).

Runs before :meth:`~fusesched.controller.service.Controller.__init__` starts its loop.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from fusesched.core.past_usage import recalled_since
from fusesched.model.events import UsageRecalled
from fusesched.store.past_runs import ended_runs

if TYPE_CHECKING:
    from fusesched.controller.service import Controller


def recall(ctl: Controller) -> None:
    """Charge the core's fair share the runs that ended before this controller started (a
    core without tenancy has no fair share: nothing is read)."""
    gate = ctl.core.tenants
    if gate is None:
        return
    now = ctl.clock()
    runs = ended_runs(ctl.persist.store, recalled_since(gate.policy.half_life_s, now))
    ctl.core.handle(UsageRecalled(tuple(runs)), now)
