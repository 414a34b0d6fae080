"""Slurm heterogeneous jobs in batch scripts: ``#SBATCH hetjob`` (or ``packjob``) lines and
``:`` on sbatch's command line separate the job's *components*, each its own option set.

fusesched runs such a job as one job (one id) whose task groups are the components, named
``het0``, ``het1``, … (:data:`GROUP_PREFIX`), gang-scheduled together. What may differ from
one component to the next is what a task group holds: its tasks and nodes (``-n``, ``-N``,
``--ntasks-per-node``) and each task's resources (CPUs, memory, GPUs, gres):
:data:`PER_COMPONENT`. Everything else is the whole job's and is read from the first
component: a later component may repeat it with the same value (or the command line may
override a script's value), never give another (:func:`check_job_wide`). Job arrays of
heterogeneous jobs are refused, as Slurm refuses them.

Node constraints (``-C``, ``-w``, ``-x``, a GPU type) are each component's: what every
component gives alike is the job's placement, the rest its task group's own placement (label
filters its nodes meet besides the job's:
:func:`~fusesched.submit.label_terms.split_label_filters`). ``--exclusive`` and the
spreading of tasks over nodes are the whole job's: what one component asks applies to every
one, with a warning (:func:`merge_placements`). As with Slurm, ``--mem`` and ``--exclude``
carry on to the next components unless they give their own (:func:`propagate`).

Pure: readers in (:mod:`fusesched.submit.sbatch_reader`), the job's data out, problems as
:class:`~fusesched.submit.errors.SubmitError` located at their line.
"""

from __future__ import annotations

import itertools
from collections.abc import Callable, Sequence
from typing import Final

from fusesched.submit.label_terms import split_label_filters
from fusesched.submit.sbatch_reader import COMMAND_FLAGS, SHORT_OPTIONS, Directive, Reader

#: Task group names of the components: ``het0``, ``het1``, …
GROUP_PREFIX: Final = "het"
#: Options each component gives for itself.
PER_COMPONENT: Final = frozenset(
    {
        "nodes",
        "ntasks",
        "ntasks-per-node",
        "cpus-per-task",
        "cpus-per-gpu",
        "mem",
        "mem-per-cpu",
        "mem-per-gpu",
        "gres",
        "gpus",
        "gpus-per-node",
        "gpus-per-task",
    }
)
#: Node constraints: each component's own (``split_label_filters``); ``--exclusive``, the
#: whole job's (:func:`check_exclusive`).
NODE_OPTIONS: Final = ("constraint", "nodelist", "exclude", "exclusive")
#: Carried on to the next component unless it gives its own (Slurm's propagated options
#: among :data:`PER_COMPONENT` and :data:`NODE_OPTIONS`).
PROPAGATED: Final = ("mem", "exclude")
_MEMORY: Final = ("mem", "mem-per-cpu", "mem-per-gpu")
_ONE_JOB: Final = (
    "fusesched runs a heterogeneous job as one job, whose {option} is one for all its "
    "components: give it in the first component only (or the same in each)"
)
_WHOLE_NODES: Final = (
    "fusesched gives a heterogeneous job whole nodes (--exclusive) for all its components or none"
)

Build = Callable[[Reader, str], dict[str, object]]


def group_name(index: int) -> str:
    """The task group of component ``index``: ``het0``, ``het1``, …"""
    return f"{GROUP_PREFIX}{index}"


def read_components(reader: Reader, parts: Sequence[Sequence[str]]) -> list[Reader]:
    """Every component's reader, with its command-line options (``parts``, split at ``:``)
    read in over its directives. The script's components (``reader`` and
    :attr:`Reader.components`) and the command line's match one to one; a command line
    without ``:`` gives the first component's options."""
    readers = [reader, *reader.components]
    if len(parts) > 1 and len(readers) > 1 and len(parts) != len(readers):
        raise reader.error(
            f"the command line gives {len(parts)} components (separated by ':') and the script "
            f"{len(readers)} (separated by #SBATCH hetjob): give as many, or give the "
            "components in one place only",
            None,
        )
    while len(readers) < len(parts):
        readers.append(reader.add_component(None))
    for component, part in zip(readers, parts, strict=False):
        component.read(part, None)
    check_given(readers)
    propagate(readers)
    return readers


def check_given(readers: Sequence[Reader]) -> None:
    """Refuse a component that gives no option at all, on the command line or in the script
    (a ``:`` at either end of the options or two in a row, an ``#SBATCH hetjob`` line with no
    option between it and the next or the script's end): fusesched does not make up a
    component of defaults."""
    if len(readers) < 2:
        return
    for index, component in enumerate(readers):
        if component.options:
            continue
        if index == 0:
            why = "the options begin with ':', or the script's first #SBATCH line is hetjob"
            line = readers[1].separator
        else:
            why = "nothing follows its ':' or #SBATCH hetjob line"
            line = component.separator
        raise component.error(
            f"component {index} of the heterogeneous job gives no options ({why}): give it "
            "its own, such as -n 1",
            line,
        )


def propagate(readers: Sequence[Reader]) -> None:
    """Carry ``--mem`` and ``--exclude`` on to each next component that does not give its own
    (``--mem`` only to one that gives no memory option at all), as Slurm does."""
    for before, component in itertools.pairwise(readers):
        for name in PROPAGATED:
            if name not in before.options or name in component.options:
                continue
            if name == "mem" and any(m in component.options for m in _MEMORY):
                continue
            component.options[name] = before.options[name]


def check_job_wide(readers: Sequence[Reader]) -> None:
    """Refuse a job-wide option that a later component gives otherwise than the first (a
    value from the command line for the first component wins over the script's for the
    others), and any job array."""
    first = readers[0]
    for index, component in enumerate(readers):
        if "array" in component.options:
            raise component.fail(
                "array", "job arrays of heterogeneous jobs are not supported (as with Slurm)"
            )
        if index == 0:
            continue
        for name, directive in component.options.items():
            if name in PER_COMPONENT or name in NODE_OPTIONS or name in COMMAND_FLAGS:
                continue
            given = first.options.get(name)
            if given is not None and (
                _same(given, directive) or (given.line is None and directive.line is not None)
            ):
                continue
            shown = directive.option
            raise component.fail(name, f"component {index}: " + _ONE_JOB.format(option=shown))


def build_hetjob(readers: Sequence[Reader], script: str, build: Build) -> dict[str, object]:
    """The job's data: the first component's job with one task group per component (each
    built by ``build``, sbatch's builder of a one-group job), the label filters the
    components share as the job's placement and the rest as their groups' own."""
    check_job_wide(readers)
    check_exclusive(readers)
    built = [build(component, script) for component in readers]
    data = built[0]
    groups: list[dict[str, object]] = []
    for index, part in enumerate(built):
        parts = part["groups"]
        assert isinstance(parts, list)
        group = dict(parts[0])
        group["name"] = group_name(index)
        groups.append(group)
    data["groups"] = groups
    replicas = [int(str(g["replicas"])) for g in groups]
    placements = [_placement(part) for part in built]
    shared, owns = split_label_filters(placements)
    for group, own in zip(groups, owns, strict=True):
        if own:
            group["placement"] = own
    data["placement"] = {**shared, **merge_placements(readers, placements, replicas)}
    data["hetjob"] = True
    return data


def check_exclusive(readers: Sequence[Reader]) -> None:
    """Say (a warning) that ``--exclusive`` given by some components only applies to every
    component."""
    givers = [
        (k, r.options["exclusive"]) for k, r in enumerate(readers) if "exclusive" in r.options
    ]
    if givers and len(givers) < len(readers):
        index, first = givers[0]
        which = ", ".join(str(k) for k, _ in givers)
        readers[0].warnings.append(
            f"{readers[index].where(first.line)}: {first.option} of component(s) {which} "
            f"applies to every component: {_WHOLE_NODES}"
        )


def merge_placements(
    readers: Sequence[Reader], placements: Sequence[dict[str, object]], replicas: Sequence[int]
) -> dict[str, object]:
    """What of the components' placements (``placements``, built from ``readers``, of
    ``replicas`` tasks each) is the whole job's besides label filters: ``--exclusive`` if any
    asks, and one cap of tasks per node (the largest a component allows; a component's ``-N
    1`` with several tasks does not keep them on one node, nor its ``-N 2`` on exactly
    two). Warnings say what applies more widely than asked."""
    merged: dict[str, object] = {}
    if any(p.get("exclusive") for p in placements):
        merged["exclusive"] = True
    cap = _cap(readers, placements, replicas)
    if cap is not None:
        merged["max_tasks_per_node"] = cap
    return merged


def _cap(
    readers: Sequence[Reader], placements: Sequence[dict[str, object]], replicas: Sequence[int]
) -> int | None:
    """The cap of the job's tasks per node: the largest a component allows (one without a
    cap allows all its tasks); None when no component asks for one or the cap holds every
    task of the job."""
    caps: list[int | None] = []
    for index, placement in enumerate(placements):
        given = placement.get("max_tasks_per_node")
        caps.append(given if isinstance(given, int) else None)
        count = placement.get("nodes")
        if count is not None:
            reader = readers[index]
            readers[0].warnings.append(
                f"{reader.where(reader.options['nodes'].line)}: component {index}'s "
                f"{replicas[index]} tasks are not held to exactly {count} nodes (fusesched "
                "holds a heterogeneous job's components to a cap of tasks per node only)"
            )
        if placement.get("topology") is not None:
            reader = readers[index]
            readers[0].warnings.append(
                f"{reader.where(reader.options['nodes'].line)}: component {index}'s "
                f"{replicas[index]} tasks are not kept on one node (fusesched cannot keep "
                "one component of a heterogeneous job on one node)"
            )
    if all(c is None for c in caps):
        return None
    cap = max(c if c is not None else n for c, n in zip(caps, replicas, strict=True))
    if cap >= sum(replicas):
        return None
    for index, own in enumerate(caps):
        if own is not None and own < cap:
            reader = readers[index]
            directive = reader.options.get("ntasks-per-node") or reader.options["nodes"]
            readers[0].warnings.append(
                f"{reader.where(directive.line)}: component {index} asks for at most {own} "
                f"task(s) a node; fusesched caps the tasks of the whole heterogeneous job on "
                f"a node at {cap} (one cap for all its components)"
            )
    return cap


def _placement(data: dict[str, object]) -> dict[str, object]:
    placement = data.get("placement")
    return placement if isinstance(placement, dict) else {}


def _same(a: Directive, b: Directive) -> bool:
    """Whether two directives say the same (``-J x`` and ``--job-name=x`` do)."""
    return (_long(a.option), a.value) == (_long(b.option), b.value)


def _long(option: str) -> str:
    if option.startswith("--"):
        return option[2:]
    return SHORT_OPTIONS.get(option[1:2], option)
