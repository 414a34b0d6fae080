"""Probe checks that misbehave, with real servers on loopback and real processes: an HTTP
server that trickles its answer is cut off at the timeout; one that answers garbage or closes
fails; a server on ``::1`` only is reached; an ``exec`` check that floods its output keeps the
agent's memory flat, one that leaves a child behind passes at its exit and loses the child;
many slow checks do not hold up a quick one; closing the runner stops a check under way; a
task that exits on its own just as its liveness probe fails is not reported as failed by it."""

from __future__ import annotations

import os
import socket
import threading
import time
import tracemalloc
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from fusesched.agent.probes import ExecContext, Outcome, ProbeRunner, run_check
from fusesched.agent.runtime import ProcessRuntime
from fusesched.submit.probes import Probe

from .helpers import launch, wait_end

Answer = Callable[[socket.socket], None]


def serve(answer: Answer, family: socket.AddressFamily = socket.AF_INET) -> Iterator[int]:
    """A loopback server that reads a request and hands each connection to ``answer``."""
    listener = socket.socket(family)
    listener.bind(("::1" if family == socket.AF_INET6 else "127.0.0.1", 0))
    listener.listen(16)

    def accept() -> None:
        while True:
            try:
                conn, _ = listener.accept()
            except OSError:
                return

            def handle(conn: socket.socket = conn) -> None:
                with conn:
                    try:
                        conn.recv(4096)
                        answer(conn)
                    except OSError:
                        pass

            threading.Thread(target=handle, daemon=True).start()

    threading.Thread(target=accept, daemon=True).start()
    try:
        yield int(listener.getsockname()[1])
    finally:
        listener.close()


def trickle(conn: socket.socket) -> None:
    for byte in b"HTTP/1.1 200 OK\r\nX-Slow: " + b"a" * 200:
        conn.sendall(bytes([byte]))
        time.sleep(0.1)


@pytest.fixture
def trickling() -> Iterator[int]:
    yield from serve(trickle)


def test_an_http_server_that_trickles_its_answer_fails_at_the_timeout(trickling: int) -> None:
    probe = Probe(http={"port": trickling}, timeout_s=1.0)
    began = time.monotonic()
    outcome = run_check(probe, ExecContext())
    assert time.monotonic() - began < 1.6  # not 100 ms a byte for as long as it likes
    assert outcome == Outcome(False, f"GET http://127.0.0.1:{trickling}/: no answer within 1 s")


def test_http_answers_that_are_not_http_fail_and_redirects_pass() -> None:
    def garbage(conn: socket.socket) -> None:
        conn.sendall(b"SSH-2.0-OpenSSH_9.6\r\n\r\n")

    def closes(conn: socket.socket) -> None:
        pass

    def redirect(conn: socket.socket) -> None:
        conn.sendall(b"HTTP/1.0 302 Found\r\nLocation: http://example.invalid/\r\n\r\n")

    def flood(conn: socket.socket) -> None:
        conn.sendall(b"HTTP/1.1 204 No Content\r\n")
        while True:
            conn.sendall(b"X-More: " + b"m" * 8192 + b"\r\n")

    said = {}
    for name, answer in (("garbage", garbage), ("closes", closes), ("redirect", redirect)):
        for port in serve(answer):
            said[name] = run_check(Probe(http={"port": port}), ExecContext()).detail
    assert said["garbage"].endswith(": not an HTTP response"), said
    assert said["closes"].endswith(": the connection closed without an answer"), said
    assert said["redirect"] == ""  # 3xx passes: the redirect is not followed
    for port in serve(flood):  # endless headers: judged by the status line, within the time
        began = time.monotonic()
        assert run_check(Probe(http={"port": port}, timeout_s=2), ExecContext()).passed
        assert time.monotonic() - began < 2.5


@pytest.mark.skipif(not socket.has_ipv6, reason="no IPv6 here")
def test_a_server_on_ipv6_loopback_only_is_reached() -> None:
    def ok(conn: socket.socket) -> None:
        conn.sendall(b"HTTP/1.1 200 OK\r\nContent-Length: 0\r\n\r\n")

    try:
        ports = serve(ok, socket.AF_INET6)
        port = next(ports)
    except OSError:
        pytest.skip("no IPv6 loopback here")
    try:
        assert run_check(Probe(http={"port": port}), ExecContext()).passed
        assert run_check(Probe(tcp={"port": port}), ExecContext()).passed
    finally:
        ports.close()


def test_an_exec_check_that_floods_its_output_keeps_memory_flat(tmp_path: Path) -> None:
    flood = Probe(
        exec=["sh", "-c", "head -c 60000000 /dev/zero | tr '\\0' x; exit 4"], timeout_s=20
    )
    tracemalloc.start()
    try:
        outcome = run_check(flood, ExecContext(env={"PATH": os.defpath}, cwd=tmp_path))
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert outcome.detail.startswith("exec sh -c head") and ": exit code 4: xxxx" in outcome.detail
    assert peak < 8 * 2**20, f"{peak / 2**20:.0f} MiB held for 60 MB of output"


def test_an_exec_check_is_judged_at_its_exit_and_what_it_leaves_is_killed(
    tmp_path: Path,
) -> None:
    pid_file = tmp_path / "child"
    # its child holds the output pipe open, and another lives on quietly: both are the check's
    script = f"sleep 60 & sleep 61 >/dev/null 2>&1 & echo $! > {pid_file}; exit 0"
    probe = Probe(exec=["sh", "-c", script], timeout_s=5)
    began = time.monotonic()
    outcome = run_check(probe, ExecContext(env={"PATH": os.defpath}, cwd=tmp_path))
    assert outcome.passed, outcome
    assert time.monotonic() - began < 2.0  # at its exit, not at the timeout
    wait_dead(int(pid_file.read_text()))


def wait_dead(pid: int, timeout: float = 3.0) -> None:
    deadline = time.monotonic() + timeout
    while alive(pid):
        assert time.monotonic() < deadline, f"process {pid} is still alive"
        time.sleep(0.05)


def alive(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/stat") as handle:
            return handle.read().rsplit(")", 1)[1].split()[0] not in ("Z", "X")
    except OSError:
        return False


def test_slow_checks_do_not_hold_up_a_quick_one() -> None:
    quick_calls: list[float] = []

    def check(probe: Probe, context: ExecContext) -> Outcome:
        if probe.exec == ["slow"]:
            time.sleep(probe.timeout_s)  # a check that hangs until its timeout
            return Outcome(False, "no answer")
        quick_calls.append(time.monotonic())
        return Outcome(True)

    runner = ProbeRunner(check=check)
    slow = Probe(exec=["slow"], timeout_s=3.0, period_s=0.5, failure_threshold=1000)
    try:
        for i in range(12):
            runner.add(f"slow{i}", None, slow)
        time.sleep(0.2)  # every slow check is under way
        runner.add("quick", None, Probe(exec=["quick"], period_s=0.5))
        time.sleep(2.0)
        assert len(quick_calls) >= 3, quick_calls  # every 0.5 s, slow ones or not
    finally:
        runner.close()


def test_closing_the_runner_stops_a_check_under_way(tmp_path: Path) -> None:
    pid_file = tmp_path / "check"
    hang = Probe(exec=["sh", "-c", f"echo $$ > {pid_file}; exec sleep 60"], timeout_s=60)
    runner = ProbeRunner()
    context = ExecContext(env={"PATH": os.defpath}, cwd=tmp_path)
    runner.add("t1", hang, None, context)
    deadline = time.monotonic() + 5.0
    while not pid_file.exists() or not pid_file.read_text().strip():
        assert time.monotonic() < deadline, "the check never started"
        time.sleep(0.02)
    began = time.monotonic()
    runner.close()
    assert time.monotonic() - began < 2.0
    wait_dead(int(pid_file.read_text()), timeout=2.0)  # not left for its 60 s


def test_a_task_that_exits_as_its_liveness_probe_fails_is_not_blamed_on_it(
    tmp_path: Path,
) -> None:
    """The verdict arrives after the task has exited on its own (0), before it is reaped."""
    release = threading.Event()

    def check(probe: Probe, context: ExecContext) -> Outcome:
        release.wait(10.0)
        return Outcome(False, "refused")

    rt = ProcessRuntime(tmp_path / "work")
    rt.probes = ProbeRunner(check=check)
    try:
        liveness = {"exec": ["x"], "failure_threshold": 1, "period_s": 0.5}
        rt.start(launch("x1.0.0", "true", liveness=liveness))  # started: its check waits
        time.sleep(0.5)  # `true` has exited; no poll has reaped it yet
        release.set()
        time.sleep(0.3)  # the verdict is in (the runner counts it at once)
        report = wait_end(rt, "x1.0.0")["x1.0.0"]
    finally:
        rt.shutdown(grace_s=0.2)
    assert (report.exit_code, report.liveness_failed, report.reason) == (0, False, "")
