"""A job step's variables travel in its tasks' launch environment, never in their command
lines (agent/step.py, agent/step_plan.py); a controller older than that field gets them as
``env NAME=value…`` in front of the command, as before, with a warning."""

from __future__ import annotations

import json

import httpx
import pytest

from fusesched.agent import step
from fusesched.agent.step_args import parse_args
from fusesched.agent.step_plan import StepError, StepLaunch, export_vars, place, settable
from fusesched.agent.step_run import Step

SECRET = "hunter2"
SCRIPT_ENV = {
    "SECRET": SECRET,
    "PATH": "/usr/bin:/bin",
    "HOME": "/home/ada",
    "FUSESCHED_JOB_TOKEN": "job-credential",
    "FUSESCHED_JOB_ID": "7",
    "OMPI_MCA_btl": "tcp,self",
}


def launches(argv: list[str], mpi: bool) -> list[StepLaunch]:
    options = parse_args(argv)
    tasks, _ = place([("node-a", 2), ("node-b", 2)], options.ntasks, None, None)
    exported = export_vars("ALL", SCRIPT_ENV)
    return step._launches(options, SCRIPT_ENV, tasks, exported, "/work", mpi)


def test_the_variables_go_in_the_launch_not_the_command_line() -> None:
    sent = launches(["-n", "3", "sh", "-c", 'echo "$SECRET"'], mpi=False)
    assert [launch.task.node for launch in sent] == ["node-a", "node-a", "node-b"]
    for rank, launch in enumerate(sent):
        assert not any(SECRET in arg for arg in launch.argv), launch.argv
        assert launch.argv[-3:] == ["sh", "-c", 'echo "$SECRET"']
        assert launch.env["SECRET"] == SECRET
        assert launch.env["SLURM_PROCID"] == launch.env["RANK"] == str(rank)
        assert "HOME" not in launch.env and "FUSESCHED_JOB_TOKEN" not in launch.env
        body = launch.request()
        assert body["env"] == launch.env and body["argv"] == launch.argv
        assert SECRET not in json.dumps(body["argv"])


def test_mpirun_reads_the_variables_from_its_own_environment() -> None:
    (mpirun,) = launches(["-n", "4", "--mpi=pmix", "./app"], mpi=True)
    argv = mpirun.argv
    assert "mpirun" in argv and not any(SECRET in arg for arg in argv), argv
    passed = [argv[i + 1] for i, arg in enumerate(argv) if arg == "-x"]
    assert "SECRET" in passed  # -x NAME: the value comes from mpirun's environment
    assert mpirun.env["SECRET"] == SECRET
    assert mpirun.env["OMPI_MCA_btl"] == "tcp,self"  # the script's OpenMPI settings: mpirun's


def test_for_an_older_controller_the_variables_go_before_the_command() -> None:
    (launch,) = launches(["-n", "1", "true"], mpi=False)
    body = launch.request(env_in_argv=True)
    assert "env" not in body
    argv = body["argv"]
    assert isinstance(argv, list) and argv[0] == "env" and f"SECRET={SECRET}" in argv
    assert argv[-len(launch.argv) :] == launch.argv


def test_what_a_launch_may_not_set() -> None:
    """What the job, the task's node or its folder gives a task is never taken from a
    launch's own variables (the controller applies this to what a step sends)."""
    sent = {
        "SECRET": SECRET,
        "SLURM_PROCID": "3",
        "OMPI_MCA_btl": "tcp",
        "HOME": "/elsewhere",
        "TMPDIR": "/elsewhere",
        "CUDA_VISIBLE_DEVICES": "0,1,2,3",
        "FUSESCHED_JOB_TOKEN": "another job's",
        "FUSESCHED_TASK_ID": "7.main.0",
        "FUSESCHED_STEP_SLOTS": "node-a:0",
        "FUSESCHED_STEP_OVERLAP": "1",
        "FUSESCHED_CA": "/tmp/mine.pem",
    }
    assert settable(sent) == {"SECRET": SECRET, "SLURM_PROCID": "3", "OMPI_MCA_btl": "tcp"}


def _old_controller_refusal(body: dict[str, object]) -> httpx.Response:
    """What a controller older than launch variables answers (FastAPI's 422 for an unknown
    field, echoing what it was sent)."""
    tasks = body["tasks"]
    assert isinstance(tasks, list)
    errors = [
        {
            "type": "extra_forbidden",
            "loc": ["body", "tasks", i, "env"],
            "msg": "Extra inputs are not permitted",
            "input": task["env"],
        }
        for i, task in enumerate(tasks)
        if "env" in task
    ]
    return httpx.Response(422, json={"detail": errors})


def test_an_older_controller_gets_the_command_line_form(
    capsys: pytest.CaptureFixture[str],
) -> None:
    bodies: list[dict[str, object]] = []

    def controller(request: httpx.Request) -> httpx.Response:
        body = json.loads(request.content)
        bodies.append(body)
        if any("env" in task for task in body["tasks"]):
            return _old_controller_refusal(body)
        if len(bodies) == 2:
            return httpx.Response(409, json={"detail": "Requested nodes are busy"})
        return httpx.Response(201, json={"step_id": 0, "task_ids": ["7.remote.1", "7.remote.2"]})

    http = httpx.Client(base_url="http://controller", transport=httpx.MockTransport(controller))
    run = Step(http, "7", label=False)
    sent = launches(["-n", "2", "true"], mpi=False)
    assert run.create({"node-a": 2}, False, sent) == "Requested nodes are busy"
    assert run.create({"node-a": 2}, False, sent) is None  # asked again: straight away so
    assert len(bodies) == 3
    first, *again = bodies
    assert all("env" in task for task in first["tasks"])  # type: ignore[attr-defined]
    for body in again:
        for task in body["tasks"]:  # type: ignore[attr-defined]
            assert "env" not in task and task["argv"][0] == "env"
            assert f"SECRET={SECRET}" in task["argv"]
    err = capsys.readouterr().err
    assert err.count("srun: warning: the controller is older than this srun") == 1, err
    assert SECRET not in err


def test_a_refused_variable_is_named_without_its_value() -> None:
    """A controller that knows launch variables and refuses one (too big, a bad name) is not
    taken for an older one, and srun's error names the place, never the values sent back."""
    refusal = {
        "detail": [
            {
                "type": "value_error",
                "loc": ["body", "tasks", 0, "env"],
                "msg": "Value error, SECRET: 200000 bytes, at most 131071",
                "input": {"SECRET": SECRET},
            }
        ]
    }
    http = httpx.Client(
        base_url="http://controller",
        transport=httpx.MockTransport(lambda _: httpx.Response(422, json=refusal)),
    )
    run = Step(http, "7", label=False)
    with pytest.raises(StepError) as raised:
        run.create({"node-a": 1}, False, launches(["-n", "1", "true"], mpi=False))
    assert str(raised.value) == (
        "cannot start the step: tasks.0.env: Value error, SECRET: 200000 bytes, at most 131071"
    )
    assert not run.env_in_argv
