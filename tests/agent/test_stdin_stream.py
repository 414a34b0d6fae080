"""``srun``'s standard input streamed to its step's tasks (agent/step_stdin.py,
agent/stdin_forward.py, fusesched/stdin_pump.py): what srun reads before the step starts,
when it streams rather than sends whole, the tasks' command lines behind their reader, srun
ending with its step though its standard input never closes (Snakemake's jobstep plugin:
``Popen(..., stdin=PIPE)``, then ``wait()``), and the reader on its own: the command keeps
its process id, reads the stream then its end, and one that never reads is held up by
nothing."""

from __future__ import annotations

import base64
import json
import os
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any, ClassVar
from urllib.parse import parse_qs, urlparse

import httpx
import pytest

from fusesched.agent import step
from fusesched.agent.step_plan import place
from fusesched.agent.step_stdin import (
    FIRST_WAIT_S,
    NO_INPUT,
    PUMP_MODULE,
    STDIN_MAX_BYTES,
    StepInput,
    first_stdin,
    input_argv,
    mpirun_stdin,
    step_input,
)

TASKS, _ = place([("node-a", 2), ("node-b", 2)], 4, None, None)


# -- what srun reads first -------------------------------------------------------------------


def test_an_input_that_has_ended_is_read_whole() -> None:
    read, write = os.pipe()
    os.write(write, b"x\n")
    os.close(write)
    assert first_stdin(read) == (b"x\n", True)
    os.close(read)


def test_an_input_still_open_is_read_as_far_as_it_goes() -> None:
    read, write = os.pipe()
    os.write(write, b"so far")
    started = time.monotonic()
    assert first_stdin(read, wait_s=0.1) == (b"so far", False)
    assert time.monotonic() - started < 0.1 + 1.0  # (it does not wait for the end)
    assert 0 < FIRST_WAIT_S <= 0.5
    os.close(write)
    os.close(read)


def test_more_than_a_request_holds_is_not_read_whole() -> None:
    read, write = os.pipe()
    os.write(write, b"x" * 11)
    os.close(write)
    data, ended = first_stdin(read, limit=10)
    assert (data, ended) == (b"x" * 11, False)
    os.close(read)


def test_a_terminal_or_a_closed_input_forwards_nothing() -> None:
    leader, follower = os.openpty()
    assert first_stdin(follower) == (None, True)
    os.close(leader)
    os.close(follower)
    read, write = os.pipe()
    os.close(read)
    os.close(write)
    assert first_stdin(read) == (b"", True)


def test_what_srun_streams() -> None:
    assert step_input(None, TASKS, False, lambda: (b"so far", False)) == StepInput(
        data=b"so far", streamed=True
    )
    assert step_input("1", TASKS, False, lambda: (b"", False)) == StepInput(
        data=b"", task=1, streamed=True
    )
    big = b"x" * (STDIN_MAX_BYTES + 1)
    assert step_input("0", TASKS, False, lambda: (big, True)).streamed  # (too big for it)
    assert step_input("none", TASKS, False, lambda: (b"x", False)) == NO_INPUT
    assert step_input(None, TASKS, False, lambda: (None, True)) == NO_INPUT  # (a terminal)


def test_each_task_that_reads_it_starts_behind_its_reader() -> None:
    streamed = StepInput(data=b"", streamed=True, stream="s1")
    assert streamed.fields(TASKS, False) == {}  # (nothing in the step request)
    reader = ("/py", "-I", "-m", PUMP_MODULE, "s1", "--", "cat")
    assert input_argv(streamed, TASKS[3], {}, ["cat"], python="/py") == reader
    one = StepInput(data=b"", task=1, streamed=True, stream="s1")
    assert input_argv(one, TASKS[1], {}, ["cat"], python="/py") == reader
    assert input_argv(one, TASKS[0], {}, ["cat"], python="/py") == ("cat",)  # (/dev/null)
    # through mpirun: mpirun reads it and hands it on to rank 1
    assert input_argv(one, TASKS[0], {}, ["mpirun"], mpi=True, python="/py")[:4] == reader[:4]
    assert mpirun_stdin(one, ["mpirun", "a"]) == ["mpirun", "--stdin", "1", "a"]


# -- srun, its step and its stream ---------------------------------------------------------


class Controller:
    """A controller with streams: a one-task step that exits once its stream has been
    written to (at once with ``older``: no stream route), and the stream's writes."""

    def __init__(self, older: bool = False) -> None:
        self.older = older
        self.steps: list[dict[str, Any]] = []
        self.writes: list[dict[str, Any]] = []
        self.asked_stream = threading.Event()  # (srun has read the input's head by then)

    def __call__(self, request: httpx.Request) -> httpx.Response:
        path = request.url.path
        if path == "/v1/jobs/7/stdin":
            self.asked_stream.set()
        if path == "/v1/jobs/7/stdin" and self.older:
            return httpx.Response(404, json={"detail": "Not Found"})
        if path == "/v1/jobs/7/stdin":
            return httpx.Response(201, json={"stream": "s1"})
        if path == "/v1/jobs/7/stdin/s1":
            self.writes.append(json.loads(request.content))
            answer = {"offset": self.writes[-1]["offset"], "acked": 0}
            return httpx.Response(200, json=answer | {"ended": False, "readers": True})
        if path == "/v1/jobs/7/steps":
            self.steps.append(json.loads(request.content))
            return httpx.Response(201, json={"step_id": 0, "task_ids": ["7.remote.1"]})
        if path == "/v1/tasks/7.remote.1" and not self.writes and not self.older:
            return httpx.Response(200, json={"state": "running"})
        if path == "/v1/tasks/7.remote.1":
            return httpx.Response(200, json={"state": "exited", "exit_code": 0})
        assert path == "/v1/jobs/7/logs"
        headers = {"x-next-offset": "0", "x-log-complete": "true", "x-log-confirmed": "true"}
        return httpx.Response(200, text="", headers=headers)


class Input:
    """srun's standard input: a pipe, written and closed by the test."""

    def __init__(self) -> None:
        self.read, self.write = os.pipe()

    def close(self) -> None:
        fd, self.write = self.write, -1  # (marked closed first: a second close is nothing)
        if fd >= 0:
            os.close(fd)


@pytest.fixture
def srun_input(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Input]:
    """srun in job 7 on node-a (one slot), its standard input a pipe (never closed unless
    the test closes it)."""
    hostfile = tmp_path / "hostfile"
    hostfile.write_text("node-a slots=1\n")
    monkeypatch.setenv("FUSESCHED_JOB_ID", "7")
    monkeypatch.setenv("FUSESCHED_CONTROLLER", "http://c")
    monkeypatch.setenv("FUSESCHED_HOSTFILE", str(hostfile))
    given = Input()
    monkeypatch.setattr(step, "STDIN_FD", given.read)
    yield given
    given.close()
    os.close(given.read)


def connected(monkeypatch: pytest.MonkeyPatch, controller: Controller) -> None:
    real = httpx.Client

    def connect(**_: object) -> httpx.Client:
        return real(base_url="http://c", transport=httpx.MockTransport(controller))

    monkeypatch.setattr(step.httpx, "Client", connect)


def test_srun_ends_with_its_step_though_its_input_never_closes(
    srun_input: Input, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    controller = Controller()
    connected(monkeypatch, controller)
    os.write(srun_input.write, b"first\n")
    started = time.monotonic()
    assert step.main(["-n", "1", "--mpi=none", "cat"]) == 0
    assert time.monotonic() - started < 5
    (sent,) = controller.steps
    assert "stdin" not in sent  # (streamed: nothing in the request)
    (task,) = sent["tasks"]
    assert task["argv"][-7:] == [sys.executable, "-I", "-m", PUMP_MODULE, "s1", "--", "cat"]
    first = controller.writes[0]  # (what srun had read, and its readers)
    assert first["readers"] == ["7.remote.1"] and first["offset"] == 0
    assert base64.b64decode(first["data"]) == b"first\n" and not first["eof"]
    assert "srun: " not in capsys.readouterr().err


def test_an_older_controller_gets_it_whole_once_it_ends(
    srun_input: Input, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    controller = Controller(older=True)
    connected(monkeypatch, controller)
    os.write(srun_input.write, b"a\n")

    def later() -> None:  # (once srun found no stream route: however long its start took)
        controller.asked_stream.wait(30)
        time.sleep(0.2)
        os.write(srun_input.write, b"b\n")
        srun_input.close()

    writer = threading.Thread(target=later)
    writer.start()
    assert step.main(["-n", "1", "--mpi=none", "cat"]) == 0
    writer.join(30)  # (its close done before the fixture's)
    (sent,) = controller.steps
    assert base64.b64decode(sent["stdin"]) == b"a\nb\n"
    assert sent["tasks"][0]["argv"][-1] == "cat" and PUMP_MODULE not in sent["tasks"][0]["argv"]
    assert controller.writes == []
    err = capsys.readouterr().err
    assert "srun: warning: the controller is older than this srun: it cannot forward" in err


# -- the task's reader -----------------------------------------------------------------------


class Stream(BaseHTTPRequestHandler):
    """The stream route as a reader sees it: ``pages`` given in turn (an int: that status,
    refused), then nothing (after a short wait) for ever; each request noted in ``seen``."""

    pages: ClassVar[list[dict[str, Any] | int]] = []
    seen: ClassVar[list[float]] = []

    def do_GET(self) -> None:
        Stream.seen.append(time.monotonic())
        query = parse_qs(urlparse(self.path).query)
        offset = int(query["offset"][0])
        page: dict[str, Any] | int
        if Stream.pages:
            page = Stream.pages.pop(0)
        else:
            time.sleep(0.2)
            page = {"data": "", "offset": offset, "eof": False}
        status = page if isinstance(page, int) else 200
        body = json.dumps({"detail": "lost"} if isinstance(page, int) else page).encode()
        self.send_response(status)
        self.send_header("content-type", "application/json")
        self.send_header("content-length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, *_: object) -> None:
        pass


@pytest.fixture
def stream() -> Iterator[str]:
    """A stream's controller: its URL."""
    Stream.pages, Stream.seen = [], []
    server = ThreadingHTTPServer(("127.0.0.1", 0), Stream)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    yield f"http://127.0.0.1:{server.server_address[1]}"
    server.shutdown()


def pumping(url: str, *command: str) -> subprocess.Popen[str]:
    """``command`` started behind its reader, reading the stream at ``url``."""
    env = {
        "PATH": "/usr/bin:/bin",
        "FUSESCHED_CONTROLLER": url,
        "FUSESCHED_JOB_ID": "7",
        "FUSESCHED_TASK_ID": "7.remote.1",
    }
    argv = [sys.executable, "-I", "-m", PUMP_MODULE, "s1", "--", *command]
    return subprocess.Popen(
        argv, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True
    )


def pumped(url: str, *command: str) -> subprocess.CompletedProcess[str]:
    started = pumping(url, *command)
    out, err = started.communicate(timeout=30)
    return subprocess.CompletedProcess(started.args, started.returncode, out, err)


def test_the_task_reads_the_stream_then_its_end(stream: str) -> None:
    Stream.pages = [
        {"data": base64.b64encode(b"hello\n").decode(), "offset": 6, "eof": False},
        {"data": base64.b64encode(b"world\n").decode(), "offset": 12, "eof": True},
        {"data": "", "offset": 12, "eof": True},
    ]
    done = pumped(stream, "cat")
    assert (done.returncode, done.stdout, done.stderr) == (0, "hello\nworld\n", "")


def test_a_task_that_never_reads_is_held_up_by_nothing(stream: str) -> None:
    script = 'echo "$$"; grep SigIgn /proc/$$/status; exit 3'
    started = time.monotonic()
    task = pumping(stream, "/bin/sh", "-c", script)
    out, _ = task.communicate(timeout=30)
    assert task.returncode == 3 and time.monotonic() - started < 5
    pid, ignored = out.split("\n")[:2]
    assert int(pid) == task.pid  # (the command became the process: the task's id is its own)
    assert not int(ignored.split()[1], 16) & (1 << 12)  # (SIGPIPE not ignored, as Python does)
    time.sleep(1.0)  # (its reader sees nobody reads its pipe, and ends)
    calls = len(Stream.seen)
    time.sleep(1.0)
    assert len(Stream.seen) == calls


def test_a_command_that_cannot_run_is_said(stream: str) -> None:
    done = pumped(stream, "no-such-command")
    assert done.returncode == 127
    assert done.stderr == "srun: error: no-such-command: No such file or directory\n"


def test_a_refusal_ends_the_tasks_input_said_on_its_standard_error(stream: str) -> None:
    Stream.pages = [{"data": base64.b64encode(b"so far\n").decode(), "offset": 7, "eof": False}]
    Stream.pages.append(409)  # (the stream was lost)
    done = pumped(stream, "cat")
    assert (done.returncode, done.stdout) == (0, "so far\n")
    assert done.stderr == (
        "srun: warning: standard input: the controller refused it (409: lost): the task's "
        "input ends here\n"
    )


def test_a_controller_out_of_reach_holds_up_no_task() -> None:
    done = pumped("http://127.0.0.1:9", "echo", "ran")  # (tried again, meanwhile)
    assert (done.returncode, done.stdout) == (0, "ran\n")
