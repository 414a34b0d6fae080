"""``fusesched salloc``'s pure parts: its arguments, the job that holds the allocation, the
allocation read back from that job's output and the command's environment
(tests/live/test_salloc_live.py runs the command against a live cluster)."""

from __future__ import annotations

import signal
from pathlib import Path
from typing import Any

import pytest
from typer.testing import CliRunner

from fusesched.agent.step_plan import export_vars, read_hostfile
from fusesched.cli import salloc
from fusesched.cli.main import app
from fusesched.cli.salloc_plan import (
    HOLDER,
    NO_SHELL,
    READY,
    Allocation,
    allocation_env,
    allocation_request,
    hostfile_text,
    read_allocation,
    shell_command,
    split_salloc_args,
    workdir,
)
from fusesched.cli.srun_args import RunUsageError
from fusesched.client_base import ControllerError
from fusesched.controller.launchenv import TaskSlot, hostfile
from fusesched.hostlist import compress_hostlist
from fusesched.submit.errors import SubmitError


def test_the_options_end_at_the_command_which_may_be_left_out() -> None:
    parsed = split_salloc_args(["-N", "2", "-t", "30", "sh", "-c", "srun hostname"])
    assert parsed.run.options == ("-N", "2", "-t", "30")
    assert parsed.command == ("sh", "-c", "srun hostname")
    alone = split_salloc_args(["-N2", "--exclusive"])
    assert alone.run.options == ("-N2", "--exclusive") and alone.command == ()
    assert split_salloc_args(["-N", "1", "--", "-weird"]).command == ("-weird",)
    own = split_salloc_args(["-Q", "--controller", "http://c:1", "--no-shell", "-n", "2"])
    assert own.run.quiet and own.no_shell
    assert own.run.own == {"--controller": "http://c:1", NO_SHELL: ""}
    assert split_salloc_args(["--help"]).run.help
    assert split_salloc_args(["-l", "true"]).warnings  # srun's: ignored, with a warning


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["-o", "out.txt"], "-o: the command runs here"),
        (["--error=e.txt", "true"], "--error: the command runs here"),
        (["--open-mode=append", "true"], "--open-mode"),
        (["--array=1-3", "true"], "--array: salloc makes one allocation"),
        (["--wrap", "echo hi"], "--wrap: salloc takes the command itself"),
        (["--wait", "true"], "--wait: salloc always waits"),
        (["-W", "true"], "-W: salloc always waits"),
        (["--requeue", "true"], "--requeue: an allocation is never requeued"),
        (["--parsable"], "--parsable"),
        (["--test-only"], "--test-only"),
        (["--pty", "bash"], "--pty: not needed"),
        (["-N"], "-N needs a value"),
        (["--frobnicate", "x"], "unknown option --frobnicate"),
        (["--ntask", "2"], "did you mean --ntasks?.*fusesched salloc cannot tell"),
        (["--no-shell", "bash"], "--no-shell runs no command"),
    ],
)
def test_bad_arguments_are_refused_with_a_reason(args: list[str], message: str) -> None:
    with pytest.raises(RunUsageError, match=message.replace("?", r"\?")):
        split_salloc_args(args)


def test_the_job_holds_the_allocation_and_writes_nothing_on_the_node() -> None:
    parsed = split_salloc_args(["-N", "2", "-t", "5", "-D", "/scratch/me", "--mem=64M"])
    request, warnings = allocation_request(parsed, ("/bin/bash",))
    assert warnings == ()
    assert request.name == "bash"  # named after the command, as salloc's job is
    assert request.walltime_s == 300
    assert request.requeue is False  # a requeued allocation would move under the command
    assert request.output is None and request.error is None  # no slurm-N.out anywhere
    (group,) = request.groups
    assert group.script is not None and HOLDER in group.script
    assert group.workdir is None  # -D is where the command runs, here
    assert request.slurm_env  # the holder's task gets $FUSESCHED_HOSTFILE to print
    named, _ = allocation_request(split_salloc_args(["-J", "mine"]), ("sh",))
    assert named.name == "mine"
    with pytest.raises(SubmitError, match="time"):
        allocation_request(split_salloc_args(["-t", "soon"]), ("sh",))


def test_the_command_runs_in_chdir_else_here() -> None:
    assert workdir(split_salloc_args(["-N", "1"]), "/home/me") == "/home/me"
    assert workdir(split_salloc_args(["-D", "work"]), "/home/me") == "/home/me/work"
    assert workdir(split_salloc_args(["--chdir=/tmp/x"]), "/home/me") == "/tmp/x"
    assert workdir(split_salloc_args(["-D/abs", "true"]), "/home/me") == "/abs"


def test_the_allocation_is_read_from_the_holders_output() -> None:
    slots = [
        TaskSlot("7.main.0", "main", 0, 0, "node-b", 0, 0, 2),
        TaskSlot("7.main.1", "main", 1, 1, "node-b", 0, 1, 2),
        TaskSlot("7.main.2", "main", 2, 2, "node-a", 1, 0, 1),
    ]
    printed = hostfile(slots)  # what the controller gives the job, as the holder prints it
    assert read_allocation(printed) is None  # the marker has not come yet
    hosts = read_allocation(printed + READY + "\n")
    assert hosts == [("node-b", 2), ("node-a", 1)]
    assert hostfile_text(hosts) == printed  # written here in the agent's format
    assert read_hostfile(hostfile_text(hosts)) == hosts
    assert read_allocation(READY + "\n") == []


@pytest.mark.parametrize(
    ("nodes", "short"),
    [
        (["n1", "n2"], "n[1-2]"),
        (["node-a", "node-b"], "node-a,node-b"),
        (["n1", "n2", "n3", "n5", "gpu07", "gpu08", "x"], "n[1-3,5],gpu[07-08],x"),
        (["n9", "n10"], "n[9-10]"),  # (unpadded: one range)
        (["n1", "n2", "n10"], "n[1-2,10]"),
        (["n08", "n09", "n10", "n011"], "n[08-10,011]"),  # (padded: its width only)
        (["n9", "n010"], "n[9,010]"),
        (["n3"], "n3"),
        ([], ""),
    ],
)
def test_the_nodes_are_said_as_a_short_host_list(nodes: list[str], short: str) -> None:
    assert compress_hostlist(nodes) == short


def test_the_command_gets_the_allocations_environment() -> None:
    job = {"id": "42", "name": "bash", "user": "ann", "queue": "gpu", "tenant": "phys"}
    allocation = Allocation(
        job,
        [("n1", 2), ("n2", 2), ("n3", 1)],
        controller="https://ctl:8642",
        folder="/tmp/fs-salloc",
        hostfile="/tmp/fs-salloc/fusesched.hostfile",
        srun_dir="/tmp/fs-salloc/bin",
    )
    environ = {
        "PATH": "/usr/bin:/bin",
        "HOME": "/home/ann",
        "SLURM_JOB_ID": "9",  # another job's (salloc inside a job): replaced or dropped
        "SLURM_STEP_ID": "3",
        "FUSESCHED_JOB_TOKEN": "fsk_job",
        "FUSESCHED_TASK_ID": "9.main.0",
    }
    env = allocation_env(environ, allocation, "fsk_ann", "/etc/fusesched/ca.pem")
    assert env["PATH"] == "/tmp/fs-salloc/bin:/usr/bin:/bin"  # fusesched's srun first
    assert env["HOME"] == "/home/ann"
    expected = {
        "SLURM_JOB_ID": "42",
        "SLURM_JOBID": "42",
        "SLURM_JOB_NODELIST": "n[1-3]",
        "SLURM_NODELIST": "n[1-3]",
        "SLURM_JOB_NUM_NODES": "3",
        "SLURM_NNODES": "3",
        "SLURM_NTASKS": "5",
        "SLURM_TASKS_PER_NODE": "2(x2),1",
        "SLURM_JOB_PARTITION": "gpu",
        "SLURM_CLUSTER_NAME": "fusesched",
        "FUSESCHED_JOB_ID": "42",
        "FUSESCHED_CONTROLLER": "https://ctl:8642",
        "FUSESCHED_HOSTFILE": "/tmp/fs-salloc/fusesched.hostfile",
        "FUSESCHED_TASK_DIR": "/tmp/fs-salloc",  # (a folder of its own, as a task has)
        "FUSESCHED_TOKEN": "fsk_ann",
        "FUSESCHED_CA": "/etc/fusesched/ca.pem",
    }
    assert {k: env.get(k) for k in expected} == expected
    for gone in ("SLURM_STEP_ID", "FUSESCHED_JOB_TOKEN", "FUSESCHED_TASK_ID"):
        assert gone not in env
    # the person's credential never travels to the step's tasks (it goes in their command)
    passed = export_vars("ALL", env)
    assert "FUSESCHED_TOKEN" not in passed and "FUSESCHED_CA" not in passed
    assert passed["SLURM_JOB_ID"] == "42"
    bare = allocation_env({}, allocation, None, None)
    assert bare["PATH"] == "/tmp/fs-salloc/bin"
    assert "FUSESCHED_TOKEN" not in bare and "FUSESCHED_CA" not in bare


def test_without_a_command_the_users_shell_runs() -> None:
    assert shell_command({"SHELL": "/bin/zsh"}) == ("/bin/zsh",)
    assert shell_command({}) == ("/bin/sh",)
    assert shell_command({"SHELL": ""}) == ("/bin/sh",)


class FakeController:
    """Answers ``show`` with the records given, in turn (the last one again), and ``logs``
    with the holder's output so far."""

    def __init__(self, records: list[dict[str, Any]], outputs: list[str]) -> None:
        self.records = records
        self.outputs = outputs

    def show(self, job_id: str) -> dict[str, Any]:
        return self.records.pop(0) if len(self.records) > 1 else self.records[0]

    def logs(self, job_id: str) -> str:
        return self.outputs.pop(0) if len(self.outputs) > 1 else self.outputs[0]


def waiting(client: FakeController) -> tuple[Any, list[str]]:
    said: list[str] = []
    now = [0.0]

    def sleep(seconds: float) -> None:
        now[0] += seconds

    found = salloc.wait_for_allocation(client, "7", said.append, sleep, lambda: now[0])
    return found, said


def test_salloc_says_when_it_waits_and_when_it_is_granted() -> None:
    pending = {"state": "Pending", "phase": "queued", "nodes": []}
    held = {"state": "Pending", "phase": "held", "nodes": []}
    running = {"state": "Running", "phase": "running", "nodes": ["n1", "n2"]}
    printed = "n1 slots=1\nn2 slots=1\n"
    client = FakeController(
        [held, pending, *[pending] * 20, running], ["", printed, printed + READY + "\n"]
    )
    (job, hosts), said = waiting(client)
    assert job is running and hosts == [("n1", 1), ("n2", 1)]
    assert said == [
        "job 7 queued and waiting for resources (held: fusesched release lets it start)",
        "Granted job allocation 7",
    ]
    quick = FakeController([running], [printed + READY])
    assert waiting(quick)[1] == ["Granted job allocation 7"]  # (started at once: no wait said)
    ended = {"state": "Cancelled", "phase": "cancelled", "nodes": []}
    assert waiting(FakeController([pending, ended], [""]))[0] == (ended, None)
    with pytest.raises(salloc._NotReady, match="hostfile did not come"):
        waiting(FakeController([running], ["no marker"]))  # (its time passes in no time)


class Restarting(FakeController):
    """A controller whose first ``down`` answers are errors: ``status`` 0, it cannot be
    reached (restarting)."""

    def __init__(self, down: int, records: list[dict[str, Any]], status: int = 0) -> None:
        super().__init__(records, [f"n1 slots=1\n{READY}\n"])
        self.down = down
        self.status = status

    def show(self, job_id: str) -> dict[str, Any]:
        if self.down:
            self.down -= 1
            raise ControllerError(self.status, "cannot reach the controller at http://c:1")
        return super().show(job_id)


def test_a_controller_restart_while_waiting_is_waited_out() -> None:
    """An unreachable controller (restarting) neither cancels the request nor ends salloc:
    it says so once and waits on; a refusal (an HTTP status) still ends the wait."""
    running = {"state": "Running", "phase": "running", "nodes": ["n1"]}
    (job, hosts), said = waiting(Restarting(3, [running]))
    assert job is running and hosts == [("n1", 1)]
    assert said == [
        "warning: cannot reach the controller at http://c:1: waiting on",
        "Granted job allocation 7",
    ]
    with pytest.raises(ControllerError):
        waiting(Restarting(1, [running], status=403))


class FakeAllocation(FakeController):
    """A controller whose job 7 runs at once on n1, recording cancellations."""

    url = "http://controller:1"
    token = None

    def __init__(self) -> None:
        running = {"id": "7", "state": "Running", "phase": "running", "nodes": ["n1"]}
        super().__init__([running], [f"n1 slots=1\n{READY}\n"])
        self.cancelled: list[str] = []

    def submit(self, request: Any) -> str:
        return "7"

    def cancel(self, job_id: str) -> list[str]:
        self.cancelled.append(job_id)
        return [job_id]


@pytest.fixture
def own_signals() -> Any:
    """salloc sets its own signal handlers: the test's are put back after it."""
    saved = {s: signal.getsignal(s) for s in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP)}
    saved[signal.SIGQUIT] = signal.getsignal(signal.SIGQUIT)
    yield
    for signum, handler in saved.items():
        signal.signal(signum, handler)


def test_an_allocation_it_cannot_use_is_given_back(
    monkeypatch: pytest.MonkeyPatch, own_signals: None
) -> None:
    """Granted, but the command's folder cannot be made (or Ctrl-C comes before the command
    runs): salloc cancels the job and says why, with no traceback and no job left running."""
    from fusesched.agent import step_wrapper

    fake = FakeAllocation()
    monkeypatch.setattr(salloc, "_client", lambda *args: fake)

    def unwritable(folder: Path) -> Path:
        raise PermissionError(13, "Permission denied", str(folder))

    monkeypatch.setattr(step_wrapper, "install_wrapper", unwritable)
    result = CliRunner().invoke(app, ["salloc", "-N", "1", "true"])
    assert result.exit_code == 1, result.output
    assert fake.cancelled == ["7"]
    assert "Permission denied" in result.stderr
    assert "Job allocation 7 has been revoked" in result.stderr

    def interrupted(folder: Path) -> Path:
        raise salloc._Stop(signal.SIGINT)

    monkeypatch.setattr(step_wrapper, "install_wrapper", interrupted)
    fake.cancelled.clear()
    assert CliRunner().invoke(app, ["salloc", "-N", "1", "true"]).exit_code == 1
    assert fake.cancelled == ["7"]


@pytest.mark.parametrize(
    "nodes",
    [["n9", "n10", "n11"], ["n08", "n09", "n10", "n011"], ["n1", "n01", "n2"], ["a7", "b8"]],
)
def test_a_short_host_list_expands_back_to_its_nodes(nodes: list[str]) -> None:
    from fusesched.hostlist import expand_hostlist

    assert expand_hostlist(compress_hostlist(nodes)) == nodes


@pytest.mark.parametrize("given", ["--get-user-env", "--get-user-env=L", "--get-user-env=10L"])
def test_get_user_env_is_taken_without_a_word(given: str) -> None:
    """Slurm's salloc takes ``--get-user-env[=[TIMEOUT][S|L]]``: the command runs here, in
    this environment already, so it is taken and nothing said (the next word stays the
    command)."""
    parsed = split_salloc_args([given, "-N", "1", "hostname"])
    assert parsed.command == ("hostname",)
    _, warnings = allocation_request(parsed, parsed.command)
    assert (parsed.warnings, warnings) == ((), ())
