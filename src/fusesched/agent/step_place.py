"""Where a job step's tasks run, with its placement options, with no I/O
(:func:`place_step`): the job's nodes it may use (``-w/--nodelist``, ``-x/--exclude``,
``-r/--relative``), how many tasks each gets (:func:`fusesched.agent.step_plan.place`: its
slots filled in order) and which ranks go where (``-m/--distribution``: ``block``, the
default, numbers each node's tasks in turn; ``cyclic`` deals them out one per node round
the nodes; ``plane=N`` N at a time).

As Slurm's srun: ``-w`` nodes must be the job's, and each gets a task (fewer when there are
fewer tasks; with ``-N`` more than it names, the others follow in the job's order); ``-x``
nodes are left out (one not the job's is no error); ``-r N`` starts at the job's node N.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from fusesched.agent.step_plan import StepError, StepOptions, StepTask, place, step_shape


def place_step(
    hosts: Sequence[tuple[str, int]], options: StepOptions, environ: Mapping[str, str]
) -> tuple[list[StepTask], list[str]]:
    """The step's tasks over the job's ``hosts`` (its hostfile's ``(node, slots)``) as its
    ``options`` ask (``environ``, the script's, gives the job's task and node counts), and
    warnings; :class:`StepError` for what cannot be."""
    used, named = step_hosts(hosts, options)
    ntasks, nodes = step_shape(options, environ, len(used))
    if named and options.nodes is None:
        nodes = min(named, ntasks) if ntasks is not None else named
    elif named and options.nodes is not None and options.nodes < named:
        raise StepError(
            f"-w names {named} nodes but -N asks for {options.nodes}: give -N {named} or more"
        )
    tasks, warnings = place(used, ntasks, nodes, options.ntasks_per_node)
    return distribute(tasks, options.distribution or "block"), warnings


def step_hosts(
    hosts: Sequence[tuple[str, int]], options: StepOptions
) -> tuple[list[tuple[str, int]], int]:
    """The job's ``hosts`` the step may use, in the order it fills them, and how many of the
    first of them ``-w`` names (0: none)."""
    order = [name for name, _ in hosts]
    if options.relative is not None:
        if options.relative >= len(hosts):
            raise StepError(
                f"-r {options.relative}: the job has {len(hosts)} node(s), numbered from 0"
            )
        return list(hosts[options.relative :]), 0
    used = list(hosts)
    if options.exclude is not None:
        used = [(name, slots) for name, slots in used if name not in options.exclude]
        if not used:
            raise StepError("-x/--exclude leaves none of the job's nodes for the step")
    if options.nodelist is None:
        return used, 0
    strangers = [name for name in options.nodelist if name not in order]
    if strangers:
        raise StepError(
            f"-w/--nodelist: {', '.join(strangers)} is not a node of this job ({', '.join(order)})"
        )
    wanted = set(options.nodelist)
    left_out = [name for name in options.nodelist if name not in dict(used)]
    if left_out:
        raise StepError(f"-w/--nodelist and -x/--exclude both name {', '.join(left_out)}")
    first = [host for host in used if host[0] in wanted]
    return first + [host for host in used if host[0] not in wanted], len(first)


def distribute(tasks: Sequence[StepTask], how: str) -> list[StepTask]:
    """``tasks`` (as :func:`place` puts them, block: each node's in turn) with their ranks
    dealt out as ``how`` says (``block``, ``cyclic``, ``plane=N``), each node keeping its
    count; in rank order."""
    if how == "block" or not tasks:
        return list(tasks)
    size = int(how.partition("=")[2]) if how.startswith("plane=") else 1
    nodes: list[list[StepTask]] = []
    for task in tasks:
        if task.node_index == len(nodes):
            nodes.append([])
        nodes[task.node_index].append(task)
    left = [len(own) for own in nodes]
    order: list[int] = []  # the node index of each rank in turn
    while len(order) < len(tasks):
        for index, count in enumerate(left):
            take = min(size, count)
            order.extend([index] * take)
            left[index] -= take
    placed: list[StepTask] = []
    local = [0] * len(nodes)
    for rank, index in enumerate(order):
        slot = nodes[index][local[index]]
        placed.append(StepTask(rank, slot.node, index, local[index], slot.local_size))
        local[index] += 1
    return placed
