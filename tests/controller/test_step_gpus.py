"""Picking a job step's GPUs among its job's, without I/O (controller/step_gpus.py): the
lowest free indices, a wait while running steps hold them, a refusal when the job has too
few, ``--overlap`` sharing, each task's own with ``--gpus-per-task``, and the marks that
carry what a step holds in its tasks' launch environment."""

from __future__ import annotations

import pytest

from fusesched.controller.job_steps import StepNeverFits, StepsBusy, StepShare, share_env
from fusesched.controller.step_gpus import (
    gpus_env,
    gpus_of,
    held_gpus,
    pick_gpus,
    task_gpus,
)

JOB = {"a": (0, 1, 2, 3), "b": (4, 5)}


def test_the_lowest_free_gpus_are_picked() -> None:
    assert pick_gpus(JOB, {"a": 2, "b": 1}, False, {}) == {"a": (0, 1), "b": (4,)}
    held = {0: {"a": (0, 2)}, 3: {"b": (4,)}}
    assert pick_gpus(JOB, {"a": 2, "b": 1}, False, held) == {"a": (1, 3), "b": (5,)}
    assert pick_gpus(JOB, {"a": 0}, False, held) == {"a": ()}


def test_a_step_waits_for_gpus_the_running_steps_hold() -> None:
    held = {0: {"a": (0, 1)}, 1: {"a": (2,)}, 2: {"b": (4,)}}
    with pytest.raises(StepsBusy) as busy:
        pick_gpus(JOB, {"a": 2, "b": 1}, False, held)
    assert str(busy.value) == (
        "Requested nodes are busy: a has 3 of 4 GPUs in use (by step(s) 0, 1)"
    )


def test_a_step_the_job_has_too_few_gpus_for_never_fits() -> None:
    with pytest.raises(StepNeverFits, match="asks for 3 GPU\\(s\\) on b; the job has 2 there"):
        pick_gpus(JOB, {"b": 3}, True, {})
    with pytest.raises(StepNeverFits, match="the job has 0 there"):
        pick_gpus(JOB, {"c": 1}, False, {})


def test_an_overlapping_step_takes_gpus_whoever_holds_them() -> None:
    held = {0: {"a": (0, 1, 2, 3)}}
    assert pick_gpus(JOB, {"a": 2}, True, held) == {"a": (0, 1)}


def test_each_task_gets_its_own_with_gpus_per_task() -> None:
    step = (2, 3, 5, 7)
    assert [task_gpus(step, 2, k) for k in range(2)] == [(2, 3), (5, 7)]
    assert task_gpus(step, None, 1) == step


def test_what_a_step_holds_travels_in_its_tasks_marks() -> None:
    picked = {"node-a:1": (0, 3), "b": ()}
    env = gpus_env(picked)
    assert env == {"FUSESCHED_STEP_GPUS": "node-a:1:0+3,b:"}
    assert gpus_of(env) == picked
    assert gpus_of({}) is None
    assert gpus_of({"FUSESCHED_STEP_GPUS": "a:x"}) is None
    holding = share_env(StepShare(4, (("a", 1),))) | gpus_env({"a": (1,)})
    sharing = share_env(StepShare(5, (("a", 1),), overlap=True)) | gpus_env({"a": (0,)})
    plain = share_env(StepShare(6, (("a", 1),)))  # asked for none: holds none
    daemon = {"FUSESCHED_STEP_ID": "4"} | gpus_env({"a": (2,)})
    assert held_gpus([holding, holding, sharing, plain, daemon, {}]) == {4: {"a": (1,)}}
