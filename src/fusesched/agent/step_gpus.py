"""The GPUs a job step asks for (``srun --gres=gpu[:TYPE]:N``, ``-G/--gpus``,
``--gpus-per-task``, ``--gpus-per-node`` inside a batch job), without I/O: each option's
count (:func:`gpu_count`) and the step's ask per node over its placed tasks
(:func:`gpu_ask`), which ``srun`` sends with the step; the controller picks which of the
job's GPUs (controller/step_gpus.py). Bad options are a ``ValueError`` saying why.

A GPU type (``gpu:h100:1``) is accepted and not checked: the job's GPUs are the model it
was given. ``--gres=none`` (or a count of 0) asks for none: the step's tasks see no GPU. A
step that gives none of these options asks for nothing: it sees all of the job's GPUs on
each of its nodes and holds none (controller/step_gpus.py says why).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from fusesched.agent.step_plan import StepOptions

#: srun's GPU options (each takes ``[TYPE:]COUNT``; ``gres`` takes ``gpu[:TYPE][:COUNT]``).
GPU_OPTIONS = ("gres", "gpus", "gpus-per-task", "gpus-per-node")
#: The most GPUs one option may ask for.
MAX_GPUS = 4096


@dataclass(frozen=True, slots=True)
class GpuAsk:
    """A step's GPUs: how many on each of its nodes, and (``--gpus-per-task``) how many
    each task gets of its node's (None: each task sees all of the step's on its node)."""

    per_node: dict[str, int]
    per_task: int | None = None

    def fields(self) -> dict[str, object]:
        """The step request's fields for these GPUs."""
        return {"gpus": self.per_node, "gpus_per_task": self.per_task}


def gpu_count(option: str, text: str) -> int:
    """The count ``--OPTION=TEXT`` asks for."""
    if option == "gres":
        return _gres_count(text)
    count = text.rpartition(":")[2]
    if not _whole(count):
        raise ValueError(f"--{option} takes [type:]count such as 2 or h100:2, not {text!r}")
    return int(count)


def _gres_count(text: str) -> int:
    if text == "none":
        return 0
    parts = text.split(":")
    if parts[0] != "gpu" or len(parts) > 3 or not all(parts):
        raise ValueError(
            f"--gres takes gpu[:type][:count] (or none): steps are given GPUs only, not {text!r}"
        )
    if len(parts) == 1 or (len(parts) == 2 and not _whole(parts[1])):
        return 1
    if not _whole(parts[-1]):
        raise ValueError(f"--gres: the count in {text!r} must be a whole number up to {MAX_GPUS}")
    return int(parts[-1])


def _whole(text: str) -> bool:
    return text.isascii() and text.isdigit() and len(text) <= 6 and int(text) <= MAX_GPUS


def gpu_ask(options: StepOptions, slots: Mapping[str, int], mpi: bool = False) -> GpuAsk | None:
    """What a step with tasks per node ``slots`` asks for with its ``options``; None when
    they give no GPU option. ``-G N`` is
    shared evenly by the step's nodes; ``--gpus-per-task`` over a step run through mpirun
    (``mpi``: one task, mpirun, on its first node) gives each node's ranks its GPUs there
    together."""
    given = (options.gres, options.gpus, options.gpus_per_task, options.gpus_per_node)
    named = {f"--{o}": n for o, n in zip(GPU_OPTIONS, given, strict=True) if n is not None}
    if not named:
        return None
    if len(named) > 1:
        raise ValueError(f"give the step's GPUs once, not with {' and '.join(named)}")
    ((option, count),) = named.items()
    if option == "--gpus-per-task":
        per_node = {node: count * tasks for node, tasks in slots.items()}
        return GpuAsk(per_node, None if mpi else count)
    if option == "--gpus" and count % len(slots):
        raise ValueError(
            f"--gpus={count} cannot be shared evenly by the step's {len(slots)} nodes; use "
            "--gpus-per-node or --gpus-per-task"
        )
    each = count // len(slots) if option == "--gpus" else count
    return GpuAsk(dict.fromkeys(slots, each))
