"""The job life cycle: one transition table, everything else is illegal, history is kept."""

from __future__ import annotations

import itertools

import pytest

from builders import cancel, exited, job, nodes, run_script, submit
from fusesched.model.phases import (
    TERMINAL,
    TRANSITIONS,
    IllegalTransition,
    JobPhase,
    Transition,
    check_transition,
)

ALL_PAIRS = list(itertools.product(JobPhase, JobPhase))
LEGAL = [(old, new) for old, new in ALL_PAIRS if new in TRANSITIONS[old]]
ILLEGAL = [(old, new) for old, new in ALL_PAIRS if new not in TRANSITIONS[old]]


def test_table_covers_every_phase() -> None:
    assert set(TRANSITIONS) == set(JobPhase)
    assert all(isinstance(v, frozenset) for v in TRANSITIONS.values())


def test_terminal_phases_leave_only_by_a_requeue_on_request() -> None:
    """An ended job moves only when it is requeued on request (scontrol requeue: back to
    the queue, or to wait for its dependencies again; core/ended_requeue.py)."""
    assert {p for p in JobPhase if p.terminal} == TERMINAL
    for phase in TERMINAL:
        assert TRANSITIONS[phase] == frozenset({JobPhase.QUEUED, JobPhase.PENDING})
    for phase in set(JobPhase) - TERMINAL:
        assert TRANSITIONS[phase], f"{phase} is not terminal but has no way out"


def test_every_phase_is_reachable_from_pending() -> None:
    seen = {JobPhase.PENDING}
    frontier = [JobPhase.PENDING]
    while frontier:
        for nxt in TRANSITIONS[frontier.pop()]:
            if nxt not in seen:
                seen.add(nxt)
                frontier.append(nxt)
    assert seen == set(JobPhase)


@pytest.mark.parametrize(("old", "new"), LEGAL, ids=[f"{o}->{n}" for o, n in LEGAL])
def test_legal_transition_is_accepted(old: JobPhase, new: JobPhase) -> None:
    check_transition("j", old, new)


@pytest.mark.parametrize(("old", "new"), ILLEGAL, ids=[f"{o}->{n}" for o, n in ILLEGAL])
def test_other_transitions_raise(old: JobPhase, new: JobPhase) -> None:
    with pytest.raises(IllegalTransition, match="j42"):
        check_transition("j42", old, new)


def test_no_phase_may_move_to_itself() -> None:
    assert all((p, p) in ILLEGAL for p in JobPhase)


def test_transition_record_is_frozen() -> None:
    t = Transition(1.0, JobPhase.PENDING, JobPhase.QUEUED, "submitted")
    with pytest.raises(AttributeError):
        t.reason = "other"  # type: ignore[misc]


# ----------------------------------------------------------------------------- via the core


def story(run: object, job_id: str) -> list[tuple[float, str, str]]:
    return [(t.time, t.new.value, t.reason) for t in run.core.jobs[job_id].history]  # type: ignore[attr-defined]


def test_history_records_time_and_reason_of_each_step() -> None:
    run = run_script(
        nodes(1, cpu=4),
        [
            (0, submit(job("a").tasks(1, cpu=4).walltime(10).build())),
            (1, submit(job("b").tasks(1, cpu=4).walltime(10).build())),
            (10, exited("a")),
            (15, exited("b", code=3)),
        ],
        backfill="none",
    )
    assert story(run, "a") == [
        (0, "queued", "submitted"),
        (0, "running", "resources available"),
        (10, "completed", "exit 0"),
    ]
    assert story(run, "b") == [
        (1, "queued", "submitted"),
        (10, "running", "resources available"),
        (15, "failed", "exit 3"),
    ]
    history = run.core.jobs["a"].history
    assert [t.old for t in history] == [JobPhase.PENDING, JobPhase.QUEUED, JobPhase.RUNNING]
    assert all(t.new in TRANSITIONS[t.old] for t in history)


def test_history_keeps_the_reason_given_by_events() -> None:
    run = run_script(
        nodes(1, cpu=4),
        [
            (0, submit(job("a").walltime(10).build(), job("b").walltime(10).build())),
            (5, exited("a", code=0, reason="all ranks done")),
            (6, cancel("b", reason="user pressed stop")),
            (7, exited("b", code=143)),
        ],
    )
    assert story(run, "a")[-1] == (5, "completed", "all ranks done")
    assert story(run, "b")[-1] == (7, "cancelled", "user pressed stop")


def test_a_rejected_job_is_cancelled_with_the_reason() -> None:
    run = run_script(nodes(1, cpu=4), [(3, submit(job("big").tasks(1, cpu=8).build()))])
    ((time, phase, reason),) = story(run, "big")
    assert (time, phase) == (3, "cancelled")
    assert reason.startswith("rejected:")
    assert reason.removeprefix("rejected: ") == run.rejected()["big"]
