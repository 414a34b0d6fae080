"""The Slurm release whose commands fusesched's follow, and the line its commands by Slurm's
name print for ``-V``/``--version`` (:func:`version_line`): ``slurm 22.05.0``. Pure, and
imports nothing, so that every command can print it (``srun`` inside a job too).

The line is exactly what Slurm's commands print (``slurm X.Y.Z``, two words), because the
tools that read it take it apart that way: a pattern ``^slurm (\\d+)\\.(\\d+)\\.(\\d+)``
(the law package's reader of ``sbatch --version``), the second word split on dots into
integers (readers of ``sinfo -V``), what follows ``slurm`` split on dots (slurm-factory), or
the whole output split into exactly two words (``name, version = out.split()``: OSG's Gratia
probe). Any further word, such as fusesched's name, breaks the last three, so fusesched's own
version is ``fusesched --version``'s. The patch level is ``.0``: fusesched follows the 22.05
series (its commands were compared with 22.05.8's), and claims no fix release of it.
"""

from __future__ import annotations

from typing import Final

#: The Slurm release whose commands, options and output fusesched's follow.
SLURM_RELEASE: Final = "22.05"
#: That release as the three numbers Slurm's commands print.
SLURM_VERSION: Final = f"{SLURM_RELEASE}.0"


def version_line() -> str:
    """``slurm 22.05.0``: the one line ``sbatch -V``, ``squeue --version`` (and every other
    command by Slurm's name) print, without its line break."""
    return f"slurm {SLURM_VERSION}"
