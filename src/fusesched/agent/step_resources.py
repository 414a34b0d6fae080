"""The CPUs and memory a job step asks for (``srun -c N``, ``--mem=SIZE``,
``--mem-per-cpu=SIZE`` inside a batch job), without I/O: the step request's fields
(:func:`cpu_mem_fields`), from which the controller gives each task its own CPU ids and
memory limit (controller/step_cpus.py). Bad options are a ``ValueError`` saying why.

CPUs per task: ``-c``; without it the field is left out and the controller gives each task
as many as each of the job's tasks has (its component's, in a heterogeneous job), as Slurm's
srun (23.11 on) takes the job's ``-c``. Memory is per node: ``--mem`` on each of the step's
nodes (0: all of the job's there), or ``--mem-per-cpu`` × the CPUs of the step's tasks there
(``-c``, else the script's ``$SLURM_CPUS_PER_TASK``, else one); neither: no limit.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import TYPE_CHECKING

from fusesched.submit.syntax import parse_slurm_memory

if TYPE_CHECKING:
    from fusesched.agent.step_plan import StepOptions

#: The request's fields for them: a controller older than them refuses them (422).
CPU_FIELD = "cpus_per_task"
MEMORY_FIELD = "memory"


def cpu_mem_fields(
    options: StepOptions, environ: Mapping[str, str], slots: Mapping[str, int]
) -> dict[str, object]:
    """The step request's fields for the CPUs per task and the memory per node a step with
    tasks per node ``slots`` asks for with its ``options`` (``environ``: the script's)."""
    fields: dict[str, object] = {}
    if options.cpus_per_task is not None:
        fields[CPU_FIELD] = options.cpus_per_task
    if options.mem is not None and options.mem_per_cpu is not None:
        raise ValueError("give the step's memory once, not with --mem and --mem-per-cpu")
    if options.mem is not None:
        fields[MEMORY_FIELD] = dict.fromkeys(slots, _size("mem", options.mem))
    elif options.mem_per_cpu is not None:
        inherited = environ.get("SLURM_CPUS_PER_TASK", "")
        cpus = options.cpus_per_task or (int(inherited) if _whole(inherited) else 1)
        each = _size("mem-per-cpu", options.mem_per_cpu) * cpus
        if not each:
            raise ValueError("--mem-per-cpu must be more than 0")
        fields[MEMORY_FIELD] = {node: each * count for node, count in slots.items()}
    return fields


def _whole(text: str) -> bool:
    return text.isascii() and text.isdigit() and 0 < len(text) <= 4 and int(text) > 0


def _size(option: str, text: str) -> int:
    try:
        return parse_slurm_memory(text)
    except ValueError as exc:
        raise ValueError(f"--{option}: {exc}") from None


def without_refused(fields: dict[str, object], refuses: Callable[[str], bool]) -> str:
    """Drop from a step's ``fields`` the CPUs a controller older than them refuses
    (``refuses``: whether its answer names a field): the step then runs unpinned, as before,
    and the warning to say so comes back (empty: it refuses none of them). ``ValueError``
    when it refuses the memory: it could not limit it."""
    if MEMORY_FIELD in fields and refuses(MEMORY_FIELD):
        raise ValueError(
            "the controller is older than this srun: it cannot limit a step's memory "
            "(--mem, --mem-per-cpu)"
        )
    if CPU_FIELD in fields and refuses(CPU_FIELD):
        del fields[CPU_FIELD]
        return "the controller is older than this srun: the step's tasks get no CPUs of their own"
    return ""
