"""What Slurm's commands print for ``-V``/``--version`` when fusesched answers them:
``slurm 22.05.0``, the line of :func:`fusesched.slurm_release.version_line` (why exactly that
form: that module's doc). Every command by Slurm's name prints it: :data:`VersionOpt` is the
option that prints it and ends a command; ``sbatch``, ``srun`` and ``salloc``, which read
their own words, call :func:`print_version`.
"""

from __future__ import annotations

from typing import Annotated

import typer

from fusesched.slurm_release import SLURM_RELEASE, SLURM_VERSION, version_line

__all__ = ["SLURM_RELEASE", "SLURM_VERSION", "VersionOpt", "print_version", "version_line"]


def print_version(value: bool) -> None:
    """Print :func:`version_line` and end the command (exit 0), when ``value``; the option's
    callback."""
    if value:
        typer.echo(version_line())
        raise typer.Exit(0)


#: ``-V``/``--version``, as Slurm's commands take it: checked before any other option.
VersionOpt = Annotated[
    bool,
    typer.Option(
        "--version",
        "-V",
        help=f"Print the Slurm release fusesched's commands follow (`slurm {SLURM_VERSION}`), "
        "as Slurm's commands print theirs, and stop (`fusesched --version`: fusesched's).",
        callback=print_version,
        is_eager=True,
        show_default=False,
    ),
]
