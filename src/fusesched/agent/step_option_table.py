"""Slurm 22.05 srun's options that a job step (``srun`` inside a job,
:mod:`fusesched.agent.step_args`) reads without a field of its own, with no I/O: those it
*accepts* (:data:`ACCEPTED`: they name the job's own settings, which the step has anyway, or
ask for what fusesched's steps already do or cannot tell apart, such as CPU and memory
binding), and those it *refuses* (:data:`REFUSED`, each with why); their short letters
(:data:`SHORT`) and the checks of the values that have a syntax (:func:`check_value`): a
step never goes ahead on a value Slurm's srun would refuse.

The options a step applies (``-n``, ``-D``, ``-w``, ``--multi-prog``…) are
:mod:`fusesched.agent.step_args`'s own; docs/SUBMIT.md, "srun's options", has the whole
table.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Final, Literal

#: How an option takes its value: none, always (attached or the next word), or only
#: attached (``--nice=5``; ``--nice`` alone takes none).
Takes = Literal["no", "yes", "attached"]


@dataclass(frozen=True, slots=True)
class Known:
    """An option the step accepts or refuses: how it takes its value, and what the step says
    of it (accepted: a note on stderr, "" for none; refused: why)."""

    takes: Takes
    said: str = ""


_BINDING = (
    "each task already runs on CPUs of its own among the job's (-c of them), which is the "
    "binding fusesched gives; the type given changes nothing"
)
_JOB_OWN = ""  # (the job's own partition, account…: nothing to say)

#: Options accepted and not applied: the job's own settings, what the step does anyway, or
#: what has no meaning here. A note, when given, is said once on stderr (``srun: warning:``).
ACCEPTED: Final[dict[str, Known]] = {
    # the job's own: a step runs in it, on its partition, account, QOS…
    "account": Known("yes", _JOB_OWN),
    "partition": Known("yes", _JOB_OWN),
    "qos": Known("yes", _JOB_OWN),
    "reservation": Known("yes", _JOB_OWN),
    "constraint": Known("yes", _JOB_OWN),
    "cluster-constraint": Known("yes", _JOB_OWN),
    "clusters": Known("yes", _JOB_OWN),
    "licenses": Known("yes", _JOB_OWN),
    "wckey": Known("yes", _JOB_OWN),
    "comment": Known("yes", _JOB_OWN),
    "mail-type": Known("yes", _JOB_OWN),
    "mail-user": Known("yes", _JOB_OWN),
    "mcs-label": Known("yes", _JOB_OWN),
    "nice": Known("attached", _JOB_OWN),
    "priority": Known("yes", _JOB_OWN),
    "dependency": Known("yes", _JOB_OWN),  # (Slurm's srun ignores them in a job)
    "hold": Known("no", _JOB_OWN),
    "begin": Known("yes", "--begin is ignored: the job's nodes are already allocated"),
    "deadline": Known("yes", _JOB_OWN),
    "time-min": Known("yes", _JOB_OWN),
    "delay-boot": Known("yes", _JOB_OWN),
    "reboot": Known("no", _JOB_OWN),
    "power": Known("yes", _JOB_OWN),
    "bb": Known("yes", _JOB_OWN),
    "bbf": Known("yes", _JOB_OWN),
    "oversubscribe": Known("no", _JOB_OWN),
    "contiguous": Known("no", _JOB_OWN),
    "network": Known("yes", _JOB_OWN),
    "switches": Known("yes", _JOB_OWN),
    "spread-job": Known("no", _JOB_OWN),
    "use-min-nodes": Known("no", _JOB_OWN),
    "mincpus": Known("yes", _JOB_OWN),
    "tmp": Known("yes", _JOB_OWN),
    "core-spec": Known("yes", _JOB_OWN),
    "thread-spec": Known("yes", _JOB_OWN),
    "sockets-per-node": Known("yes", _JOB_OWN),
    "cores-per-socket": Known("yes", _JOB_OWN),
    "threads-per-core": Known("yes", _JOB_OWN),
    "extra-node-info": Known("yes", _JOB_OWN),
    "ntasks-per-core": Known("yes", _JOB_OWN),
    "ntasks-per-socket": Known("yes", _JOB_OWN),
    # binding and placement within a node: each task has CPUs (and GPUs) of its own already
    "cpu-bind": Known("yes"),  # (its note: only for verbose, :func:`binding_note`)
    "mem-bind": Known("yes"),
    "hint": Known("yes"),
    "gpu-bind": Known("yes"),
    "accel-bind": Known("yes"),
    "cpu-freq": Known("yes"),
    "gpu-freq": Known("yes"),
    "overcommit": Known("no", "-O/--overcommit: each task still takes one of the job's task slots"),
    "cpus-per-gpu": Known(
        "yes", "--cpus-per-gpu is not applied: the step's tasks get -c CPUs each (else the job's)"
    ),
    "mem-per-gpu": Known(
        "yes", "--mem-per-gpu is not applied: give the step's memory as --mem or --mem-per-cpu"
    ),
    "gres-flags": Known("yes"),
    # srun's own workings, which have no counterpart here
    "verbose": Known("no"),
    "quiet": Known("no"),
    "disable-status": Known("no"),
    "quit-on-interrupt": Known("no"),  # (one Ctrl-C already stops the step)
    "no-kill": Known("attached"),
    "threads": Known("yes"),
    "msg-timeout": Known("yes"),
    "slurmd-debug": Known("yes"),
    "profile": Known("yes"),
    "acctg-freq": Known("yes"),
    "propagate": Known("attached"),  # (tasks inherit the script's limits: its agent's)
    "send-libs": Known("attached"),
    "resv-ports": Known("attached"),
    "compress": Known("attached"),
    "bcast-exclude": Known("yes"),
}

#: Options refused, each with why (exit 2, nothing started).
REFUSED: Final[dict[str, Known]] = {
    "uid": Known("yes", "only root may run a step as another user; it runs as the job's"),
    "gid": Known("yes", "only root may run a step as another group; it runs as the job's"),
    "bcast": Known(
        "attached",
        "the program is not copied to the nodes: they run it from where it is (put it on a "
        "shared file system)",
    ),
    "container": Known("yes", "steps run on the job's nodes as they are (no OCI bundles)"),
    "x11": Known("attached", "X11 forwarding is not supported"),
    "prolog": Known("yes", "run the program in the script, before srun"),
    "epilog": Known("yes", "run the program in the script, after srun"),
    "gpus-per-socket": Known(
        "yes", "GPUs are given per task or per node: use --gpus-per-task or --gpus-per-node"
    ),
    "ntasks-per-gpu": Known(
        "yes", "GPUs are given per task or per node: use --gpus-per-task or --gpus-per-node"
    ),
    "no-allocate": Known("no", "a step always runs within its job's allocation"),
    "nodefile": Known("yes", "give the nodes with -w/--nodelist"),
    "test-only": Known("no", "a job step starts or waits: there is nothing to estimate"),
    "tres-per-task": Known("yes", "use -c and --gpus-per-task"),
}

#: Short letters of :data:`ACCEPTED` and :data:`REFUSED` options (the step's own:
#: step_args.py).
SHORT: Final[dict[str, str]] = {
    "A": "account",
    "p": "partition",
    "q": "qos",
    "C": "constraint",
    "M": "clusters",
    "L": "licenses",
    "d": "dependency",
    "H": "hold",
    "b": "begin",
    "s": "oversubscribe",
    "S": "core-spec",
    "B": "extra-node-info",
    "O": "overcommit",
    "v": "verbose",
    "Q": "quiet",
    "X": "disable-status",
    "k": "no-kill",
    "T": "threads",
    "Z": "no-allocate",
    "F": "nodefile",
}

_CPU_BIND_FLAGS = frozenset({"q", "quiet", "v", "verbose"})
_CPU_BIND_TYPES = frozenset(
    {"none", "no", "rank", "rank_ldom", "sockets", "cores", "threads", "ldoms", "boards"}
)
_CPU_BIND_LISTS = ("map_cpu:", "mask_cpu:", "map_ldom:", "mask_ldom:")
_MEM_BIND_FLAGS = frozenset({"q", "quiet", "v", "verbose", "sort"})
_MEM_BIND_TYPES = frozenset({"none", "no", "rank", "local", "prefer"})
_MEM_BIND_LISTS = ("map_mem:", "mask_mem:")
_HINTS = frozenset({"compute_bound", "memory_bound", "multithread", "nomultithread"})
# a map's or mask's item: a number (decimal, or hex with 0x; a mask's hex without), *N
_LIST_ITEM = re.compile(r"(0x[0-9a-f]+|[0-9a-f]+)(\*[0-9]+)?", re.ASCII | re.IGNORECASE)
_ACCEL = re.compile(r"[gmnv]+", re.ASCII)


def check_value(name: str, value: str) -> str | None:
    """Why ``--NAME=VALUE`` is not a value Slurm's srun takes; None when it is (or when the
    option's value has no syntax to check)."""
    if name == "cpu-bind":
        return _binding(value, _CPU_BIND_FLAGS, _CPU_BIND_TYPES, _CPU_BIND_LISTS, name)
    if name == "mem-bind":
        return _binding(value, _MEM_BIND_FLAGS, _MEM_BIND_TYPES, _MEM_BIND_LISTS, name)
    if name == "hint" and value not in _HINTS and value != "help":
        return f"--hint takes {', '.join(sorted(_HINTS))}, not {value!r}"
    if name == "accel-bind" and not _ACCEL.fullmatch(value):
        return f"--accel-bind takes the letters g, m, n and v, not {value!r}"
    if name == "gpu-bind" and not value:
        return "--gpu-bind needs a type (closest, map_gpu:…, mask_gpu:…, none…)"
    return None


def _binding(
    value: str, flags: frozenset[str], types: frozenset[str], lists: tuple[str, ...], name: str
) -> str | None:
    kinds = 0
    items = value.split(",")
    for k, item in enumerate(items):
        lowered = item.lower()
        if lowered in flags:
            continue
        kinds += 1
        if lowered in types or lowered == "help":
            continue
        head = next((p for p in lists if lowered.startswith(p)), None)
        if head is None:
            return (
                f"--{name}: unrecognized type {item!r} (types: {', '.join(sorted(types))}, "
                f"{', '.join(p + 'LIST' for p in lists)}; flags: quiet, verbose)"
            )
        entries = [item[len(head) :], *items[k + 1 :]]  # (the list runs to the end)
        if not all(_LIST_ITEM.fullmatch(e) for e in entries):
            return f"--{name}: {head} takes CPU numbers or masks, not {','.join(entries)!r}"
        break
    if kinds > 1:
        return f"--{name} takes one binding type, not {value!r}"
    return None


def binding_note(value: str) -> str | None:
    """What the step says of ``--cpu-bind=VALUE``: how its tasks are bound, when it asks to be
    told (verbose) or names CPUs of its own (a map or mask); else None."""
    lowered = [item.lower() for item in value.split(",")]
    if any(item in ("v", "verbose") for item in lowered) or any(
        item.startswith(_CPU_BIND_LISTS) for item in lowered
    ):
        return f"--cpu-bind={value}: {_BINDING}"
    return None


#: The first part of ``-m``: how the tasks go over the nodes.
_DIST_NODES = re.compile(r"\*|block|cyclic|arbitrary|plane=([0-9]{1,6})", re.ASCII)
_DIST_CORES = frozenset({"*", "block", "cyclic", "fcyclic"})


def distribution(value: str) -> str:
    """How ``-m VALUE`` spreads the tasks over the nodes: ``block``, ``cyclic``,
    ``plane=N`` or ``arbitrary`` (``*`` is block); its ``:…`` parts (over sockets and
    cores, which each task's own CPUs leave no choice in) and ``,Pack``/``,NoPack`` are
    checked only. ``ValueError`` for a value Slurm's srun refuses."""
    text, comma, pack = value.partition(",")
    if comma and pack.lower() not in ("pack", "nopack"):
        raise ValueError(f"-m/--distribution: {pack!r} is not Pack or NoPack")
    first, *rest = text.split(":")
    found = _DIST_NODES.fullmatch(first)
    if found is None or len(rest) > 2 or any(r not in _DIST_CORES for r in rest):
        raise ValueError(
            f"-m/--distribution takes block, cyclic, plane=N or arbitrary, then "
            f":block|cyclic|fcyclic (twice at most) and ,Pack or ,NoPack, not {value!r}"
        )
    if found[1] is not None and int(found[1]) < 1:
        raise ValueError("-m plane=N: N must be 1 or more")
    return "block" if first == "*" else first
