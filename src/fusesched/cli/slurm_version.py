"""What Slurm's commands print for ``-V``/``--version`` when fusesched answers them: one line
that a tool reading Slurm's version (``slurm (\\d+)\\.(\\d+)``) reads as the Slurm release
whose commands fusesched follows, and that says it is fusesched, not Slurm:
``slurm 22.05 (fusesched 0.1.0)``.

Slurm prints ``slurm 22.05.8``; fusesched does not claim a Slurm patch release it is not.
Every command by Slurm's name prints this line (:func:`version_line`); :data:`VersionOpt`
is the option that prints it and ends the command.
"""

from __future__ import annotations

from typing import Annotated, Final

import typer

#: The Slurm release whose commands, options and output fusesched's follow.
SLURM_RELEASE: Final = "22.05"


def version_line() -> str:
    """``slurm 22.05 (fusesched 0.1.0)``: the one line ``squeue -V`` (and its kin) print."""
    from fusesched import __version__

    return f"slurm {SLURM_RELEASE} (fusesched {__version__})"


def print_version(value: bool) -> None:
    """The option's callback: print :func:`version_line` and end the command (exit 0)."""
    if value:
        typer.echo(version_line())
        raise typer.Exit(0)


#: ``-V``/``--version``, as Slurm's commands take it: checked before any other option.
VersionOpt = Annotated[
    bool,
    typer.Option(
        "--version",
        "-V",
        help="Print the Slurm release fusesched's commands follow, and fusesched's version "
        "(`slurm 22.05 (fusesched …)`), and stop.",
        callback=print_version,
        is_eager=True,
        show_default=False,
    ),
]
