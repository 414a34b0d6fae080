"""Picking a job step's own CPU ids and memory among its job's, without I/O
(controller/step_cpus.py): the job's own ids first, then the node's free ones, lowest first;
a wait while running steps hold too many, a refusal when the job has too few, ``--overlap``
sharing, each task's even share, what the live tasks hold, and what goes back to the pool."""

from __future__ import annotations

from types import SimpleNamespace

import pytest

from fusesched.api.wire import TaskLaunch
from fusesched.controller.job_steps import StepNeverFits, StepsBusy, StepShare, share_env
from fusesched.controller.pools import Grant
from fusesched.controller.records import LiveTask
from fusesched.controller.step_cpus import (
    held,
    pick_cpus,
    pick_memory,
    returned,
    task_cpus,
    task_share,
)

JOB = {"a": 4, "b": 2}
OWN = {"a": (6, 7)}  # the batch script's, on node a
FREE = {"a": (0, 1, 2, 3, 9), "b": (3, 1, 2, 0)}
GIB = 2**30


def test_the_jobs_own_cpus_first_then_the_lowest_free() -> None:
    assert pick_cpus(JOB, OWN, FREE, {"a": 3, "b": 2}, False, {}) == {
        "a": (0, 6, 7),
        "b": (0, 1),
    }
    holding = {"a": {6: 0, 0: 1}, "b": {0: 2}}
    assert pick_cpus(JOB, OWN, FREE, {"a": 2, "b": 1}, False, holding) == {
        "a": (1, 7),
        "b": (1,),
    }


def test_steps_ending_out_of_order_free_their_own_cpus() -> None:
    """Steps 0, 1 and 2 held a's 6+7, 0 and 1; 1 ended first: the next gets 0 again."""
    holding = {"a": {6: 0, 7: 0, 1: 2}}
    assert pick_cpus(JOB, OWN, FREE, {"a": 1}, False, holding) == {"a": (0,)}


def test_a_step_waits_for_cpus_the_running_steps_hold() -> None:
    holding = {"a": {6: 0, 7: 0, 0: 1}}
    with pytest.raises(StepsBusy) as busy:
        pick_cpus(JOB, OWN, FREE, {"a": 2}, False, holding)
    assert str(busy.value) == "Requested nodes are busy: a has 3 of 4 CPUs in use (by step(s) 0, 1)"


def test_a_node_with_too_few_free_ids_runs_the_step_unpinned_there() -> None:
    """(other jobs' tasks pinned to more than they booked: fractions rounded up; an agent
    listing fewer ids than CPUs): the step fits the job's CPUs, and would wait for ever"""
    assert pick_cpus(JOB, {}, {"a": (0, 1, 2), "b": (5,)}, {"a": 2, "b": 2}, False, {}) == {
        "a": (0, 1),
        "b": (),
    }


def test_a_step_the_job_has_too_few_cpus_for_never_fits() -> None:
    with pytest.raises(StepNeverFits, match="asks for 3 CPU\\(s\\) on b; the job has 2 there"):
        pick_cpus(JOB, OWN, FREE, {"b": 3}, True, {})


def test_an_overlapping_step_takes_the_first_whoever_holds_them() -> None:
    holding = {"a": {6: 0, 7: 0, 0: 1, 1: 1}}
    assert pick_cpus(JOB, OWN, FREE, {"a": 3}, True, holding) == {"a": (0, 1, 6)}


def test_memory_is_counted_against_the_jobs_on_each_node() -> None:
    job = {"a": 4 * GIB, "b": 0}
    assert pick_memory(job, {"a": GIB, "b": GIB}, False, {"a": 3 * GIB}) == {"a": GIB, "b": GIB}
    assert pick_memory(job, {"a": 0}, False, {}) == {"a": 4 * GIB}  # --mem=0: all of it
    with pytest.raises(StepsBusy, match="a has 3072M of 4096M memory in use"):
        pick_memory(job, {"a": 2 * GIB}, False, {"a": 3 * GIB})
    assert pick_memory(job, {"a": 2 * GIB}, True, {"a": 3 * GIB}) == {"a": 2 * GIB}
    with pytest.raises(StepNeverFits, match="asks for 5120M of memory on a; the job has 4096M"):
        pick_memory(job, {"a": 5 * GIB}, True, {})


def test_each_task_gets_an_even_share_of_its_steps_cpus() -> None:
    ids = (0, 1, 6, 7)
    assert [task_share(ids, (2, 2), 2, k) for k in range(2)] == [(0, 1), (6, 7)]
    assert task_share(ids, (2, 2), 1, 0) == ids  # (an MPI step's mpirun: all of them)


def test_each_task_gets_its_own_components_cpus_and_none_is_left_unheld() -> None:
    """A heterogeneous step's tasks on a node: component 0's 2 CPUs, component 1's 1; an
    uneven split gives the last task what is left (else no task would give it back)."""
    assert [task_share((0, 1, 2), (2, 1), 2, k) for k in range(2)] == [(0, 1), (2,)]
    assert [task_share((0, 1, 2), (), 2, k) for k in range(2)] == [(0,), (1, 2)]


def task(
    node: str,
    cpus: tuple[int, ...],
    step: int | None,
    state: str = "running",
    overlap: bool = False,
    memory: int | None = None,
) -> LiveTask:
    """A live task of job j on ``node`` pinned to ``cpus``: a step's (None: the script)."""
    env = {} if step is None else share_env(StepShare(step, ((node, 1),), overlap))
    launch = TaskLaunch(
        task_id=f"j.{node}.{cpus}", job_id="j", env=env, cpu_ids=list(cpus), memory_bytes=memory
    )
    return LiveTask(launch, node, Grant(cpus), remote=step is not None, state=state)


def test_what_the_running_steps_hold_is_read_from_their_live_tasks() -> None:
    tasks = [
        task("a", (0, 1), 0, memory=GIB),
        task("a", (2,), 1, memory=GIB),
        task("a", (3,), 2, state="exited", memory=GIB),
        task("a", (4,), 3, overlap=True, memory=GIB),
        task("a", (6, 7), None),  # the batch script: no step's
    ]
    now = held(tasks)
    assert now.cpus == {"a": {0: 0, 1: 0, 2: 1}}
    assert now.memory == {"a": 2 * GIB}


def test_an_ending_task_gives_back_the_ids_no_other_task_holds() -> None:
    batch = task("a", (6, 7), None)
    first = task("a", (6, 7), 0)
    shared = task("a", (6, 0), 1, overlap=True)

    job = SimpleNamespace(tasks={"b": batch, "s": first, "o": shared})
    ctl = SimpleNamespace(outliving={})  # (no task of an earlier run still dying)
    assert returned(ctl, first, job) == Grant(())  # type: ignore[arg-type]
    batch.state = "exited"
    assert returned(ctl, first, job) == Grant((7,))  # type: ignore[arg-type]


def test_a_heterogeneous_jobs_components_count_their_own_steps() -> None:
    """A step on component 1 holds CPUs 0-1: a step on component 0 may not have them, but
    they do not count against component 0's CPUs."""
    on_one = task("a", (0, 1), 0, memory=GIB)
    env = share_env(StepShare(0, (("a", 2),), het=((1, (("a", 2),)),)))
    on_one.launch = on_one.launch.model_copy(update={"env": env})
    now = held([on_one], components=[0])
    assert now.cpus == {"a": {0: 0, 1: 0}} and now.counted == {} and now.memory == {}
    assert held([on_one], components=[1]).counted == {"a": 2}
    picked = pick_cpus({"a": 2}, {}, {"a": (0, 1, 2, 3)}, {"a": 2}, False, now.cpus, now.counted)
    assert picked == {"a": (2, 3)}


def test_a_step_asks_for_c_cpus_per_task_else_its_components() -> None:
    shares = [(0, [("a", 2), ("b", 1)]), (1, [("a", 1)])]
    per_task = {0: 2, 1: 1}  # (sbatch -c 2 : -c 1)
    assert task_cpus(shares, per_task, None, {"a", "b"}) == {"a": [2, 2, 1], "b": [2]}
    assert task_cpus(shares, per_task, 3, {"a"}) == {"a": [3, 3, 3]}  # (b: no task of it there)
    assert task_cpus(shares, {1: 1}, None, {"b"}) == {"b": [0]}  # (component 0's: a fraction)
