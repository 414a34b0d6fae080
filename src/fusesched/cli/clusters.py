"""Slurm's ``-M/--clusters``, which tools pass whatever the site (Snakemake's ``sacct
--clusters all`` and ``scancel --clusters=all``): fusesched is one cluster, named
:data:`CLUSTER_NAME` as its jobs' ``SLURM_CLUSTER_NAME``, so ``all`` and that name are taken
and change nothing; another name is refused (exit 2), as Slurm refuses a cluster it does not
know."""

from __future__ import annotations

from typing import Annotated, Final

import typer

#: The cluster's name (the jobs' ``SLURM_CLUSTER_NAME``).
CLUSTER_NAME: Final = "fusesched"
TAKEN: Final = frozenset({"all", CLUSTER_NAME})


def checked(given: list[str] | None) -> list[str] | None:
    """``-M``'s values (comma lists), each ``all`` or :data:`CLUSTER_NAME`."""
    for item in (part.strip() for value in given or () for part in value.split(",")):
        if item.lower() not in TAKEN:
            raise typer.BadParameter(
                f"no cluster {item!r}: this is fusesched's one cluster, {CLUSTER_NAME!r} "
                "(or 'all')",
                param_hint="-M/--clusters",
            )
    return given


ClustersOpt = Annotated[
    list[str] | None,
    typer.Option(
        "--clusters",
        "-M",
        help=f"Slurm's clusters: 'all' or {CLUSTER_NAME!r} (fusesched is one cluster).",
        callback=checked,
        show_default=False,
    ),
]
