"""``seff JOB`` called by Slurm's name: a job's efficiency in the lines of Slurm 22.05's
contrib ``seff``, which scripts grep (``seff $id | grep "Memory Efficiency"``);
``fusesched eff`` keeps its own (:mod:`fusesched.cli.efficiency`).

The lines, and when each is printed::

    Job ID: 12
    Array Job ID: 9_3                 (an array's member only)
    Cluster: fusesched
    User/Group: ann/default           (the group: the job's tenant; fusesched has no Unix groups)
    State: COMPLETED (exit code 0)    (pending and running jobs: the state alone)
    Cores: 1                          (one CPU; else the two lines below)
    Nodes: 2
    Cores per node: 4
    CPU Utilized: 00:10:02
    CPU Efficiency: 12.50% of 01:20:16 core-walltime
    Job Wall-clock time: 00:10:02
    Memory Utilized: 1.16 GB (estimated maximum)   (several tasks: the sum of their peaks)
    Memory Efficiency: 14.50% of 8.00 GB (4.00 GB/node)
    WARNING: Efficiency statistics may be misleading for RUNNING jobs.   (running only)

A pending job's lines end after the cores with ``Efficiency not available for jobs in the
PENDING state.`` Sizes are Slurm's (``%.2f`` in KB, MB, GB… of 1024); what was not measured
counts as 0, as Slurm's seff shows a job without accounting data (the reason goes to stderr).
Pure: the efficiency (``GET /v1/jobs/{id}/efficiency``) and the job's view in, lines out.
"""

from __future__ import annotations

import math
from typing import Any, Final

from fusesched.cli.clusters import CLUSTER_NAME
from fusesched.cli.live import slurm_hms
from fusesched.cli.sacct_format import exit_code, sacct_state

#: seff's size prefixes, of 1024 KB each.
_PREFIXES: Final = "KMGTPE"
#: The states seff prints without an exit code.
_UNFINISHED: Final = frozenset({"PENDING", "RUNNING"})


def kbytes(n_bytes: float | None) -> str:
    """A size as seff writes one: ``1.16 GB``; nothing as ``0.00 MB``."""
    kb = (n_bytes or 0) / 1024
    if kb <= 0:
        return "0.00 MB"
    exp = min(max(int(math.log(kb, 1024)), 0), len(_PREFIXES) - 1)
    return f"{kb / 1024**exp:.2f} {_PREFIXES[exp]}B"


def _hms(seconds: float | None) -> str:
    return slurm_hms(int(seconds or 0))


def _count(x: float) -> str:
    """A CPU count: ``4``, part cores as ``0.5``."""
    return str(int(x)) if float(x).is_integer() else f"{x:g}"


def report(e: dict[str, Any], job: dict[str, Any]) -> list[str]:
    """seff's lines for the efficiency ``e`` of the job whose view is ``job``."""
    state = sacct_state(job)
    lines = [f"Job ID: {e['id']}"]
    if job.get("array_parent"):
        lines.append(f"Array Job ID: {job['id']}")
    lines.append(f"Cluster: {CLUSTER_NAME}")
    lines.append(f"User/Group: {e.get('user') or job.get('user') or ''}/{job.get('tenant') or ''}")
    if state in _UNFINISHED:
        lines.append(f"State: {state}")
    else:
        lines.append(f"State: {state} (exit code {exit_code(job).partition(':')[0]})")
    cpus = float(e.get("cpus") or 0)
    nodes = len(e.get("nodes") or ()) or int(job.get("min_nodes") or 1)
    if cpus == 1:
        lines.append("Cores: 1")
    else:
        lines.append(f"Nodes: {nodes}")
        lines.append(f"Cores per node: {_count(cpus / nodes)}")
    if state == "PENDING":
        lines.append("Efficiency not available for jobs in the PENDING state.")
        return lines
    elapsed = e.get("elapsed_s") or 0
    lines.append(f"CPU Utilized: {_hms(e.get('cpu_seconds'))}")
    lines.append(
        f"CPU Efficiency: {e.get('cpu_efficiency_pct') or 0:.2f}% of "
        f"{_hms(elapsed * cpus)} core-walltime"
    )
    lines.append(f"Job Wall-clock time: {_hms(elapsed)}")
    several = (e.get("tasks_count") or 0) > 1
    lines.append(
        f"Memory Utilized: {kbytes(e.get('max_rss_bytes'))}"
        + (" (estimated maximum)" if several else "")
    )
    asked = e.get("memory_bytes") or 0
    lines.append(
        f"Memory Efficiency: {e.get('memory_efficiency_pct') or 0:.2f}% of {kbytes(asked)} "
        f"({kbytes(asked / nodes)}/node)"
    )
    if state == "RUNNING":
        lines.append("WARNING: Efficiency statistics may be misleading for RUNNING jobs.")
    return lines


def unmeasured(e: dict[str, Any], job: dict[str, Any]) -> list[str]:
    """Why figures the lines show as 0 were not measured (the efficiency's notes), for
    stderr; nothing when all were, or for a pending job."""
    if sacct_state(job) == "PENDING":
        return []
    missing = e.get("cpu_seconds") is None or e.get("max_rss_bytes") is None
    return list(e.get("notes") or ()) if missing else []
