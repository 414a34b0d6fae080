"""``scontrol``: Slurm's scontrol answered by fusesched, inside jobs and out.

Multi-node scripts written for Slurm (PyTorch's, MPI launchers') commonly say::

    MASTER_ADDR=$(scontrol show hostnames "$SLURM_JOB_NODELIST" | head -n 1)

The agent puts this command beside its ``srun`` wrapper, first on tasks' PATH
(:func:`fusesched.agent.step_wrapper.install_wrapper`), so such scripts run unchanged, and it
is ``fusesched scontrol`` outside jobs. The host-list subcommands are answered here, with the
standard library and :mod:`fusesched.hostlist` alone, so that a script calling them in a loop
stays quick:

* ``scontrol show hostnames [LIST]``: each host of a Slurm host list on a line of its own
  (``LIST`` absent: ``$SLURM_JOB_NODELIST``, as Slurm's);
* ``scontrol show hostlist LIST`` (and ``hostlistsorted``): the short form, ``n[1-3,7]``.

Everything else (``show job``, ``hold``, ``update JobId=…``, ``requeue``…) is
:mod:`fusesched.cli.scontrol`'s, which talks to the controller (``FUSESCHED_CONTROLLER``) with
the user's token (:func:`fusesched.client_base.default_token`: the user's before the job's
own credential, which may only start the job's steps).
"""

from __future__ import annotations

import os
import sys
from collections.abc import Sequence

from fusesched.hostlist import compress_hostlist, expand_hostlist

#: scontrol's options that change nothing here (a host list is one line anyway; ``-o`` makes
#: ``fusesched scontrol``'s records one line each); ``-dd``… too (:func:`option_word`).
QUIET_FLAGS = frozenset({"-o", "--oneliner", "-d", "--details", "-a", "--all", "-Q", "--quiet"})


def option_word(word: str) -> bool:
    """Whether ``word`` is one of :data:`QUIET_FLAGS` (or ``-dd``, ``-ddd``…)."""
    return word in QUIET_FLAGS or (word.startswith("-d") and set(word[1:]) == {"d"})


HOST_LISTS = frozenset({"hostnames", "hostlist", "hostlistsorted"})


def main(argv: Sequence[str]) -> int:
    """Run ``scontrol argv``; the exit status."""
    code = host_lists(argv)
    if code is not None:
        return code
    from fusesched.cli.scontrol import run
    from fusesched.client_base import default_token

    return run(argv, None, default_token(), os.environ.get("FUSESCHED_CA") or None)


def host_lists(argv: Sequence[str]) -> int | None:
    """``scontrol show hostnames|hostlist|hostlistsorted …`` done (its exit status), or None
    when ``argv`` asks for something else."""
    words = [w for w in argv if not option_word(w)]
    if len(words) < 2 or words[0].lower() != "show" or words[1].lower() not in HOST_LISTS:
        return None
    if len(words) > 3:
        return _fail(f"scontrol: error: 'show {words[1]}' takes one host list")
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
    if given is None:
        return _fail(f"scontrol: error: 'show {what}' needs a host list")
    hosts = _expand(given)
    if hosts is None:
        return 1
    if what == "hostlistsorted":
        hosts = sorted(dict.fromkeys(hosts))
    sys.stdout.write(compress_hostlist(hosts) + "\n")
    return 0


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
