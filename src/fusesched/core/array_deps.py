"""Dependencies on a whole job array, and ``aftercorr`` (Slurm's ``--dependency`` on an array).

An array's members are separate jobs (``5_0``, ``5_1``, …); a dependency that names the array
itself (``afterok:5``) applies to all of them, as in Slurm:

* ``after:5`` — once every member started (or ended, or was cancelled, without starting);
* ``afterany:5`` — once every member ended, however;
* ``afterok:5`` — once every member completed; never met once one ended otherwise (the
  waiting job is cancelled then, without waiting for the others: ``dependency 5 (array):
  5_3 failed``);
* ``afternotok:5`` — once every member ended and one at least did not complete; never met
  when all completed;
* ``aftercorr:5`` — a member of an array waits for the member of the same index of array 5
  to complete (as ``afterok`` on it); a job that is no array member, or one whose index
  array 5 lacks, waits as ``afterok:5`` (the whole array). On a job that is no array,
  ``aftercorr`` is ``afterok`` on it.

What the waiting jobs need to know of an array is counted once, not looked up per member
per waiting job: the first dependency on an array builds its :class:`ArrayTally` (one pass
over its indices), after which each member's start and end updates it in constant time. The
jobs waiting on the whole array (``core._dependents[<array id>]``) are looked at only when
the tally crosses a line that can decide them — every member started, the first member
ended other than completed, every member ended — so at most three times each, however large
the array. A member requeued after it ended (core/ended_requeue.py) counts as neither started
nor ended again (:func:`member_requeued`).

A restarted controller no longer holds the members that ended before the restart: it tells
the core their phases (:class:`~fusesched.model.events.ArrayRecalled`) before it hands over
a job that depends on the array, and they count as if the core had seen them end.

The functions take the core (``core``); the ones that act on waiting jobs call the core's
bound intake methods (``_enqueue``, ``_reject``). Pure, like the rest of the core.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from fusesched.model.events import ArrayRecalled, Decision
from fusesched.model.job import ArraySpec, Dependency, DependencyKind, JobSpec
from fusesched.model.phases import JobPhase

if TYPE_CHECKING:
    from fusesched.core.records import JobRecord
    from fusesched.core.scheduler import SchedulerCore

AFTER, AFTER_ANY = DependencyKind.AFTER, DependencyKind.AFTER_ANY
AFTER_NOT_OK, AFTER_CORR = DependencyKind.AFTER_NOT_OK, DependencyKind.AFTER_CORR
COMPLETED = JobPhase.COMPLETED


@dataclass(slots=True)
class ArrayTally:
    """Where an array's members stand, for the jobs that depend on the whole array."""

    unstarted: set[str]  # members that neither started nor ended (or are not known yet)
    unended: set[str]  # members that have not ended (or are not known yet)
    failed: str = ""  # the first member seen ending other than completed: "5_3 failed"


@dataclass(slots=True)
class ArrayDeps:
    """What the core knows of its arrays for the dependencies on them."""

    specs: dict[str, ArraySpec] = field(default_factory=dict)  # array id -> its indices
    # arrays the core can account for every member of: submitted whole, or recalled
    accounted: set[str] = field(default_factory=set)
    tallies: dict[str, ArrayTally] = field(default_factory=dict)  # the arrays depended on
    recalled: dict[str, JobPhase] = field(default_factory=dict)  # members ended before restart


def partner(spec: JobSpec, array_id: str, array: ArraySpec) -> str:
    """The member of array ``array_id`` that an ``aftercorr`` of ``spec`` pairs with (the
    same index), or ``""`` when ``spec`` is no array member or the array lacks its index."""
    index = spec.array_index
    if index is None or index not in array.indices:
        return ""
    return f"{array_id}_{index}"


def resolve(core: SchedulerCore, rec: JobRecord, dep: Dependency) -> tuple[str, str] | None:
    """A new job's dependency on a job the core does not hold: ``None`` when it names no
    array either; else what the job waits on (the array's id, an ``aftercorr`` partner, or
    ``""`` when the dependency is met already) and why it can never be met (or ``""``)."""
    arrays = core.arrays
    array_id = dep.job_id
    array = arrays.specs.get(array_id)
    if array is None:
        return None
    if dep.kind is AFTER_CORR:
        member = partner(rec.spec, array_id, array)
        if member:
            other = core.jobs.get(member)
            phase = other.phase if other is not None else arrays.recalled.get(member)
            if phase is not None and AFTER_CORR.broken(phase):
                return "", f"dependency {member} did not succeed"
            return ("" if phase is not None and AFTER_CORR.met(phase) else member), ""
    tally = tally_of(core, array_id, array)
    verdict = decide(dep.kind, tally)
    if verdict is False:
        return "", never_met(dep.kind, array_id, tally)
    return ("" if verdict else array_id), ""


def tally_of(core: SchedulerCore, array_id: str, array: ArraySpec) -> ArrayTally:
    """The array's tally, built on first use from its members' phases (a member the core
    does not hold and that was not recalled has yet to come: it counts as waiting)."""
    tally = core.arrays.tallies.get(array_id)
    if tally is not None:
        return tally
    jobs, recalled = core.jobs, core.arrays.recalled
    tally = ArrayTally(set(), set())
    for index in array.indices:
        member = f"{array_id}_{index}"
        rec = jobs.get(member)
        if rec is not None:
            member = rec.id  # (the record's string: not a second copy per member)
        phase = rec.phase if rec is not None else recalled.get(member)
        if phase is None or not phase.terminal:
            tally.unended.add(member)
            if phase is None or not AFTER.met(phase):
                tally.unstarted.add(member)
        elif phase is not COMPLETED and not tally.failed:
            tally.failed = f"{member} {phase}"
    core.arrays.tallies[array_id] = tally
    return tally


def decide(kind: DependencyKind, tally: ArrayTally) -> bool | None:
    """Whether a dependency of ``kind`` on the whole array is met (``True``), can never be
    (``False``) or is still open (``None``)."""
    if kind is AFTER:
        return True if not tally.unstarted else None
    if kind is AFTER_ANY:
        return True if not tally.unended else None
    if kind is AFTER_NOT_OK:
        return None if tally.unended else bool(tally.failed)
    if tally.failed:  # afterok, and aftercorr waiting on the whole array
        return False
    return True if not tally.unended else None


def never_met(kind: DependencyKind, array_id: str, tally: ArrayTally) -> str:
    """Why a dependency of ``kind`` on the whole array can never be met."""
    if kind is AFTER_NOT_OK:
        return f"dependency {array_id} (array): every member completed, {kind} can never be met"
    return f"dependency {array_id} (array): {tally.failed}"


def whole_kinds(waiter: JobRecord, array_id: str, array: ArraySpec) -> list[DependencyKind]:
    """The kinds of ``waiter``'s dependencies on the whole array (not those ``aftercorr``
    pairs with one member)."""
    return [
        d.kind
        for d in waiter.spec.dependencies
        if d.job_id == array_id
        and not (d.kind is AFTER_CORR and partner(waiter.spec, array_id, array))
    ]


def member_started(core: SchedulerCore, rec: JobRecord, now: float) -> None:
    """A member of an array others depend on started: the last one to start lets its
    ``after`` dependents go."""
    array_id = rec.spec.array_parent
    assert array_id is not None
    tally = core.arrays.tallies[array_id]
    if rec.id in tally.unstarted:
        tally.unstarted.discard(rec.id)
        if not tally.unstarted:
            shrink(tally)
            settle_waiters(core, array_id, now, "started")


def member_ended(core: SchedulerCore, rec: JobRecord, now: float) -> list[Decision]:
    """A member of an array others depend on ended (``rec.phase``)."""
    array_id = rec.spec.array_parent
    assert array_id is not None
    return ended(core, array_id, rec.id, rec.phase, now)


def ended(
    core: SchedulerCore, array_id: str, member: str, phase: JobPhase, now: float
) -> list[Decision]:
    """Count ``member``'s end in its array's tally; settle the waiting jobs if that decides
    something (the first failure, the last start, the last end)."""
    tally = core.arrays.tallies[array_id]
    if member not in tally.unended:
        return []  # (counted already)
    tally.unended.discard(member)
    decides = not tally.unended
    if member in tally.unstarted:
        tally.unstarted.discard(member)
        decides = decides or not tally.unstarted
    if phase is not COMPLETED and not tally.failed:
        tally.failed = f"{member} {phase}"
        decides = True
    if not decides:
        return []
    shrink(tally)
    return settle_waiters(core, array_id, now, "started" if tally.unended else "ended")


def member_requeued(core: SchedulerCore, rec: JobRecord) -> None:
    """An ended member of an array was requeued (core/ended_requeue.py): it counts as neither
    started nor ended again, so that its rerun's start and end count, and a failure it was
    the first of is forgotten (the next failed member, if any, named instead: one pass over
    the array, as rare as a requeue). Its recalled end, if any, is forgotten too."""
    array_id = rec.spec.array_parent
    assert array_id is not None
    core.arrays.recalled.pop(rec.id, None)
    tally = core.arrays.tallies.get(array_id)
    if tally is None:
        return
    tally.unended.add(rec.id)
    tally.unstarted.add(rec.id)
    if tally.failed.partition(" ")[0] == rec.id:
        tally.failed = _first_failure(core, array_id, core.arrays.specs[array_id], rec.id)


def _first_failure(core: SchedulerCore, array_id: str, array: ArraySpec, skip: str) -> str:
    """The first member (by index) but ``skip`` that ended other than completed: ``"5_3
    failed"``, or ``""``."""
    jobs, recalled = core.jobs, core.arrays.recalled
    for index in array.indices:
        member = f"{array_id}_{index}"
        if member == skip:
            continue
        rec = jobs.get(member)
        phase = rec.phase if rec is not None else recalled.get(member)
        if phase is not None and phase.terminal and phase is not COMPLETED:
            return f"{member} {phase}"
    return ""


def shrink(tally: ArrayTally) -> None:
    """A set emptied by removals keeps its table (32 MB for a million members): an emptied
    set of the tally is replaced by a new one, so that a done tally weighs next to nothing."""
    if not tally.unstarted:
        tally.unstarted = set()
    if not tally.unended:
        tally.unended = set()


def settle_waiters(core: SchedulerCore, array_id: str, now: float, what: str) -> list[Decision]:
    """The jobs waiting on the whole array: those whose dependencies on it are now met stop
    waiting on it, those with one that can never be met are rejected, the others wait on."""
    waiting = core._dependents.pop(array_id, None)
    if not waiting:
        return []
    tally = core.arrays.tallies[array_id]
    array = core.arrays.specs[array_id]
    out: list[Decision] = []
    still: list[str] = []
    for dep_id in waiting:
        dep = core.jobs[dep_id]
        if dep.phase is not JobPhase.PENDING:
            continue
        kinds = whole_kinds(dep, array_id, array)
        verdicts = [decide(kind, tally) for kind in kinds]
        if False in verdicts:
            broken = min(k for k, v in zip(kinds, verdicts, strict=True) if v is False)
            out.extend(core._reject(dep, never_met(broken, array_id, tally), now))
        elif None in verdicts:
            still.append(dep_id)
        else:
            dep.waiting_on.discard(array_id)
            if not dep.waiting_on and dep.held is None:
                core._enqueue(dep, now, f"dependencies met (array {array_id} {what})")
    if still:
        core._dependents.setdefault(array_id, []).extend(still)
    return out


def recall(core: SchedulerCore, event: ArrayRecalled, now: float) -> list[Decision]:
    """A restarted shell's account of an array whose members ended before the restart:
    they count as ended, in the phases it gives (members the core holds keep their own)."""
    arrays = core.arrays
    array_id = event.array_id
    arrays.specs.setdefault(array_id, event.array)
    arrays.accounted.add(array_id)
    tally = arrays.tallies.get(array_id)
    out: list[Decision] = []
    for member, phase in event.ended.items():
        if member in core.jobs or member in arrays.recalled or not phase.terminal:
            continue
        arrays.recalled[member] = phase
        if tally is not None:
            out.extend(ended(core, array_id, member, phase, now))
    return out
