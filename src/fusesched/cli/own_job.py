"""A command that stops the job it runs in (``scontrol requeue $SLURM_JOB_ID`` from inside
the job) must outlive that stop long enough to finish.

Requeueing a running job stops its tasks (SIGTERM, then SIGKILL after the grace), and the
command that asked is one of their processes: the controller's answer and the agent's
SIGTERM race, and a command killed before it exits makes its caller see a failure (submitit
requeues its jobs this way, ``subprocess.check_call(["scontrol", "requeue", id])``, and
took the killed command for a failed requeue). Slurm's C ``scontrol`` exits within
microseconds of its answer; fusesched's Python command takes longer. So a command asked to
requeue its own job ignores SIGTERM from before it asks (:func:`outlive_own_stop`): it
finishes and exits with its own status; the grace's SIGKILL still ends it if it hangs.
"""

from __future__ import annotations

import os
import signal
from collections.abc import Iterable, Mapping

#: The variables that name the job a process runs in (Slurm's, then fusesched's own).
_OWN_IDS = ("SLURM_JOB_ID", "SLURM_ARRAY_JOB_ID", "FUSESCHED_JOB_ID")


def own_jobs(environ: Mapping[str, str] | None = None) -> set[str]:
    """The ids this process's job goes by (none outside a job)."""
    env = os.environ if environ is None else environ
    return {value for name in _OWN_IDS if (value := env.get(name, "").strip())}


def outlive_own_stop(job_ids: Iterable[str], environ: Mapping[str, str] | None = None) -> bool:
    """Ignore SIGTERM from now on when ``job_ids`` name the job this process runs in (its
    id, or its array's); whether it does."""
    own = own_jobs(environ)
    if not own or own.isdisjoint(str(j).strip() for j in job_ids):
        return False
    signal.signal(signal.SIGTERM, signal.SIG_IGN)
    return True
