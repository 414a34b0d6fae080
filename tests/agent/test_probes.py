"""Liveness and readiness probes on the agent, with real processes: a small HTTP server whose
``/healthz`` fails once a file appears is stopped by its liveness probe (the exit report says
so); readiness goes false → true when a server starts listening, and false while it is being
stopped; an exec check that hangs is killed at its timeout, whole process group; exec checks run
with the task's environment, in its folder, as its user, and inside its container image; the
thresholds count checks in a row."""

from __future__ import annotations

import os
import socket
import threading
import time
from collections.abc import Callable
from pathlib import Path

import pytest
from tests.probe_server import probe_server

from fusesched.agent.probes import ExecContext, Outcome, ProbeRunner, run_check
from fusesched.agent.runtime import REASON_LIVENESS, ProcessRuntime
from fusesched.agent.users import Identity
from fusesched.api.wire import TaskReport, TaskState
from fusesched.submit.probes import Probe

from .conftest import make_rootfs
from .helpers import launch, wait_end


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def poll_until(
    rt: ProcessRuntime, done: Callable[[], object], timeout: float = 10.0
) -> list[TaskReport]:
    reports: list[TaskReport] = []
    deadline = time.monotonic() + timeout
    while not done():
        assert time.monotonic() < deadline, f"timed out; reports so far: {reports}"
        reports += rt.poll()
        time.sleep(0.02)
    return reports


def test_a_failing_liveness_probe_stops_the_task_and_says_why(
    runtime: ProcessRuntime, shared: Path
) -> None:
    port = free_port()
    liveness = {"http": {"port": port, "path": "/healthz"}, "period_s": 0.5}
    liveness |= {"failure_threshold": 2, "initial_delay_s": 1.0}
    runtime.start(launch("l1.main.0", *probe_server(shared, port), grace_s=1.0, liveness=liveness))
    time.sleep(3.0)  # healthy: many checks pass, nothing happens
    assert [r.state for r in runtime.poll()] == [TaskState.RUNNING]
    assert runtime.running() == ["l1.main.0"]
    (shared / "unhealthy").touch()
    began = time.monotonic()
    report = wait_end(runtime, "l1.main.0", timeout=10.0)["l1.main.0"]
    assert time.monotonic() - began < 4.0  # two failures 0.5 s apart, then SIGTERM
    assert report.liveness_failed
    assert report.exit_code == -15  # stopped with SIGTERM, as a cancel is
    assert report.reason == (
        f"{REASON_LIVENESS}: GET http://127.0.0.1:{port}/healthz: HTTP 500 (2 checks in a row)"
    )
    assert "liveness_failed" in report.model_dump_json()


def test_a_task_without_probes_reports_no_liveness_failure(runtime: ProcessRuntime) -> None:
    runtime.start(launch("n1.0.0", "true"))
    report = wait_end(runtime, "n1.0.0")["n1.0.0"]
    assert not report.liveness_failed and report.exit_code == 0
    assert "liveness_failed" not in report.model_dump_json()  # (old controllers refuse it)
    assert runtime.readiness() == {}


def test_readiness_goes_true_once_the_server_listens(runtime: ProcessRuntime, shared: Path) -> None:
    port = free_port()
    readiness = {"tcp": {"port": port}, "period_s": 0.5}
    runtime.start(
        launch("r1.main.0", *probe_server(shared, port, delay_s=2.0), readiness=readiness)
    )
    runtime.poll()
    assert runtime.readiness() == {"r1.main.0": False}  # not ready before a check passes
    time.sleep(1.0)
    assert runtime.readiness() == {"r1.main.0": False}  # checks fail: nothing listens yet
    poll_until(runtime, lambda: runtime.readiness().get("r1.main.0"), timeout=6.0)
    runtime.kill("r1.main.0", grace_s=5.0, reason="cancelled")
    assert runtime.readiness() == {"r1.main.0": False}  # being stopped: not ready
    wait_end(runtime, "r1.main.0")
    assert runtime.readiness() == {}


def test_readiness_goes_false_after_failure_threshold_failures(
    runtime: ProcessRuntime, shared: Path
) -> None:
    port = free_port()
    readiness = {"http": {"port": port, "path": "/healthz"}, "period_s": 0.5}
    readiness |= {"failure_threshold": 2, "success_threshold": 2}
    runtime.start(launch("r2.main.0", *probe_server(shared, port), readiness=readiness))
    poll_until(runtime, lambda: runtime.readiness().get("r2.main.0"), timeout=6.0)
    (shared / "unhealthy").touch()
    poll_until(runtime, lambda: runtime.readiness().get("r2.main.0") is False, timeout=6.0)
    assert runtime.running() == ["r2.main.0"]  # not ready, not stopped
    (shared / "unhealthy").unlink()
    poll_until(runtime, lambda: runtime.readiness().get("r2.main.0"), timeout=6.0)


def test_a_hanging_exec_check_is_killed_at_its_timeout(shared: Path) -> None:
    pids = shared / "pids"
    # the check and a child of it in its process group both hang
    hang = Probe(exec=["sh", "-c", f"sleep 60 & echo $! $$ > {pids}; wait"], timeout_s=0.5)
    began = time.monotonic()
    outcome = run_check(hang, ExecContext(env={"PATH": os.defpath}, cwd=shared))
    assert time.monotonic() - began < 3.0
    assert not outcome.passed
    assert outcome.detail.endswith("timed out after 0.5 s (killed)"), outcome.detail
    for pid in (int(p) for p in pids.read_text().split()):
        deadline = time.monotonic() + 3.0
        while _alive(pid):
            assert time.monotonic() < deadline, f"process {pid} of the check is still alive"
            time.sleep(0.05)


def _alive(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/stat") as handle:
            return handle.read().rsplit(")", 1)[1].split()[0] not in ("Z", "X")
    except OSError:
        return False


def test_checks_say_why_they_fail(shared: Path) -> None:
    context = ExecContext(env={"PATH": os.defpath}, cwd=shared)
    port = free_port()  # nothing listens there
    refused = run_check(Probe(tcp={"port": port}), context)
    assert not refused.passed and refused.detail == f"TCP 127.0.0.1:{port}: connection refused"
    nobody = run_check(Probe(http={"port": port, "path": "/x"}), context)
    assert nobody.detail == f"GET http://127.0.0.1:{port}/x: connection refused", nobody
    failed = run_check(Probe(exec=["sh", "-c", "echo not yet; exit 3"]), context)
    assert failed.detail == "exec sh -c echo not yet; exit 3: exit code 3: not yet"
    missing = run_check(Probe(exec=["no-such-program-here"]), context)
    assert not missing.passed and "cannot run" in missing.detail


def test_an_exec_probe_runs_with_the_tasks_environment_in_its_folder(
    runtime: ProcessRuntime, shared: Path
) -> None:
    work = shared / "w"
    work.mkdir()
    check = 'test "$MARK" = "from-the-job" && test -f started && test "$FUSESCHED_TASK_ID" = e1.0.0'
    readiness = {"exec": ["sh", "-c", check], "period_s": 0.5}
    script = "sleep 1; touch started; exec sleep 30"
    spec = launch("e1.0.0", script=script, workdir=str(work), env={"MARK": "from-the-job"})
    runtime.start(spec.model_copy(update={"readiness": Probe.model_validate(readiness)}))
    runtime.poll()
    assert runtime.readiness() == {"e1.0.0": False}
    poll_until(runtime, lambda: runtime.readiness().get("e1.0.0"), timeout=6.0)


@pytest.mark.skipif(os.geteuid() != 0, reason="only root switches users")
def test_an_exec_probe_runs_as_the_tasks_user_in_its_folder(shared: Path) -> None:
    who = Identity("someone", 234567, 234568)
    rt = ProcessRuntime(shared / "work", identities=lambda _user: who)
    out = shared / "probe-said"
    out.touch()
    out.chmod(0o666)
    readiness = {"exec": ["sh", "-c", f"id -u > {out}; pwd >> {out}"], "period_s": 0.5}
    try:
        rt.start(launch("u1.0.0", "sleep", "30", readiness=readiness))
        poll_until(rt, lambda: rt.readiness().get("u1.0.0"), timeout=6.0)
    finally:
        rt.shutdown(grace_s=0.2)
    uid, folder = out.read_text().split()
    assert uid == str(who.uid)
    assert folder == str(shared / "work" / "tasks" / "u1.0.0")


def test_an_exec_probe_of_a_container_task_runs_in_its_image(
    container_runtime: ProcessRuntime, tmp_path: Path
) -> None:
    image = make_rootfs(tmp_path / "image")
    readiness = {"exec": ["cat", "/etc/image-marker"], "period_s": 0.5}
    assert not Path("/etc/image-marker").exists()  # the host has none: only the image has it
    container_runtime.start(launch("c1.0.0", "sleep", "30", image=str(image), readiness=readiness))
    poll_until(container_runtime, lambda: container_runtime.readiness().get("c1.0.0"), 8.0)


class Scripted:
    """A check that answers from a list (then passes), recording when it ran."""

    def __init__(self, answers: list[bool]) -> None:
        self.answers = answers
        self.calls = 0
        self.lock = threading.Lock()

    def __call__(self, probe: Probe, context: ExecContext) -> Outcome:
        with self.lock:
            self.calls += 1
            passed = self.answers.pop(0) if self.answers else True
        return Outcome(passed, "" if passed else "scripted failure")


def wait_for(done: Callable[[], object], timeout: float = 5.0) -> None:
    deadline = time.monotonic() + timeout
    while not done():
        assert time.monotonic() < deadline, "timed out"
        time.sleep(0.01)


def test_liveness_fails_only_after_failure_threshold_failures_in_a_row() -> None:
    check = Scripted([False, False, True, False, False, False])
    runner = ProbeRunner(check=check)
    probe = Probe(exec=["x"], period_s=0.5, failure_threshold=3)
    try:
        runner.add("t1", probe, None)
        wait_for(lambda: check.calls >= 5, timeout=5.0)
        assert runner.failed() == {}  # two, a success, two: never three in a row
        wait_for(lambda: check.calls >= 6, timeout=2.0)
        wait_for(lambda: runner.failed() or None, timeout=1.0)
    finally:
        runner.close()


def test_failed_names_each_task_once_and_stops_its_checks() -> None:
    check = Scripted([False] * 100)
    runner = ProbeRunner(check=check)
    try:
        runner.add("t1", Probe(exec=["x"], period_s=0.5, failure_threshold=1), None)
        found: dict[str, str] = {}
        wait_for(lambda: found.update(runner.failed()) or found, timeout=3.0)
        assert found == {"t1": "scripted failure"}
        calls = check.calls
        time.sleep(1.2)
        assert check.calls == calls and runner.failed() == {}
    finally:
        runner.close()


def test_the_first_check_waits_for_the_initial_delay() -> None:
    check = Scripted([])
    runner = ProbeRunner(check=check)
    try:
        runner.add("t1", None, Probe(exec=["x"], initial_delay_s=1.0, period_s=0.5))
        time.sleep(0.7)
        assert check.calls == 0 and runner.readiness() == {"t1": False}
        wait_for(lambda: runner.readiness() == {"t1": True}, timeout=2.0)
        runner.remove("t1")
        assert runner.readiness() == {}
    finally:
        runner.close()
