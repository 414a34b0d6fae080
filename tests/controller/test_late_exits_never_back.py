"""A task that outlived its job, left running in the store by a controller restart, on a node
that never registers again: the node timeout after the restart it is written lost, as any
task of a node that fell silent (it stayed ``Running`` for ever), and its job keeps the end it
had. Should the node come back after all, the task is killed (a stray). The agent is played
by hand (controller/late_exits.py ``never_back``)."""

from __future__ import annotations

from pathlib import Path

from tests.builders import Clock
from tests.controller.conftest import one_node_controller
from tests.controller.test_late_exits_restart import (
    _controller,
    _inventory,
    _restarted_while_a_step_dies,
    _row,
)

from fusesched.api.wire import Heartbeat, TaskLaunch
from fusesched.store.records import JobState
from fusesched.submit.sbatch import parse_sbatch


def test_a_dying_task_on_a_node_never_back_is_written_lost(tmp_path: Path, clock: Clock) -> None:
    ctl, job, task = _restarted_while_a_step_dies(tmp_path, clock)
    try:
        ctl.register(_inventory("n1"))  # (another node: the controller is in use)
        ended = ctl.persist.get_job(job)
        assert ended is not None and ended.state == "Cancelled"
        clock.now += ctl.config.node_timeout_s - 1
        ctl._check_nodes()
        assert _row(ctl, job, task).state is JobState.RUNNING  # (n0 may still come back)
        clock.now += 2
        ctl.heartbeat(Heartbeat(node="n1", running=[]), wait_s=0)
        ctl._check_nodes()
        row = _row(ctl, job, task)
        assert (row.state, row.exit_code) == (JobState.FAILED, -1)
        assert row.end_time == clock.now
        assert not ctl.outliving
        again = ctl.persist.get_job(job)
        assert again is not None
        assert (again.state, again.exit_code, again.reason, again.end_time) == (
            ended.state,
            ended.exit_code,
            ended.reason,
            ended.end_time,
        )
        ctl.register(_inventory("n0", [TaskLaunch(task_id=task, job_id=job)]))
        kills = ctl.heartbeat(Heartbeat(node="n0", running=[task]), wait_s=0).kill
        assert task in {k.task_id for k in kills}
        assert _row(ctl, job, task).exit_code == -1  # (not written again)
    finally:
        ctl.persist.close()


def test_a_job_requeued_for_want_of_its_node_has_its_old_task_written_lost(
    tmp_path: Path, clock: Clock
) -> None:
    """Its node not back in time, a job left running is run again (controller/adoption.py);
    the task of its old run there ends lost with it, not ``Running`` for ever."""
    first = one_node_controller(tmp_path, clock)
    (job,) = first.submit([parse_sbatch("#!/bin/sh\nsleep 60\n").request])
    first.run_cycle()
    (old,) = first.heartbeat(Heartbeat(node="n0", running=[]), wait_s=0).launch
    first.persist.close()
    ctl = _controller(tmp_path, clock)
    try:
        ctl.register(_inventory("n1"))
        clock.now += ctl.config.node_timeout_s + 1
        ctl._check_nodes()
        row = _row(ctl, job, old.task_id)
        assert (row.state, row.exit_code) == (JobState.FAILED, -1)
        shown = ctl.persist.get_job(job)
        assert shown is not None and shown.state == "Pending"
    finally:
        ctl.persist.close()


def test_a_node_back_right_after_the_deadline_does_not_revive_its_lost_task(
    tmp_path: Path, clock: Clock
) -> None:
    """n0 registers right after the deadline wrote its task lost, before anything was
    flushed: the task stays lost (fenced), its end written once."""
    ctl, job, task = _restarted_while_a_step_dies(tmp_path, clock)
    try:
        ctl.register(_inventory("n1"))
        clock.now += ctl.config.node_timeout_s + 1
        ctl.heartbeat(Heartbeat(node="n1", running=[]), wait_s=0)
        ctl._check_nodes()
        lost_at = clock.now
        clock.now += 1
        ctl.register(_inventory("n0", [TaskLaunch(task_id=task, job_id=job)]))
        assert not ctl.outliving
        kills = ctl.heartbeat(Heartbeat(node="n0", running=[task]), wait_s=0).kill
        assert task in {k.task_id for k in kills}
        ctl.run_cycle()
        row = _row(ctl, job, task)
        assert (row.state, row.exit_code, row.end_time) == (JobState.FAILED, -1, lost_at)
    finally:
        ctl.persist.close()
