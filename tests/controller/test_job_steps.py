"""Job steps' shares of their job's slots (controller/job_steps.py): what fits beside the
running steps, what never can, --overlap, and the shares read back from tasks' launches."""

from __future__ import annotations

import pytest

from fusesched.controller.job_steps import (
    StepNeverFits,
    StepsBusy,
    StepShare,
    check_fits,
    in_use,
    next_step_id,
    running_shares,
    share_env,
    share_of,
)
from fusesched.submit.errors import SubmitError

JOB = {"node-a": 2, "node-b": 2}


def share(step_id: int, overlap: bool = False, **slots: int) -> StepShare:
    return StepShare(step_id, tuple((k.replace("_", "-"), v) for k, v in slots.items()), overlap)


def test_a_step_fits_beside_the_running_ones_or_waits() -> None:
    check_fits(JOB, {"node-a": 2, "node-b": 2}, False, [])  # the whole job: fits
    one = share(0, node_a=1)
    check_fits(JOB, {"node-a": 1}, False, [one])  # the slot left
    check_fits(JOB, {"node-b": 2}, False, [one])  # another node
    with pytest.raises(StepsBusy, match=r"Requested nodes are busy: node-a has 1 of 2 in use"):
        check_fits(JOB, {"node-a": 2}, False, [one])
    with pytest.raises(StepsBusy, match=r"by step\(s\) 0, 2"):
        check_fits(JOB, {"node-a": 1}, False, [one, share(1, node_b=1), share(2, node_a=1)])


def test_overlapping_steps_need_no_room_and_take_none() -> None:
    full = share(0, node_a=2, node_b=2)
    check_fits(JOB, {"node-a": 2}, True, [full])  # --overlap: beside anything
    check_fits(JOB, {"node-a": 2}, False, [share(1, True, node_a=2)])  # beside an overlap step
    assert in_use([full, share(1, True, node_a=2)]) == {"node-a": 2, "node-b": 2}


def test_a_step_the_job_could_never_hold_is_refused_at_once() -> None:
    with pytest.raises(StepNeverFits, match=r"asks for 3 task\(s\) on node-a; the job has 2 slot"):
        check_fits(JOB, {"node-a": 3}, False, [])
    with pytest.raises(StepNeverFits, match="has no node node-c"):
        check_fits(JOB, {"node-c": 1}, True, [])  # (overlap or not)
    assert issubclass(StepNeverFits, SubmitError)  # the API's 400
    check_fits(None, {"node-z": 99}, False, [share(0, node_z=1)])  # size unknown: not checked


def test_a_share_travels_in_its_tasks_launch_environment() -> None:
    mine = share(3, True, node_a=2, node_b=1)
    env = share_env(mine)
    assert env["SLURM_STEP_ID"] == env["SLURM_STEPID"] == "3"
    assert share_of(env) == mine
    assert share_of({"PATH": "/bin"}) is None  # mpirun's daemons: no step's
    assert share_of({"FUSESCHED_STEP_ID": "x", "FUSESCHED_STEP_SLOTS": "a:1"}) is None
    assert share_of({"FUSESCHED_STEP_ID": "1", "FUSESCHED_STEP_SLOTS": "a:b"}) is None
    # a node name with a colon (an external pool's) still reads back
    assert share_of(share_env(share(0, **{"pool:n1": 1}))) == StepShare(0, (("pool:n1", 1),))


def test_running_steps_are_read_back_from_their_tasks() -> None:
    a, b = share(0, node_a=1, node_b=1), share(1, node_a=1)
    envs = [share_env(a), share_env(a), share_env(b), {"OTHER": "1"}]  # two tasks of step 0
    assert running_shares(envs) == [a, b]
    assert in_use(running_shares(envs)) == {"node-a": 2, "node-b": 1}
    assert next_step_id([]) == 0
    assert next_step_id([0, 4, 2]) == 5
