"""Slurm's filename patterns for output files (``sbatch -o``, ``srun --output``): ``%j`` and
the rest replaced by a task's values. Standard library only, so that ``srun --output``'s
per-task redirect (:mod:`fusesched.step_output`) starts quickly.

``%%`` a ``%``; ``%j`` the job's id (an array member's: ``12_3``); ``%J`` the job's id and
step, ``<id>.<step>``; ``%s`` the step (``batch`` for a batch script); ``%A`` the array's id
(a job that is no array member: its own); ``%a`` the array index (none: 4294967294, Slurm's
"no value"); ``%b`` the index modulo 10; ``%x`` the job's name; ``%u`` its user; ``%N`` the
node's short name; ``%n`` the node's place among the step's nodes; ``%t`` the task's rank. A
number between ``%`` and the letter pads a number with zeros to that width (``%4a``:
``0007``). Other ``%`` sequences are kept as written.
"""

from __future__ import annotations

from typing import Final

#: ``%a`` of a job that is no array member (Slurm's NO_VAL).
NO_ARRAY_INDEX: Final = "4294967294"
#: The widest ``%Nx`` padding taken (a longer one pads to this).
MAX_WIDTH: Final = 64


def expand(
    pattern: str,
    *,
    job_id: str,
    array_job: str | None,
    array_index: int | None,
    user: str,
    name: str,
    node: str,
    step: str = "batch",
    node_index: int = 0,
    task: int = 0,
) -> str:
    """``pattern`` with its ``%`` sequences replaced (see the module's docstring); the
    defaults of ``step``, ``node_index`` and ``task`` are a batch script's (the first task,
    on the first node)."""
    index = NO_ARRAY_INDEX if array_index is None else str(array_index)
    values = {
        "%": "%",
        "j": job_id,
        "J": f"{job_id}.{step}",
        "s": step,
        "A": array_job or job_id,
        "a": index,
        "b": "" if array_index is None else str(array_index % 10),
        "x": name,
        "u": user,
        "N": node.split(".", 1)[0],
        "n": str(node_index),
        "t": str(task),
    }
    out: list[str] = []
    i = 0
    while i < len(pattern):
        ch = pattern[i]
        if ch != "%":
            out.append(ch)
            i += 1
            continue
        end = i + 1
        while end < len(pattern) and pattern[end].isascii() and pattern[end].isdigit():
            end += 1
        letter = pattern[end] if end < len(pattern) else ""
        if letter not in values:
            out.append(pattern[i : end + 1])  # (kept as written)
            i = end + 1
            continue
        value = values[letter]
        width = pattern[i + 1 : end]
        if width and value.isdigit():
            value = value.zfill(min(int(width), MAX_WIDTH))
        out.append(value)
        i = end + 1
    return "".join(out)
