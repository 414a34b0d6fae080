"""Job steps' shares of their job's slots, as Slurm (20.11 on) gives them out, without I/O.

A job's *slots* are its tasks per node (its hostfile). Each job step (an ``srun``) holds, on
each of its nodes, as many slots as it runs tasks there, from its creation until every task
of it has ended. A step that does not fit beside the steps running is refused as *busy*
(:class:`StepsBusy`: the API answers 409 and ``srun`` tries again), one that could never fit
in the job at once (:class:`StepNeverFits`). An ``--overlap`` step shares everything with
every other step, as Slurm's: it needs no room and takes none.

A step's share travels in its tasks' launch environment (:func:`share_env`), not in a table
of the controller's: the steps running are read back from the job's live tasks alone
(:func:`running_shares`), so nothing is left behind by a ``srun`` killed outright (its step
ends when its tasks do) and a restarted controller knows the steps of the tasks it adopts.
mpirun's daemons (remote tasks without a share) are not counted; those of a step's mpirun
carry its id alone (:func:`step_of`), which the store keeps for accounting. Step ids are 0, 1,
2… per run of the job (:func:`next_step_id`: one past the highest its tasks carry).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass

from fusesched.submit.errors import SubmitError

#: The launch environment of a step's task: its step's id, share and whether it overlaps.
STEP_ID_ENV = "FUSESCHED_STEP_ID"
STEP_SLOTS_ENV = "FUSESCHED_STEP_SLOTS"  # node:count,node:count
STEP_OVERLAP_ENV = "FUSESCHED_STEP_OVERLAP"  # "1" for --overlap
#: A heterogeneous job's step: its share of each component (group:node:count,…).
STEP_HET_SLOTS_ENV = "FUSESCHED_STEP_HET_SLOTS"
#: The step's name in accounting (``srun -J``, else its command's base name).
STEP_NAME_ENV = "FUSESCHED_STEP_NAME"


class StepNeverFits(SubmitError):
    """The step asks for more than the job has (a 400): waiting would not help."""


class StepsBusy(Exception):
    """The step does not fit beside the running steps now (a 409): ``srun`` tries again."""


@dataclass(frozen=True, slots=True)
class StepShare:
    """What a running step holds: slots per node (in the step's node order)."""

    step_id: int
    slots: tuple[tuple[str, int], ...]
    overlap: bool = False
    # a heterogeneous job's step: (component, its slots per node) for each component it runs
    # on; ``slots`` is their sum. Empty: the job is not heterogeneous.
    het: tuple[tuple[int, tuple[tuple[str, int], ...]], ...] = ()


def share_env(share: StepShare) -> dict[str, str]:
    """The variables that mark a task as ``share``'s (and give scripts its id, as Slurm's)."""
    env = {
        STEP_ID_ENV: str(share.step_id),
        STEP_SLOTS_ENV: ",".join(f"{node}:{count}" for node, count in share.slots),
        "SLURM_STEP_ID": str(share.step_id),
        "SLURM_STEPID": str(share.step_id),
    }
    if share.overlap:
        env[STEP_OVERLAP_ENV] = "1"
    if share.het:
        env[STEP_HET_SLOTS_ENV] = ",".join(
            f"{group}:{node}:{count}" for group, slots in share.het for node, count in slots
        )
    return env


def share_of(env: Mapping[str, str]) -> StepShare | None:
    """The step share a task's launch environment names; None for a task of no step (or
    one whose marks do not read as a share: it is not counted)."""
    step = step_of(env)
    if step is None:
        return None
    slots: list[tuple[str, int]] = []
    for item in env.get(STEP_SLOTS_ENV, "").split(","):
        node, _, count = item.rpartition(":")
        if not node or not (count.isascii() and count.isdigit()):
            return None
        slots.append((node, int(count)))
    het = _het_of(env.get(STEP_HET_SLOTS_ENV))
    if het is None:
        return None
    return StepShare(step, tuple(slots), env.get(STEP_OVERLAP_ENV) == "1", het)


def _het_of(text: str | None) -> tuple[tuple[int, tuple[tuple[str, int], ...]], ...] | None:
    """The components' shares ``group:node:count,…`` say (empty: none given; None: they do
    not read as shares)."""
    if not text:
        return ()
    parts: dict[int, list[tuple[str, int]]] = {}
    for item in text.split(","):
        group, _, rest = item.partition(":")
        node, _, count = rest.rpartition(":")
        if not (node and _whole(group) and _whole(count)):
            return None
        parts.setdefault(int(group), []).append((node, int(count)))
    return tuple((group, tuple(slots)) for group, slots in parts.items())


def _whole(text: str) -> bool:
    return text.isascii() and text.isdigit()


def component_share(share: StepShare, group: int) -> StepShare:
    """What ``share`` holds of a heterogeneous job's component ``group`` (a share that names
    no component: all of it is component 0's)."""
    if not share.het:
        return share if group == 0 else StepShare(share.step_id, (), share.overlap)
    slots = next((own for g, own in share.het if g == group), ())
    return StepShare(share.step_id, slots, share.overlap)


def step_of(env: Mapping[str, str]) -> int | None:
    """The id of the step a task's launch environment names: a step's task, or a daemon of
    a step's mpirun (its id alone, no share); None for a task of no step."""
    step = env.get(STEP_ID_ENV, "")
    return int(step) if step.isascii() and step.isdigit() else None


def step_name_env(name: str | None) -> dict[str, str]:
    """The mark that names a step's tasks' step (none: unnamed)."""
    return {STEP_NAME_ENV: name} if name else {}


def step_name(env: Mapping[str, str]) -> str | None:
    """The name of the step a task's launch environment names (None: none)."""
    return env.get(STEP_NAME_ENV) or None


def step_tasks(env: Mapping[str, str]) -> int | None:
    """The tasks in all of the step a task's launch environment gives a share of (its slots:
    ``srun -n``, an MPI step's ranks); None for a task of no step and for a daemon of a
    step's mpirun (it holds no slot)."""
    share = share_of(env)
    return None if share is None else sum(count for _, count in share.slots)


def running_shares(envs: Iterable[Mapping[str, str]]) -> list[StepShare]:
    """The steps of the live tasks whose launch environments are ``envs`` (each once)."""
    found: dict[int, StepShare] = {}
    for env in envs:
        share = share_of(env)
        if share is not None:
            found.setdefault(share.step_id, share)
    return list(found.values())


def in_use(shares: Iterable[StepShare]) -> dict[str, int]:
    """Slots held per node by the steps ``shares`` (overlapping ones hold none)."""
    used: dict[str, int] = {}
    for share in shares:
        if not share.overlap:
            for node, count in share.slots:
                used[node] = used.get(node, 0) + count
    return used


def next_step_id(ids: Iterable[int]) -> int:
    """The id of a run's next step: one past the highest of its steps so far (0 first)."""
    return max(ids, default=-1) + 1


def check_fits(
    job_slots: Mapping[str, int] | None,
    asked: Mapping[str, int],
    overlap: bool,
    running: Iterable[StepShare],
    what: str = "the job",
) -> None:
    """Refuse a step asking ``asked`` slots per node in a job with ``job_slots`` (None: not
    known, so not checked: a controller adopting a job whose launch it never saw) beside the
    steps ``running``: :class:`StepNeverFits` when the job itself is too small for it,
    :class:`StepsBusy` when the running steps leave too little now. ``what`` names the slots
    in messages (a heterogeneous job's component: ``component 1 of the job``)."""
    if job_slots is None:
        return
    for node, count in asked.items():
        has = job_slots.get(node, 0)
        if count > has:
            where = f"has {has} slot(s) on node {node}" if has else f"has no node {node}"
            raise StepNeverFits(f"the step asks for {count} task(s) on {node}; {what} {where}")
    if overlap:
        return
    holding = [s for s in running if not s.overlap]
    used = in_use(holding)
    full = [node for node, count in asked.items() if used.get(node, 0) + count > job_slots[node]]
    if full:
        said = "; ".join(f"{node} has {used[node]} of {job_slots[node]} in use" for node in full)
        if what != "the job":
            said = f"{what}: {said}"
        steps = sorted(s.step_id for s in holding if any(n in full for n, _ in s.slots))
        raise StepsBusy(
            f"Requested nodes are busy: {said} (by step(s) {', '.join(map(str, steps))})"
        )
