"""``fusesched sacct``'s outputs besides its table and ``-p``/``-P``: ``--yaml`` (the rows
``--json`` prints, as YAML), and ``-B/--batch-script`` and ``--env-vars``, which print a
block a job in Slurm's words::

    Batch Script for 12
    --------------------------------------------------------------------------------
    NONE

The controller serves no job's batch script or environment (it keeps them, with the job's
request, but no view carries them), so the text is ``NONE``, as Slurm's sacct prints it when
its database did not store them (``AccountingStoreFlags`` without ``job_script`` or
``job_env``); a note on standard error says why.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any, Final

#: The line under a block's title.
RULE: Final = "-" * 80
#: The titles of ``-B``'s and ``--env-vars``' blocks (the job's id after them).
SCRIPT_TITLE: Final = "Batch Script for"
ENV_TITLE: Final = "Environment used for {} (must be batch to display)"
#: What standard error says once the blocks are printed.
NOT_SERVED: Final = (
    "sacct: note: the controller serves no job's {what}: NONE is printed, as Slurm's sacct "
    "prints it when its database did not store one"
)


def yaml_text(records: list[dict[str, str]]) -> str:
    """``--yaml``: the rows ``--json`` prints (an object a row), as a YAML list."""
    import yaml

    return str(yaml.safe_dump(records, sort_keys=False, default_flow_style=False))


def blocks(jobs: Iterable[Mapping[str, Any]], env: bool) -> str:
    """``-B`` (``env`` off) or ``--env-vars``: a block a job, its text ``NONE`` (see the
    module's notes)."""
    out: list[str] = []
    for job in jobs:
        title = ENV_TITLE.format(job["id"]) if env else f"{SCRIPT_TITLE} {job['id']}"
        out.append(f"{title}\n{RULE}\nNONE\n\n")
    return "".join(out)


def not_served(env: bool) -> str:
    """The note for standard error after :func:`blocks`."""
    return NOT_SERVED.format(what="environment" if env else "batch script")
