"""Slurm's names for fusesched's commands that have names of their own: ``squeue`` is
``jobs``, ``scancel`` ``cancel``, ``srun`` (outside an allocation) ``run``, ``seff`` ``eff``,
``sshare`` ``share``, ``sprio`` ``priority``. Each is the same command registered a second
time, under Slurm's name (its options, help and output are the command's), in the help's
"Slurm's commands" panel beside ``scontrol`` and ``slurm-commands``. (``sbatch``, ``salloc``,
``sinfo`` and ``sacct`` have Slurm's names already.)"""

from __future__ import annotations

import copy
from typing import Final

import typer

#: fusesched's command by Slurm's name.
SLURM_NAMES: Final = {
    "squeue": "jobs",
    "scancel": "cancel",
    "srun": "run",
    "seff": "eff",
    "sshare": "share",
    "sprio": "priority",
}
PANEL: Final = "Slurm's commands"


def _name(info: typer.models.CommandInfo) -> str:
    """The name a registered command is called by (its function's, as typer names it)."""
    if info.name:
        return info.name
    callback = info.callback
    return getattr(callback, "__name__", "").replace("_", "-")


def register(app: typer.Typer) -> None:
    """Register each command of :data:`SLURM_NAMES` again under Slurm's name; its own must
    be registered in ``app`` already."""
    by_name = {_name(info): info for info in app.registered_commands}
    for slurm, own in SLURM_NAMES.items():
        alias = copy.copy(by_name[own])
        alias.name = slurm
        alias.rich_help_panel = PANEL
        alias.short_help = f"Slurm's {slurm}: the same command as `{own}`."
        app.registered_commands.append(alias)
