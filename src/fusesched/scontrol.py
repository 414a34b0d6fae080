"""``scontrol`` inside a job: the host-list subcommands batch scripts use to find their nodes.

Multi-node scripts written for Slurm (PyTorch's, MPI launchers') commonly say::

    MASTER_ADDR=$(scontrol show hostnames "$SLURM_JOB_NODELIST" | head -n 1)

The agent puts this command beside its ``srun`` wrapper, first on tasks' PATH
(:func:`fusesched.agent.step_wrapper.install_wrapper`), so such scripts run unchanged:

* ``scontrol show hostnames [LIST]``: each host of a Slurm host list on a line of its own
  (``LIST`` absent: ``$SLURM_JOB_NODELIST``, as Slurm's);
* ``scontrol show hostlist LIST`` (and ``hostlistsorted``): the short form, ``n[1-3,7]``.

Anything else exits 1 saying what works here (``fusesched show`` and the other commands
answer about jobs and nodes). Standard library only, and a light import (``fusesched`` and
:mod:`fusesched.hostlist`), so that a script calling it in a loop stays quick.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Sequence

from fusesched.hostlist import compress_hostlist, expand_hostlist

USAGE = (
    "scontrol (fusesched): inside a job only 'scontrol show hostnames [LIST]' and "
    "'scontrol show hostlist LIST' work; ask fusesched for the rest (fusesched show JOB, "
    "fusesched nodes)"
)


def main(argv: Sequence[str]) -> int:
    """Run ``scontrol argv``; the exit status."""
    words = [w for w in argv if w not in ("-o", "--oneliner")]
    if len(words) < 2 or words[0] != "show" or len(words) > 3:
        return _fail(USAGE)
    what, given = words[1].lower(), words[2] if len(words) == 3 else None
    if what == "hostnames":
        text = given if given is not None else os.environ.get("SLURM_JOB_NODELIST")
        if not text:
            return _fail("scontrol: error: no host list given and SLURM_JOB_NODELIST is not set")
        hosts = _expand(text)
        if hosts is None:
            return 1
        sys.stdout.write("".join(f"{host}\n" for host in hosts))
        return 0
    if what in ("hostlist", "hostlistsorted"):
        if given is None:
            return _fail(f"scontrol: error: 'show {what}' needs a host list")
        hosts = _expand(given)
        if hosts is None:
            return 1
        if what == "hostlistsorted":
            hosts = sorted(dict.fromkeys(hosts))
        sys.stdout.write(compress_hostlist(hosts) + "\n")
        return 0
    return _fail(USAGE)


def _expand(text: str) -> list[str] | None:
    """The hosts of ``text``, or None (said on stderr) when it is no host list."""
    try:
        return expand_hostlist(text)
    except ValueError as exc:
        _fail(f"scontrol: error: {exc}")
        return None


def _fail(message: str) -> int:
    sys.stderr.write(message + "\n")
    return 1


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
