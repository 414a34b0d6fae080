"""``sbatch --signal=SIG@T`` warns a batch script's job steps, not its shell, as Slurm's
(controller/step_warning.py); ``B:`` warns the shell alone. Found with submitit: its jobs
ask ``--signal=USR2@90`` and run ``srun python …``, whose python requeues the job when
warned; fusesched signalled the batch script's process group instead, the untrapped USR2
killed the shell and the job failed. The agents are played by hand."""

from __future__ import annotations

import itertools

from fastapi.testclient import TestClient
from tests.builders import Clock
from tests.controller.test_oom_exit_zero import sbatch, start
from tests.controller.test_running_limit import submit

from fusesched.api.wire import Heartbeat, TaskSignal
from fusesched.controller import step_warning
from fusesched.controller.service import Controller
from fusesched.controller.signals import MAX_QUEUED

STEP = {"slots": {"n0": 1}, "tasks": [{"node": "n0", "argv": ["python", "train.py"]}]}


def _step(client: TestClient, job: str) -> str:
    answer = client.post(f"/v1/jobs/{job}/steps", json=STEP)
    assert answer.status_code == 201, answer.text
    (task,) = answer.json()["task_ids"]
    return str(task)


_LOOKS = itertools.count(0, 10)


def check(ctl: Controller) -> list[str]:
    """One look (each a later second: :func:`step_warning.check` looks once a second)."""
    return step_warning.check(ctl, now_s=float(next(_LOOKS)))


def _signals(ctl: Controller, running: list[str]) -> list[tuple[str, str, bool]]:
    reply = ctl.heartbeat(Heartbeat(node="n0", running=running), wait_s=0)
    return sorted((s.task_id, s.signal, s.main_only) for s in reply.signal)


def test_the_steps_are_warned_and_the_shell_is_not(
    ctl: Controller, client: TestClient, clock: Clock
) -> None:
    job = sbatch(ctl, "-t", "2", "--signal=USR2@90")
    (batch,) = start(ctl)
    assert batch.signal is None  # the shell's launch carries no warning: its agent sends none
    step = _step(client, job)
    start(ctl, [batch.task_id])
    running = [batch.task_id, step]
    assert check(ctl) == [] and _signals(ctl, running) == []  # not due yet
    clock.now += 29
    assert check(ctl) == []
    clock.now += 2  # 31 s after the start: 120 - 90 s passed
    assert check(ctl) == [job]
    assert _signals(ctl, running) == [(step, "USR2", False)]
    assert check(ctl) == [] and _signals(ctl, running) == []  # once a run
    assert ctl.core.jobs[job].phase.value == "running"


def test_a_new_time_limit_moves_the_steps_warning(
    ctl: Controller, client: TestClient, clock: Clock
) -> None:
    job = sbatch(ctl, "-t", "10", "--signal=USR1@60")
    (batch,) = start(ctl)
    step = _step(client, job)
    start(ctl, [batch.task_id])
    answer = client.post(f"/v1/jobs/{job}/update", json={"walltime_s": 120})
    assert answer.status_code in (200, 202), answer.text
    clock.now += 59
    assert check(ctl) == []
    clock.now += 2
    assert check(ctl) == [job]
    assert _signals(ctl, [batch.task_id, step]) == [(step, "USR1", False)]


def test_b_warns_the_shell_in_its_launch_and_no_step(
    ctl: Controller, client: TestClient, clock: Clock
) -> None:
    job = sbatch(ctl, "-t", "2", "--signal=B:USR1@90")
    (batch,) = start(ctl)
    assert batch.signal is not None
    assert (batch.signal.name, batch.signal.before_s, batch.signal.main_only) == ("USR1", 90, True)
    _step(client, job)
    start(ctl, [batch.task_id])
    clock.now += 100
    assert check(ctl) == []


def test_a_job_without_a_script_keeps_the_warning_in_its_launches(
    ctl: Controller, client: TestClient
) -> None:
    # a command (a YAML job, fusesched run): no shell, its tasks are the program
    submit(
        client,
        {"resources": {"cpu": "1"}, "argv": ["sleep", "600"]},
        walltime_s=120,
        signal="USR1@60",
    )
    (launch,) = start(ctl)
    assert launch.signal is not None
    assert (launch.signal.name, launch.signal.main_only) == ("USR1", False)
    assert check(ctl) == []


def test_at_most_one_look_a_second(ctl: Controller, client: TestClient, clock: Clock) -> None:
    job = sbatch(ctl, "-t", "2", "--signal=USR2@90")
    (batch,) = start(ctl)
    step = _step(client, job)
    start(ctl, [batch.task_id])
    clock.now += 31
    assert step_warning.check(ctl, now_s=5000.0) == [job]
    _signals(ctl, [batch.task_id, step])
    ctl.jobs[job].step_warned = None  # (as if not warned: only the rate limit stops it)
    assert step_warning.check(ctl, now_s=5000.5) == []
    assert step_warning.check(ctl, now_s=5001.0) == [job]


def test_a_step_still_launching_is_warned_once_it_runs(
    ctl: Controller, client: TestClient, clock: Clock
) -> None:
    job = sbatch(ctl, "-n", "2", "-t", "2", "--signal=USR2@90")
    (batch,) = start(ctl)
    step = _step(client, job)  # (not yet taken by its agent)
    clock.now += 31
    assert check(ctl) == []
    start(ctl, [batch.task_id])  # its agent runs it now
    assert check(ctl) == [job]
    assert _signals(ctl, [batch.task_id, step]) == [(step, "USR2", False)]
    later = _step(client, job)  # a step started after the warning: none, as in Slurm
    start(ctl, [batch.task_id, step])
    assert check(ctl) == [] and _signals(ctl, [batch.task_id, step, later]) == []


def test_a_full_signal_queue_is_tried_again(
    ctl: Controller, client: TestClient, clock: Clock
) -> None:
    job = sbatch(ctl, "-t", "2", "--signal=USR2@90")
    (batch,) = start(ctl)
    step = _step(client, job)
    start(ctl, [batch.task_id])
    queue = ctl.nodes["n0"].signals
    queue.extend(TaskSignal(task_id=f"x{i}", signal="USR1") for i in range(MAX_QUEUED))
    clock.now += 31
    assert check(ctl) == []
    queue.clear()
    assert check(ctl) == [job]
    assert _signals(ctl, [batch.task_id, step]) == [(step, "USR2", False)]


def test_a_new_run_is_warned_again(ctl: Controller, client: TestClient, clock: Clock) -> None:
    job = sbatch(ctl, "-t", "2", "--signal=USR2@90")
    (batch,) = start(ctl)
    step = _step(client, job)
    start(ctl, [batch.task_id])
    clock.now += 31
    assert check(ctl) == [job]
    _signals(ctl, [batch.task_id, step])
    # a restart in place: the batch task starts again (new tasks, a new run's time limit)
    clock.now += 10
    ctl.jobs[job].tasks[batch.task_id].start_time = clock.now
    assert check(ctl) == []  # (its new run is 0 s old)
    clock.now += 31
    assert check(ctl) == [job]
    assert _signals(ctl, [batch.task_id, step]) == [(step, "USR2", False)]
