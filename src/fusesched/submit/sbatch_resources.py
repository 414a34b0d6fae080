"""Each task's resources in a batch script (:mod:`fusesched.submit.sbatch`), as sbatch's
options ask for them.

``cpu`` = ``--cpus-per-task`` (default 1) or ``--cpus-per-gpu`` × the task's GPUs; memory
from ``--mem-per-cpu`` × cpus, ``--mem-per-gpu`` × GPUs, or ``--mem`` (per node) divided by
the tasks per node; GPUs from ``--gpus-per-task``, ``--gres=gpu[:type]:N`` or
``--gpus-per-node`` (per node, divided by the tasks per node) or ``--gpus`` (per job, divided
by the tasks), which must divide evenly; other ``--gres`` names are resources of their own.
"Tasks per node" is ``--ntasks-per-node``, else ceil(tasks / nodes), else (no ``--nodes``)
all tasks. Problems are :class:`~fusesched.submit.errors.SubmitError` at their option's line.
"""

from __future__ import annotations

from typing import Final

from fusesched.model.resources import GPU
from fusesched.submit.resource_names import resource_name
from fusesched.submit.sbatch_reader import Reader, digits
from fusesched.submit.syntax import parse_slurm_memory

_GPU_OPTIONS: Final = ("gres", "gpus", "gpus-per-node", "gpus-per-task")
_GPU_HINT: Final = "--gpus-per-task, --gres=gpu:N, --gpus-per-node or -G/--gpus"


def task_cpus(reader: Reader, gpus: int) -> int:
    """CPUs per task: ``--cpus-per-task`` (default 1), or ``--cpus-per-gpu`` × its GPUs."""
    per_gpu = reader.count("cpus-per-gpu")
    if per_gpu is None:
        return reader.count("cpus-per-task") or 1
    if "cpus-per-task" in reader.options:
        shown = reader.options["cpus-per-task"].option
        raise reader.fail("cpus-per-gpu", f"{shown} and --cpus-per-gpu cannot both be given")
    if not gpus:
        raise reader.fail("cpus-per-gpu", f"needs GPUs ({_GPU_HINT})")
    return per_gpu * gpus


def task_memory(reader: Reader, cpus: int, tasks_per_node: int, gpus: int) -> int:
    given = [name for name in ("mem", "mem-per-cpu", "mem-per-gpu") if name in reader.options]
    if len(given) > 1:
        shown = " and ".join(f"--{name}" for name in given[:2])
        raise reader.fail(given[1], f"{shown} cannot both be given")
    for name in given:
        text = reader.value(name)
        try:
            amount = parse_slurm_memory(text or "")
        except ValueError as exc:
            raise reader.fail(name, str(exc)) from None
        if name == "mem-per-cpu":
            return amount * cpus
        if name == "mem-per-gpu":
            if not gpus:
                raise reader.fail(name, f"needs GPUs ({_GPU_HINT})")
            return amount * gpus
        if amount == 0:
            reader.warnings.append(
                f"{reader.where(reader.options['mem'].line)}: --mem=0 (all of a node's memory) "
                "cannot be expressed; no memory is requested"
            )
        return amount // tasks_per_node
    return 0


def task_accelerators(
    reader: Reader, replicas: int, tasks_per_node: int
) -> list[tuple[str, int, str | None]]:
    """(resource, amount per task, GPU model or None) for each accelerator asked for."""
    given = [name for name in _GPU_OPTIONS if name in reader.options]
    gpu_given = [n for n in given if n != "gres"]
    if len(gpu_given) > 1 or (gpu_given and _gres_has_gpu(reader.value("gres") or "")):
        shown = ", ".join(reader.options[n].option for n in given)
        raise reader.fail(given[-1], f"give the GPUs once, not with {shown}")
    out: list[tuple[str, int, str | None]] = []
    if "gres" in reader.options and reader.value("gres") != "none":
        for item in (reader.value("gres") or "").split(","):
            name, amount, model = _gres_item(reader, item.strip())
            out.append(
                (name, _per_task(reader, "gres", name, amount, tasks_per_node, "node"), model)
            )
    for option in gpu_given:
        text = reader.value(option) or ""
        model, _, count = text.rpartition(":")
        if not digits(count) or int(count) < 1:
            raise reader.fail(option, f"expected [type:]count, got {text!r}")
        amount = int(count)
        if option == "gpus-per-node":
            amount = _per_task(reader, option, GPU, amount, tasks_per_node, "node")
        elif option == "gpus":
            amount = _per_task(reader, option, GPU, amount, replicas, "job")
        out.append((GPU, amount, model or None))
    names = [name for name, _, _ in out]
    for name in names:
        if names.count(name) > 1:
            raise reader.fail(given[0], f"{name} is asked for twice")
    return [item for item in out if item[1] > 0]


def _gres_has_gpu(text: str) -> bool:
    return any(item.strip().split(":")[0] == "gpu" for item in text.split(","))


def _gres_item(reader: Reader, item: str) -> tuple[str, int, str | None]:
    parts = item.split(":")
    if not item or "(" in item or len(parts) > 3 or not all(parts):
        raise reader.fail("gres", f"expected name[:type][:count] such as gpu:a100:2, got {item!r}")
    count = 1
    if len(parts) > 1 and digits(parts[-1]):
        count = int(parts.pop())
    elif len(parts) == 3:
        raise reader.fail("gres", f"the count in {item!r} must be a whole number")
    name = GPU if parts[0] == "gpu" else parts[0]
    try:
        name = resource_name(name)
    except ValueError as exc:
        raise reader.fail("gres", str(exc)) from None
    model = parts[1] if len(parts) == 2 else None
    if model is not None and name != GPU:
        raise reader.fail("gres", f"a type ({model}) is only understood for gpu")
    return name, count, model


def _per_task(reader: Reader, option: str, name: str, amount: int, tasks: int, per: str) -> int:
    if amount % tasks:
        raise reader.fail(
            option,
            f"{amount} {name} per {per} cannot be shared evenly by {tasks} tasks; use "
            "--gpus-per-task, or set --ntasks-per-node",
        )
    return amount // tasks
