"""``fusesched run --jobid ID --overlap --pty`` and ``srun --pty`` in a job, their pure
parts: the options taken, the node chosen, the refusals (cli/srun_attach.py,
agent/step_pty.py)."""

from __future__ import annotations

import signal
import time
from types import SimpleNamespace
from typing import Any

import pytest

from fusesched.agent.step_plan import StepOptions, StepTask
from fusesched.agent.step_pty import EXIT_WAIT_S, _exit_code, refusal, step_body
from fusesched.cli.srun_args import RunUsageError, split_run_args
from fusesched.cli.srun_attach import (
    JOBID,
    OVERLAP,
    AttachOptions,
    AttachUsageError,
    attach_options,
    in_job,
    pick_node,
)

RUNNING = {"id": "7", "state": "Running", "nodes": ["node-a", "node-b"]}


@pytest.mark.parametrize(
    ("options", "wanted"),
    [
        ((), AttachOptions()),
        (("-w", "node-b"), AttachOptions(node="node-b")),
        (("-wnode-b", "-J", "dbg"), AttachOptions("node-b", "dbg")),
        (("--nodelist=node-b", "--job-name=dbg"), AttachOptions("node-b", "dbg")),
    ],
)
def test_the_options_taken(options: tuple[str, ...], wanted: AttachOptions) -> None:
    assert attach_options(options) == wanted


@pytest.mark.parametrize(
    ("options", "said"),
    [
        (("-n", "2"), "-n: fusesched run --jobid starts a step in a job that exists"),
        (("--mem=1G",), "--mem: fusesched run --jobid"),
        (("-w",), "-w needs a value"),
        (("-w", "node-a,node-b"), "runs one task, on one node"),
    ],
)
def test_other_options_are_refused(options: tuple[str, ...], said: str) -> None:
    with pytest.raises(AttachUsageError, match=said):
        attach_options(options)


def test_the_node_is_the_jobs_first_or_the_one_named() -> None:
    assert pick_node(RUNNING, None) == "node-a"
    assert pick_node(RUNNING, "node-b") == "node-b"
    with pytest.raises(AttachUsageError, match="runs on node-a,node-b, not there"):
        pick_node(RUNNING, "node-c")
    with pytest.raises(AttachUsageError, match="job 8 is not running \\(it is Pending\\)"):
        pick_node({"id": "8", "state": "Pending", "nodes": []}, None)


def test_run_reads_jobid_and_overlap_as_its_own() -> None:
    parsed = split_run_args(
        ["--jobid", "7", "--overlap", "--pty", "-w", "node-b", "bash", "-l"],
        own_flags=frozenset({"--pty", OVERLAP}),
        own_values=("--controller", "--token", "--ca", JOBID),
    )
    assert parsed.own == {JOBID: "7", OVERLAP: "", "--pty": ""}
    assert parsed.options == ("-w", "node-b") and parsed.command == ("bash", "-l")
    with pytest.raises(RunUsageError, match="unknown option --jobid"):
        split_run_args(["--jobid", "7", "bash"])  # (salloc's split: not its own)


def test_srun_pty_runs_one_task_and_no_mpi() -> None:
    one = [StepTask(0, "node-a", 0, 0, 1)]
    two = [*one, StepTask(1, "node-a", 0, 1, 2)]
    options = StepOptions(command=("bash",), pty=True)
    assert "runs one task, on one terminal (not 2" in str(refusal(options, two, False))
    assert "not an MPI job" in str(refusal(options, one, True))
    het = StepOptions(command=("bash",), pty=True, het_groups=(1,))
    assert "--het-group" in str(refusal(het, one, False))


def test_the_step_asked_for() -> None:
    options = StepOptions(command=("bash", "-i"), overlap=True, pty=True)
    task = StepTask(0, "node-b", 0, 0, 1)
    terminal = {"term": "xterm", "rows": 24, "cols": 80}
    body = step_body(options, task, {"A": "1"}, "/home/ann", terminal, "bash", {})
    assert body["slots"] == {"node-b": 1} and body["overlap"] and body["pty"] == terminal
    (launch,) = body["tasks"]
    assert launch["node"] == "node-b" and launch["argv"][-3:] == ["/home/ann", "bash", "-i"]
    assert launch["env"]["A"] == "1" and launch["env"]["SLURM_PROCID"] == "0"
    assert not {"gpus", "cpus_per_task", "memory"} & body.keys()


def test_a_terminal_step_asks_for_its_cpus_memory_and_gpus_as_any_step() -> None:
    """``srun --pty -c 2 --mem-per-cpu=1G --gpus-per-task=1 bash``: the same fields as
    ``srun`` without ``--pty`` (agent/step_resources.py, agent/step_gpus.py)."""
    task = StepTask(0, "node-b", 0, 0, 1)
    terminal = {"term": "xterm", "rows": 24, "cols": 80}
    asked = StepOptions(
        command=("bash",), pty=True, cpus_per_task=2, mem_per_cpu="1G", gpus_per_task=1
    )
    body = step_body(asked, task, {}, "/", terminal, "bash", {"SLURM_CPUS_PER_TASK": "8"})
    assert body["cpus_per_task"] == 2 and body["memory"] == {"node-b": 2 * 2**30}
    assert body["gpus"] == {"node-b": 1} and body["gpus_per_task"] == 1
    assert body["tasks"][0]["env"]["SLURM_CPUS_PER_TASK"] == "2"
    inherited = StepOptions(command=("bash",), pty=True, mem_per_cpu="1G")
    body = step_body(inherited, task, {}, "/", terminal, "bash", {"SLURM_CPUS_PER_TASK": "3"})
    assert "cpus_per_task" not in body and body["memory"] == {"node-b": 3 * 2**30}
    whole = StepOptions(command=("bash",), pty=True, mem="0")  # (all of the job's)
    assert step_body(whole, task, {}, "/", terminal, "bash", {})["memory"] == {"node-b": 0}
    both = StepOptions(command=("bash",), pty=True, mem="1G", mem_per_cpu="1G")
    with pytest.raises(ValueError, match="not with --mem and --mem-per-cpu"):
        step_body(both, task, {}, "/", terminal, "bash", {})


def test_an_empty_jobid_is_a_usage_error() -> None:
    said: list[str] = []

    class Untouched:
        def __getattr__(self, name: str) -> None:
            raise AssertionError(f"the controller was asked ({name})")

    assert in_job("", ("bash",), (), True, Untouched(), said.append) == 2
    assert said == ["error: --jobid needs a job id"]


def test_a_task_left_running_by_its_ended_job_counts_as_killed_at_once() -> None:
    """An interactive shell ignores SIGTERM: killed after the grace, once its job has ended
    (cancelled), it is never said to have exited; srun does not wait for that."""

    class Cancelled:
        def task(self, task_id: str) -> dict[str, Any]:
            return {"task_id": task_id, "state": "running", "exit_code": None}

        def show(self, job_id: str) -> dict[str, Any]:
            return {"id": job_id, "state": "Cancelled"}

    started = time.monotonic()
    assert _exit_code(Cancelled(), "7", "7.remote.1") == 128 + signal.SIGKILL
    assert time.monotonic() - started < EXIT_WAIT_S / 10


def test_bad_resource_options_of_a_terminal_step_are_said_not_raised(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """``srun --pty --mem=1G --mem-per-cpu=1G bash``: an error and exit status 2, as srun
    without ``--pty``, before the controller is asked."""
    from fusesched.agent import step_pty

    monkeypatch.setattr(step_pty, "refusal", lambda *_: None)  # (stdin is not a terminal here)
    monkeypatch.setattr("sys.stdin", SimpleNamespace(fileno=lambda: 0))
    monkeypatch.setattr("fusesched.cli.pty_client.window", lambda _fd: (24, 80))
    both = StepOptions(command=("bash",), pty=True, mem="1G", mem_per_cpu="1G")
    env = {"FUSESCHED_CONTROLLER": "http://127.0.0.1:9", "FUSESCHED_JOB_ID": "7"}
    task = StepTask(0, "node-b", 0, 0, 1)
    assert step_pty.run_on_terminal(both, env, [task], {}, "/", "bash") == 2
    assert "not with --mem and --mem-per-cpu" in capsys.readouterr().err
