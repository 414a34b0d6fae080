"""A batch script's options as :class:`~fusesched.submit.slurm_options.SlurmJobOptions`
(the values its tasks are told as Slurm's variables), read after submit/sbatch.py has checked
them. Pure.
"""

from __future__ import annotations

from typing import Final

from fusesched.model import resources
from fusesched.submit.sbatch_reader import Reader
from fusesched.submit.syntax import parse_slurm_memory

#: The fields given as text, with the sbatch option each comes from.
_TEXT_OPTIONS: Final = {
    "gpus": "gpus",
    "gpus_per_node": "gpus-per-node",
    "gpus_per_task": "gpus-per-task",
    "dependency": "dependency",
}


def mebibytes(text: str) -> int:
    """A Slurm memory size (``500M``, ``2G``, ``4000``) in MiB, a part of one counted whole
    (as Slurm rounds a size up to its megabytes); ``ValueError`` for one it cannot read."""
    return resources.mebibytes(parse_slurm_memory(text))


def slurm_options(reader: Reader, export: str | None) -> dict[str, object] | None:
    """What a batch script's options (``reader``'s, their values already checked) and the
    ``--export`` in effect (``export``: as given, from the command line, ``SBATCH_EXPORT`` or
    the script; None: not given) make of :class:`SlurmJobOptions`, as its JSON; None when none
    of them was given."""
    out: dict[str, object] = {}
    for field, option in (("ntasks_per_node", "ntasks-per-node"), ("cpus_per_gpu", "cpus-per-gpu")):
        count = reader.count(option)
        if count is not None:
            out[field] = count
    for field, option in (("mem_per_cpu", "mem-per-cpu"), ("mem_per_gpu", "mem-per-gpu")):
        text = reader.value(option)
        if text is not None:
            out[field] = mebibytes(text)
    for field, option in _TEXT_OPTIONS.items():
        text = reader.value(option)
        if text:
            out[field] = text
    if export is not None and export.upper() != "ALL":  # (srun's default: Slurm sets none)
        out["export"] = export
    return out or None
