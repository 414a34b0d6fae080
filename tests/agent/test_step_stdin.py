"""``srun`` forwards its standard input to the step's tasks, as Slurm's srun does
(agent/step_stdin.py): ``-i all|none|N|FILE``; one that has ended when the step starts sent
whole in the request's ``stdin`` fields (and, to a controller older than streams, any, read
whole before the step starts, capped); each task reading a file on its node; and, on the
agent, the launch's standard input written into the task's folder and opened by its shim as
the task's standard input (agent/task_files.py, agent/task_shim.py). Streamed input:
tests/agent/test_stdin_stream.py, tests/controller/test_stdin_streams.py."""

from __future__ import annotations

import base64
import json
import os
import stat
import subprocess
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from fusesched.agent import spawn, step
from fusesched.agent.runtime import ProcessRuntime
from fusesched.agent.step_args import parse_args
from fusesched.agent.step_files import split_files
from fusesched.agent.step_plan import StepError, StepLaunch, place
from fusesched.agent.step_run import Step
from fusesched.agent.step_stdin import (
    NO_INPUT,
    STDIN_MAX_TOTAL,
    StepInput,
    input_argv,
    input_mode,
    mpirun_stdin,
    read_stdin,
    step_input,
    whole_input,
)
from fusesched.agent.task_files import STDIN_FILE, STDIN_NAME, write_stdin
from fusesched.agent.task_shim import shim_start
from fusesched.agent.users import Identity

from .helpers import launch, run_one

TASKS, _ = place([("node-a", 2), ("node-b", 2)], 4, None, None)
JOB_ENV = {"FUSESCHED_JOB_ID": "7", "SLURM_JOB_USER": "ada", "SLURM_JOB_NAME": "job"}


def b64(data: bytes) -> str:
    return base64.b64encode(data).decode()


# -- srun's command line and what it asks for ------------------------------------------------


@pytest.mark.parametrize(
    ("argv", "given"),
    [
        (["-i", "0", "cat"], "0"),
        (["-i0", "cat"], "0"),
        (["--input=none", "cat"], "none"),
        (["--input", "in.%t", "cat"], "in.%t"),
        (["-li", "all", "cat"], "all"),
        (["-n", "2", "cat"], None),
    ],
)
def test_the_input_option_as_scripts_write_it(argv: list[str], given: str | None) -> None:
    files, rest = split_files(argv)  # (-o/-e are taken out first: -i's value stays put)
    assert not files.any
    options = parse_args(rest, {})
    assert options.input == given
    assert options.command == ("cat",)


def test_an_empty_input_is_refused() -> None:
    with pytest.raises(StepError, match="--input takes all, none, a task's rank or a file"):
        parse_args(["--input=", "cat"], {})


def test_the_modes_as_slurms_srun_reads_them() -> None:
    none: set[str] = set()
    assert input_mode(None, 2, none.__contains__).kind == "all"
    assert input_mode("ALL", 2, none.__contains__).kind == "all"  # (any case, as Slurm's)
    assert input_mode("None", 2, none.__contains__).kind == "none"
    assert input_mode("1", 2, none.__contains__).task == 1
    assert input_mode("in.txt", 2, none.__contains__).pattern == "in.txt"
    # a number that is no task's rank is a file name, as Slurm's srun takes it
    assert input_mode("5", 2, {"5"}.__contains__).pattern == "5"
    with pytest.raises(StepError) as raised:
        input_mode("5", 2, none.__contains__)
    assert str(raised.value) == (
        "--input=5: the step has 2 task(s) (ranks 0-1), and there is no file 5 to read"
    )


def test_what_srun_forwards() -> None:
    def given(data: bytes | None) -> object:
        return lambda: (data, True)  # (it has ended)

    assert step_input(None, TASKS, False, given(b"x\n")) == StepInput(data=b"x\n")
    assert step_input("2", TASKS, False, given(b"x\n")) == StepInput(data=b"x\n", task=2)
    assert step_input("none", TASKS, False, given(b"x\n")) == NO_INPUT
    assert step_input(None, TASKS, False, given(b"")) == NO_INPUT  # (the script's /dev/null)
    assert step_input(None, TASKS, False, given(None)) == NO_INPUT  # (a terminal)
    assert step_input("in.%t", TASKS, False, given(b"x")) == StepInput(pattern="in.%t")
    # through mpirun one file serves every rank: each task's own cannot be
    assert step_input("in.%j", TASKS, True, given(b"")) == StepInput(pattern="in.%j")
    with pytest.raises(StepError, match=r"through mpirun .* \(%t, %n, %N\) is not supported"):
        step_input("in.%t", TASKS, True, given(b""))


def test_srun_does_not_read_its_input_when_it_forwards_none() -> None:
    def never() -> tuple[bytes, bool]:
        raise AssertionError("srun's standard input was read")

    assert step_input("none", TASKS, False, never) == NO_INPUT
    assert step_input("in.txt", TASKS, False, never) == StepInput(pattern="in.txt")


def test_each_copy_counts_towards_the_cap() -> None:
    tasks, _ = place([("node-a", 8)], 8, None, None)
    data = b"x" * (STDIN_MAX_TOTAL // 8 + 1)  # (fine for one task, too much for 8)
    assert step_input("0", tasks, False, lambda: (data, True)) == StepInput(data=data, task=0)
    assert step_input(None, tasks, True, lambda: (data, True)) == StepInput(data=data)
    # (mpirun: one copy); too much for the request: streamed instead
    assert step_input(None, tasks, False, lambda: (data, True)).streamed
    # ... and, to a controller older than streams, an error
    with pytest.raises(StepError) as raised:
        whole_input(StepInput(data=b"x", streamed=True), tasks, False, lambda head: head + data)
    assert "forwarded whole to each task" in str(raised.value)
    assert "-i N for task N alone, -i FILE" in str(raised.value)


def test_the_request_fields() -> None:
    assert NO_INPUT.fields(TASKS, False) == {}
    assert StepInput(pattern="in.txt").fields(TASKS, False) == {}  # (the tasks open it)
    assert StepInput(data=b"x\n").fields(TASKS, False) == {"stdin": b64(b"x\n")}
    one = StepInput(data=b"x\n", task=2)
    assert one.fields(TASKS, False) == {"stdin": b64(b"x\n"), "stdin_task": 2}
    assert one.fields(TASKS[:1], True) == {"stdin": b64(b"x\n")}  # (mpirun hands it on)
    assert mpirun_stdin(one, ["mpirun", "-np", "4"]) == ["mpirun", "--stdin", "2", "-np", "4"]
    whole = StepInput(data=b"x")
    assert mpirun_stdin(whole, ["mpirun", "-np", "4"]) == ["mpirun", "--stdin", "all", "-np", "4"]
    assert mpirun_stdin(NO_INPUT, ["mpirun"]) == ["mpirun"]


# -- reading srun's standard input ---------------------------------------------------------


@pytest.fixture
def pipe() -> Iterator[tuple[int, int]]:
    """A pipe: its write end is the test's to close, its read end the fixture's."""
    read, write = os.pipe()
    yield read, write
    os.close(read)


def writes(fd: int, data: bytes, after_s: float = 0.0) -> threading.Thread:
    """Write ``data`` to ``fd`` (after ``after_s``), then close it."""

    def write() -> None:
        time.sleep(after_s)
        with os.fdopen(fd, "wb") as out:
            out.write(data)

    thread = threading.Thread(target=write)
    thread.start()
    return thread


def test_stdin_is_read_to_its_end(pipe: tuple[int, int]) -> None:
    read, write = pipe
    data = os.urandom(300_000)  # (more than a pipe holds: written as it is read)
    writer = writes(write, data)
    assert read_stdin(read) == data
    writer.join()


def test_a_terminal_is_not_read() -> None:
    leader, follower = os.openpty()
    try:
        assert read_stdin(follower) is None
    finally:
        os.close(leader)
        os.close(follower)


def test_a_closed_stdin_is_empty() -> None:
    read, write = os.pipe()
    os.close(read)
    os.close(write)
    assert read_stdin(read) == b""


def test_more_than_the_cap_is_an_error(pipe: tuple[int, int]) -> None:
    read, write = pipe
    writes(write, b"x" * 1001).join()
    with pytest.raises(StepError) as raised:
        read_stdin(read, limit=1000)
    assert "srun forwards it whole to the tasks" in str(raised.value)
    assert "-i FILE for each task to read a file on its node (any size)" in str(raised.value)


def test_an_input_that_does_not_end_is_said(pipe: tuple[int, int]) -> None:
    read, write = pipe
    said: list[str] = []
    writer = writes(write, b"late\n", after_s=0.3)
    assert read_stdin(read, say=said.append, say_after_s=0.05) == b"late\n"
    writer.join()
    assert len(said) == 1 and "-i none starts them without it" in said[0]


def test_a_non_blocking_stdin_is_read_to_its_end(pipe: tuple[int, int]) -> None:
    """One left non-blocking (O_NONBLOCK) by whoever made it is waited on, not cut short."""
    read, write = pipe
    os.set_blocking(read, False)
    writer = writes(write, b"late\n", after_s=0.2)
    assert read_stdin(read) == b"late\n"
    writer.join()


def test_ctrl_c_while_srun_reads_its_input_is_said(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    _in_a_job(tmp_path, monkeypatch, slots=1)

    def interrupted(*_: object, **__: object) -> bytes:
        raise KeyboardInterrupt

    monkeypatch.setattr(step, "first_stdin", interrupted)
    assert step.main(["-n", "1", "--mpi=none", "cat"]) == 130
    err = capsys.readouterr().err
    assert "srun: error: interrupted while reading standard input: nothing was started" in err
    assert "Traceback" not in err


# -- each task reading a file on its node ----------------------------------------------------


def run_task(argv: tuple[str, ...], cwd: Path, **env: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        argv, cwd=cwd, env={"PATH": "/usr/bin:/bin", **env}, capture_output=True, text=True
    )


def test_each_task_reads_its_own_file(tmp_path: Path) -> None:
    (tmp_path / "in.3.ada.node-b.2").write_text("mine\n")
    mode = StepInput(pattern="in.%s.%u.%N.%t")
    argv = input_argv(mode, TASKS[2], JOB_ENV, ["cat"])
    done = run_task(argv, tmp_path, SLURM_STEP_ID="3")  # (the step's id: the task's own)
    assert (done.returncode, done.stdout, done.stderr) == (0, "mine\n", "")
    assert input_argv(NO_INPUT, TASKS[2], JOB_ENV, ["cat"]) == ("cat",)


@pytest.mark.parametrize(
    ("make", "why"),
    [
        (lambda path: None, "No such file or directory"),
        (lambda path: path.mkdir(), "Is a directory"),
    ],
)
def test_a_file_a_task_cannot_open_ends_it(tmp_path: Path, make: object, why: str) -> None:
    make(tmp_path / "in.0")  # type: ignore[operator]
    argv = input_argv(StepInput(pattern="in.%t"), TASKS[0], JOB_ENV, ["cat"])
    done = run_task(argv, tmp_path)
    assert done.returncode == 1
    assert done.stderr == f"srun: error: could not open input file in.0: {why}\n"


@pytest.mark.skipif(os.geteuid() != 0, reason="only root runs a task as another user")
def test_a_file_the_tasks_user_cannot_read_ends_it(shared: Path) -> None:
    (shared / "in.0").write_text("secret\n")
    (shared / "in.0").chmod(0o600)  # (root's)
    argv = input_argv(StepInput(pattern="in.%t"), TASKS[0], JOB_ENV, ["cat"])
    done = subprocess.run(argv, cwd=shared, capture_output=True, text=True, user=65534)
    assert done.returncode == 1
    assert done.stderr == "srun: error: could not open input file in.0: Permission denied\n"


def test_a_fifo_is_opened_once(tmp_path: Path) -> None:
    """(its writer pairs with the task's one open: a test open first would take it)"""
    os.mkfifo(tmp_path / "in.fifo")
    writer = threading.Thread(target=(tmp_path / "in.fifo").write_text, args=("via fifo\n",))
    writer.start()
    argv = input_argv(StepInput(pattern="in.fifo"), TASKS[0], JOB_ENV, ["cat"])
    done = subprocess.run(argv, cwd=tmp_path, capture_output=True, text=True, timeout=10)
    writer.join()
    assert (done.returncode, done.stdout) == (0, "via fifo\n")


def test_the_launches_read_the_file_through_mpirun_too() -> None:
    options = parse_args(["-n", "4", "-i", "in.%j", "./app"], {})
    given = StepInput(pattern="in.%j")
    (mpirun,) = step._launches(options, JOB_ENV, TASKS, {}, "/work", True, stdin=given)
    argv = mpirun.argv
    opener = argv.index("srun-input")  # (after the task's own: it enters its folder first)
    assert argv[opener - 3 : opener - 1] == ["/bin/sh", "-c"] and "srun-task" in argv[:opener]
    assert argv[opener + 1 : opener + 5] == ["0", "in.7", "mpirun", "--stdin"]
    tasks = step._launches(options, JOB_ENV, TASKS, {}, "/work", False, stdin=given)
    assert all("srun-input" in launch.argv for launch in tasks)
    plain = step._launches(options, JOB_ENV, TASKS, {}, "/work", False)
    assert all("srun-input" not in launch.argv for launch in plain)


# -- the request -----------------------------------------------------------------------------


def sent_launches() -> list[StepLaunch]:
    return [StepLaunch(task, ["cat"], {}) for task in TASKS[:2]]


def test_the_step_request_carries_it() -> None:
    bodies: list[dict[str, object]] = []

    def controller(request: httpx.Request) -> httpx.Response:
        bodies.append(json.loads(request.content))
        return httpx.Response(201, json={"step_id": 0, "task_ids": ["7.remote.1", "7.remote.2"]})

    http = httpx.Client(base_url="http://c", transport=httpx.MockTransport(controller))
    run = Step(http, "7", label=False)
    run.stdin = StepInput(data=b"x\n", task=1).fields(TASKS[:2], False)
    assert run.create({"node-a": 2}, False, sent_launches()) is None
    assert bodies[0]["stdin"] == b64(b"x\n") and bodies[0]["stdin_task"] == 1
    bodies.clear()
    Step(http, "7", label=False).create({"node-a": 2}, False, sent_launches())
    assert "stdin" not in bodies[0] and "stdin_task" not in bodies[0]  # (as before)


def test_an_older_controller_is_said_and_nothing_starts() -> None:
    refusal = {
        "detail": [
            {"type": "extra_forbidden", "loc": ["body", "stdin"], "msg": "Extra inputs"},
        ]
    }
    asked: list[httpx.Request] = []

    def controller(request: httpx.Request) -> httpx.Response:
        asked.append(request)
        return httpx.Response(422, json=refusal)

    http = httpx.Client(base_url="http://c", transport=httpx.MockTransport(controller))
    run = Step(http, "7", label=False)
    run.stdin = StepInput(data=b"x\n").fields(TASKS[:2], False)
    with pytest.raises(StepError) as raised:
        run.create({"node-a": 2}, False, sent_launches())
    assert str(raised.value) == (
        "the controller is older than this srun: it cannot forward srun's standard input to "
        "the step's tasks; give -i none (or </dev/null) to run it without, or -i FILE for "
        "each task to read a file"
    )
    assert len(asked) == 1 and run.step_id is None


def older_controller(monkeypatch: pytest.MonkeyPatch) -> list[httpx.Request]:
    """srun's controller is one older than streams (it has no stdin route), which starts
    no step: the requests srun makes."""
    asked: list[httpx.Request] = []

    def controller(request: httpx.Request) -> httpx.Response:
        asked.append(request)
        if request.url.path == "/v1/jobs/7/stdin":
            return httpx.Response(404, json={"detail": "Not Found"})
        raise AssertionError("the step was asked for")

    real = httpx.Client

    def connect(**options: object) -> httpx.Client:
        return real(base_url="http://c", transport=httpx.MockTransport(controller))

    monkeypatch.setattr(step.httpx, "Client", connect)
    return asked


def test_srun_over_the_cap_starts_nothing(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    _in_a_job(tmp_path, monkeypatch, slots=2)

    def too_much(*_: object, **__: object) -> bytes:
        raise StepError("standard input is more than 16 MiB: srun forwards it whole")

    asked = older_controller(monkeypatch)
    monkeypatch.setattr(step, "first_stdin", lambda _fd: (b"x", False))  # (streamed, but...)
    monkeypatch.setattr(step, "read_stdin", too_much)
    assert step.main(["-n", "2", "--mpi=none", "cat"]) == 1
    err = capsys.readouterr().err
    assert "srun: warning: the controller is older than this srun: it cannot forward " in err
    assert "srun: error: standard input is more than 16 MiB" in err
    assert [request.url.path for request in asked] == ["/v1/jobs/7/stdin"]


def test_ctrl_c_while_srun_reads_its_input_for_an_older_controller_is_said(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    _in_a_job(tmp_path, monkeypatch, slots=1)

    def interrupted(*_: object, **__: object) -> bytes:
        raise KeyboardInterrupt

    older_controller(monkeypatch)
    monkeypatch.setattr(step, "first_stdin", lambda _fd: (b"x", False))
    monkeypatch.setattr(step, "read_stdin", interrupted)
    assert step.main(["-n", "1", "--mpi=none", "cat"]) == 130
    err = capsys.readouterr().err
    assert "srun: error: interrupted while reading standard input: nothing was started" in err


# -- on the node -----------------------------------------------------------------------------


def test_the_agent_writes_it_for_the_task_alone(tmp_path: Path) -> None:
    assert write_stdin(tmp_path, b64(b"\x00bytes\xff"))
    written = tmp_path / STDIN_NAME
    assert written.read_bytes() == b"\x00bytes\xff"
    assert stat.S_IMODE(written.stat().st_mode) == 0o600
    with pytest.raises(FileExistsError):  # (never over a file there, nor through a link)
        write_stdin(tmp_path, b64(b"again"))
    assert not write_stdin(tmp_path / "elsewhere", "not base64!")


def test_the_shim_gives_the_task_the_file(tmp_path: Path) -> None:
    start = shim_start(["cat"], tmp_path, {}, tmp_path, None, None, None, stdin=True)
    assert f"<{tmp_path.absolute() / STDIN_NAME}\n" in start.argv[2]
    plain = shim_start(["cat"], tmp_path, {}, tmp_path, None, None, None)
    assert " </dev/null\n" in plain.argv[2]


def test_a_task_reads_the_steps_input(runtime: ProcessRuntime) -> None:
    data = "line one\nline 'two' $HOME\n"
    files = {STDIN_FILE: b64(data.encode()), "other": "kept"}
    report, text = run_one(runtime, launch("7.remote.1", "sh", "-c", "cat; cat other", files=files))
    assert (report.exit_code, text) == (0, data + "kept")
    report, text = run_one(runtime, launch("7.remote.2", "cat"))  # (none: /dev/null)
    assert (report.exit_code, text) == (0, "")


def test_a_launch_whose_input_is_not_base64_fails_to_start(runtime: ProcessRuntime) -> None:
    report, _ = run_one(runtime, launch("7.remote.3", "cat", files={STDIN_FILE: "@@"}))
    assert report.state.value == "failed-to-start"
    assert report.reason == "the launch's standard input (srun's) is not base64"


def test_a_launch_whose_input_cannot_be_written_says_why(
    runtime: ProcessRuntime, monkeypatch: pytest.MonkeyPatch
) -> None:
    def full(*_: object) -> bool:
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(spawn, "write_stdin", full)
    report, _ = run_one(runtime, launch("7.remote.4", "cat", files={STDIN_FILE: b64(b"x")}))
    assert report.state.value == "failed-to-start"
    assert report.reason == (
        "cannot write the task's standard input: [Errno 28] No space left on device"
    )


@pytest.mark.skipif(os.geteuid() != 0, reason="only root switches users")
def test_a_task_under_its_users_identity_reads_it(shared: Path) -> None:
    """The file is the task's user's (mode 0600), opened by the shim as that user."""
    who = Identity("someone", 234567, 234568)
    rt = ProcessRuntime(shared / "work", identities=lambda _user: who)
    files = {STDIN_FILE: b64(b"for someone\n")}
    script = f'cat; stat -c "%u %a" "$FUSESCHED_TASK_DIR/{STDIN_NAME}"'
    try:
        report, text = run_one(rt, launch("7.remote.4", "sh", "-c", script, files=files))
    finally:
        rt.shutdown(grace_s=0.2)
    assert (report.exit_code, text) == (0, f"for someone\n{who.uid} 600\n")


def _in_a_job(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, slots: int) -> None:
    """srun's environment in job 7 on node-a with ``slots`` task slots (a controller that
    answers nothing: the tests stop srun before it asks)."""
    hostfile = tmp_path / "hostfile"
    hostfile.write_text(f"node-a slots={slots}\n")
    monkeypatch.setenv("FUSESCHED_JOB_ID", "7")
    monkeypatch.setenv("FUSESCHED_CONTROLLER", "http://127.0.0.1:9")
    monkeypatch.setenv("FUSESCHED_HOSTFILE", str(hostfile))
