"""A job step of an MPI program (``srun --mpi=pmix``, or a program linked to ``libmpi``),
without I/O: whether a step runs through OpenMPI's ``mpirun`` (:func:`mpi_mode`), the one
task that does so (:func:`mpirun_argv`, :func:`mpirun_env`) and its output's rank tags made
``srun -l``'s labels (:func:`label_line`).

fusesched has no PMI server of its own: the step's one task, on its first node, is
``mpirun`` over the step's nodes and slots (``--host node:slots,…``, ``-np N``, ``--bind-to
none``, no oversubscribing), and mpirun starts its daemons on the nodes as in a batch
script: through fusesched's launcher (``plm_rsh_agent``) with the job's own credential, as
tasks of the job. The ranks form one ``MPI_COMM_WORLD``; each gets the script's exported
variables (``-x``), the step's, and its own ranks in Slurm's and torch's names, from
OpenMPI's (``SLURM_PROCID`` = ``RANK`` = ``$OMPI_COMM_WORLD_RANK``…).
"""

from __future__ import annotations

import itertools
import re
from collections.abc import Mapping, Sequence

from fusesched.agent.step_args import PMI_TYPES
from fusesched.agent.step_plan import StepTask, step_env, step_slots

#: What a library an MPI program needs is called (OpenMPI's ``libmpi.so.40``, ``libmpi_cxx``…).
LIBMPI = re.compile(r"^libmpi(\.so|_)")

#: Per-rank variables a script has for itself (its batch step's): never passed on to ranks,
#: which get their own (:data:`_RANKS`).
_PER_RANK = frozenset(
    {
        "SLURM_PROCID",
        "SLURM_LOCALID",
        "SLURM_NODEID",
        "SLURMD_NODENAME",
        "RANK",
        "LOCAL_RANK",
        "LOCAL_WORLD_SIZE",
        "NODE_RANK",
        "GROUP_RANK",
    }
)
#: What each rank runs before the program: its ranks from OpenMPI's, in Slurm's and torch's
#: names (the node's index in the step is not known to a rank: unset).
_RANKS = (
    'export SLURM_PROCID="$OMPI_COMM_WORLD_RANK" RANK="$OMPI_COMM_WORLD_RANK" '
    'SLURM_LOCALID="$OMPI_COMM_WORLD_LOCAL_RANK" LOCAL_RANK="$OMPI_COMM_WORLD_LOCAL_RANK" '
    'LOCAL_WORLD_SIZE="$OMPI_COMM_WORLD_LOCAL_SIZE" SLURMD_NODENAME="$FUSESCHED_NODE"; '
    'unset SLURM_NODEID NODE_RANK GROUP_RANK; exec "$@"'
)
#: OpenMPI's settings for the step's mpirun: its daemons through fusesched's launcher, not
#: Slurm's (which the ``SLURM_*`` variables would make it pick), with full node names.
_MPIRUN_SETTINGS = {
    "OMPI_MCA_plm": "rsh",
    "OMPI_MCA_ras": "^slurm",
    "OMPI_MCA_orte_keep_fqdn_hostnames": "1",
    "OMPI_ALLOW_RUN_AS_ROOT": "1",
    "OMPI_ALLOW_RUN_AS_ROOT_CONFIRM": "1",
}
_TAG = re.compile(r"^\[\d+,(\d+)\]<std(?:out|err)>:")


def mpi_mode(option: str | None, site_default: str | None) -> bool | None:
    """Whether the step runs through mpirun: True for a PMI type (``pmix``, ``pmix_v4``,
    ``pmi2``), False for another (``none`` included: N separate tasks), None when neither
    ``--mpi`` nor ``$SLURM_MPI_TYPE`` (read as Slurm's srun reads it) says: then the
    program decides (:func:`links_mpi`)."""
    chosen = option or site_default or None
    if chosen is None:
        return None
    return PMI_TYPES.match(chosen) is not None


def links_mpi(needed: Sequence[str]) -> bool:
    """Whether a program that needs the libraries ``needed`` is an MPI program."""
    return any(LIBMPI.match(name) for name in needed)


def mpirun_argv(
    tasks: Sequence[StepTask], passed: Sequence[str], label: bool, command: Sequence[str]
) -> list[str]:
    """The step's mpirun: its ranks where ``tasks`` are (block by slot, as srun places
    them; round the nodes, ``--map-by node``, when their ranks are not in node order:
    ``-m cyclic``, and ``plane=N`` taken as cyclic), the variables ``passed`` given to every
    rank, ``--tag-output`` for ``-l``."""
    hosts = ",".join(f"{node}:{count}" for node, count in step_slots(tasks).items())
    block = all(a.node_index <= b.node_index for a, b in itertools.pairwise(tasks))
    return [
        "mpirun",
        "-np",
        str(len(tasks)),
        "--host",
        hosts,
        "--map-by",
        "slot" if block else "node",
        "--bind-to",
        "none",
        "--nooversubscribe",
        *(["--tag-output"] if label else []),
        *(arg for name in passed for arg in ("-x", name)),
        "/bin/sh",
        "-c",
        _RANKS,
        "srun-rank",
        *command,
    ]


def mpirun_env(
    exported: Mapping[str, str],
    environ: Mapping[str, str],
    tasks: Sequence[StepTask],
    cpus_per_task: int | None,
    launcher: str,
) -> tuple[dict[str, str], list[str]]:
    """The mpirun task's own variables, and the names mpirun passes to every rank: the
    ``exported`` ones and the step's (less any rank's own); the caller's OpenMPI settings
    (``environ``'s ``OMPI_MCA_*``, not its default hostfile: the step has its nodes) with
    fusesched's launcher (``launcher``, mpirun's ``plm_rsh_agent``) over them."""
    shared = {k: v for k, v in exported.items() if k not in _PER_RANK}
    shared |= {k: v for k, v in step_env(tasks, cpus_per_task).items() if k not in _PER_RANK}
    own = {
        k: v
        for k, v in environ.items()
        if k.startswith("OMPI_MCA_") and k != "OMPI_MCA_orte_default_hostfile"
    }
    own |= _MPIRUN_SETTINGS | {"OMPI_MCA_plm_rsh_agent": launcher}
    # the step's id comes with the task's launch (the controller gives it out)
    return shared | own, [*shared, "SLURM_STEP_ID", "SLURM_STEPID"]


def label_line(line: str) -> str:
    """One line of mpirun's ``--tag-output`` (``[1,2]<stdout>:text``) as ``srun -l`` says
    it (``2: text``); other lines (mpirun's own) as they are."""
    found = _TAG.match(line)
    return f"{found.group(1)}: {line[found.end() :]}" if found else line
