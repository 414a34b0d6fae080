"""The job that holds a ``fusesched salloc`` allocation: an sbatch job whose batch script
(:data:`HOLDER`) prints the job's hostfile and a marker line (:data:`READY`), then sleeps
until the job is cancelled, reaches its time limit, or salloc releases it (:data:`RELEASE`).

salloc writes it (cli/salloc_plan.py) and reads the hostfile back from its output; the
controller knows such a job by its script (:func:`holds_allocation`): its own task is no
batch script of the user's but the allocation's holder, which ``sacct`` shows as the job's
``ID.extern`` step, not ``ID.batch`` (Slurm runs no batch step for ``salloc``).
"""

from __future__ import annotations

from collections.abc import Mapping

#: The marker line after the hostfile in the holding job's output.
READY = "fusesched-salloc: allocation ready"
#: The holding job's batch script (``--wrap``): the hostfile, the marker, then a sleep until
#: the job is cancelled or reaches its time limit, or salloc releases it with :data:`RELEASE`'s
#: signals once its command has exited (``wait`` lets the trap run at once, not after the
#: hour's ``sleep``), so the job ends as the command did: completed, or failed.
HOLDER = (
    f'trap "exit 0" USR1; trap "exit 1" USR2; cat "$FUSESCHED_HOSTFILE"; echo "{READY}"; '
    "while :; do sleep 3600 & wait $!; done"
)
#: The signal that ends the holder for the command's exit status: 0 and any other.
RELEASE = {True: "USR1", False: "USR2"}


def holds_allocation(request: Mapping[str, object]) -> bool:
    """Whether a stored job request (its JSON) is salloc's holding job: one task group whose
    batch script prints :data:`READY` (an odd or older request: False)."""
    groups = request.get("groups")
    if not isinstance(groups, list) or len(groups) != 1 or not isinstance(groups[0], Mapping):
        return False
    script = groups[0].get("script")
    return isinstance(script, str) and f'echo "{READY}"' in script
