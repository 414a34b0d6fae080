"""A batch task's output files (``TaskLaunch.output_file``, agent/output_files.py) with real
processes: a task writing far faster than its file takes it loses nothing, in the file or in
its log (it waits on the pipe); a link the job put in place of its file, pointing at a file
of root's, is opened with the task's user's rights (the kernel refuses), never root's."""

from __future__ import annotations

import contextlib
import os
import re
import signal
import sys
import threading
import time
from pathlib import Path

import pytest

from fusesched.agent.cgroups import MemoryCgroups
from fusesched.agent.output_files import unwritable
from fusesched.agent.runtime import REASON_LIVENESS, REASON_OOM, ProcessRuntime
from fusesched.agent.users import Identity
from fusesched.api.wire import TaskLaunch, TaskReport

from .helpers import launch, read_all, run_one, wait_end

WHO = Identity("someone", 234567, 234568)


def batch(task_id: str, script: str, **fields: object) -> TaskLaunch:
    return TaskLaunch.model_validate(
        {"task_id": task_id, "job_id": task_id.split(".")[0], "script": script, **fields}
    )


def test_a_fast_writer_loses_nothing(tmp_path: Path) -> None:
    out = tmp_path / "big.txt"
    rt = ProcessRuntime(tmp_path / "work")
    script = "head -c 8000000 /dev/zero | tr '\\0' x; echo; echo err >&2; echo end"
    try:
        report, log = run_one(rt, batch("1.main.0", script, output_file=str(out)), timeout=60)
    finally:
        rt.shutdown(grace_s=0.2)
    assert report.exit_code == 0
    assert len(log) == 8_000_000 + len("\nerr\nend\n") and log.endswith("\nerr\nend\n")
    assert out.read_text() == log


@pytest.mark.skipif(os.geteuid() != 0, reason="only root switches users")
def test_a_link_to_a_file_of_roots_is_not_written(shared: Path) -> None:
    secret = shared / "roots"
    secret.write_text("root's own\n")
    secret.chmod(0o644)
    own = shared / "own"  # the user's folder (no sticky-bit protection of links there)
    own.mkdir()
    os.chown(own, WHO.uid, WHO.gid)
    (own / "out.txt").symlink_to(secret)
    rt = ProcessRuntime(shared / "work", identities=lambda _user: WHO)
    try:
        report, log = run_one(rt, batch("2.main.0", "echo hi", output_file=f"{own}/out.txt"))
    finally:
        rt.shutdown(grace_s=0.2)
    assert report.exit_code == 0  # the job runs; its log says why there is no file
    assert secret.read_text() == "root's own\n"
    assert f"{own}/out.txt: Permission denied" in log and log.endswith("hi\n")


@pytest.mark.skipif(os.geteuid() != 0, reason="only root switches users")
def test_a_folder_only_root_may_write_is_named_in_the_log(shared: Path) -> None:
    roots = shared / "roots-folder"
    roots.mkdir(mode=0o755)
    os.chmod(roots, 0o755)
    rt = ProcessRuntime(shared / "work", identities=lambda _user: WHO)
    try:
        report, log = run_one(rt, batch("3.main.0", "echo hi", output_file=f"{roots}/o.txt"))
    finally:
        rt.shutdown(grace_s=0.2)
    assert report.exit_code == 0 and not (roots / "o.txt").exists()
    first = log.splitlines()[0]
    assert first.startswith(f"fusesched: the output file {roots}/o.txt cannot be written")
    assert (
        f"uid {WHO.uid} (user someone's), which may not write {roots} (owner uid 0, mode 755)"
        in first
    )
    assert log.endswith("hi\n")


def test_why_an_output_file_cannot_be_written(tmp_path: Path) -> None:
    me = os.stat(tmp_path)
    mine = Identity("me", me.st_uid, me.st_gid)
    stranger = Identity("root", 234567, 234568)
    os.chmod(tmp_path, 0o755)
    assert unwritable(str(tmp_path / "new.txt"), mine) is None  # the owner writes its folder
    why = unwritable(str(tmp_path / "new.txt"), stranger)
    assert why is not None and "never as root" in why and "mode 755" in why
    os.chmod(tmp_path, 0o1777)
    assert unwritable(str(tmp_path / "new.txt"), stranger) is None  # anyone may write there
    (tmp_path / "kept.txt").write_text("")
    os.chmod(tmp_path / "kept.txt", 0o644)
    assert "kept.txt (owner uid" in (unwritable(str(tmp_path / "kept.txt"), stranger) or "")
    assert unwritable(str(tmp_path / "missing" / "x.txt"), stranger) is None  # tee says so


def test_an_oom_kill_in_a_batch_script_is_said_at_the_end_of_its_error_file(
    tmp_path: Path,
) -> None:
    """A script whose child the OOM killer kills exits 137 (bash's), yet its task's reason is
    the OOM killer's, and its error file (else its output file) and log end with the agent's
    line naming the step, as slurmstepd's ``Detected 1 oom-kill event(s) in StepId=N.batch``;
    a task without an OOM kill gets no such line."""
    cgroups = MemoryCgroups.detect()
    if not cgroups.available:
        pytest.skip(f"no writable cgroup v1 memory controller: {cgroups.unavailable_reason}")
    rt = ProcessRuntime(tmp_path / "work", memory_cgroups=cgroups)
    out, err = tmp_path / "o.txt", tmp_path / "e.txt"
    hog = f"{sys.executable} -c 'b = bytearray(256 * 1024 * 1024)'"
    script = f"echo before; {hog}; echo after $?"
    limit = 64 * 1024 * 1024
    try:
        report, log = run_one(
            rt,
            batch(
                "7.main.0", script, output_file=str(out), error_file=str(err), memory_bytes=limit
            ),
        )
        alone = tmp_path / "alone.txt"
        merged, merged_log = run_one(
            rt, batch("8.main.0", script, output_file=str(alone), memory_bytes=limit)
        )
        quiet, _ = run_one(rt, batch("9.main.0", "echo fine", output_file=str(tmp_path / "q")))
    finally:
        rt.shutdown(grace_s=0.2)
    line = (
        "fusesched: error: Detected 1 oom-kill event(s) in StepId={}.batch cgroup. Some of "
        "your processes may have been killed by the cgroup out-of-memory handler.\n"
    )
    assert (report.exit_code, report.reason) == (0, REASON_OOM)  # ("echo after" ran last)
    assert out.read_text() == "before\nafter 137\n"
    assert err.read_text().endswith(line.format(7)) and log.endswith(line.format(7))
    assert merged.reason == REASON_OOM and alone.read_text().endswith(line.format(8))
    assert merged_log.endswith(line.format(8))
    assert quiet.reason == "" and (tmp_path / "q").read_text() == "fine\n"


#: A shell hog the OOM killer ends: ``tail`` keeps a pipe without newlines all in memory.
SHELL_HOG = "head -c 268435456 /dev/zero | tail > /dev/null"


def _cgroups() -> MemoryCgroups:
    cgroups = MemoryCgroups.detect()
    if not cgroups.available:
        pytest.skip(f"no writable cgroup v1 memory controller: {cgroups.unavailable_reason}")
    return cgroups


@pytest.mark.skipif(os.geteuid() != 0, reason="only root switches users")
def test_the_oom_line_never_follows_a_link_put_in_place_of_the_log(shared: Path) -> None:
    """A task without output files gets the OOM line in its log, which lies in its user's
    folder: a link (or a FIFO) that user put in the log's place is not followed by the agent
    (root): the file it points at is left alone, and the agent does not hang on a FIFO."""
    cgroups = _cgroups()
    victim = shared / "roots"
    victim.write_text("root's own\n")
    victim.chmod(0o644)
    rt = ProcessRuntime(shared / "work", memory_cgroups=cgroups, identities=lambda _user: WHO)
    limit = 64 * 1024 * 1024
    linked = f"rm -f output.log; ln -s {victim} output.log; {SHELL_HOG}; echo after $?"
    fifo = f"rm -f output.log; mkfifo output.log; {SHELL_HOG}"
    fifo_path = shared / "work" / "tasks" / "5.main.0" / "output.log"
    try:
        report, _ = run_one(rt, batch("4.main.0", linked, memory_bytes=limit), timeout=30)
        threading.Thread(target=_read_later, args=(fifo_path, 20.0), daemon=True).start()
        began = time.monotonic()
        piped, _ = run_one(rt, batch("5.main.0", fifo, memory_bytes=limit), timeout=30)
        took = time.monotonic() - began
    finally:
        rt.shutdown(grace_s=0.2)
    assert report.reason == REASON_OOM and piped.reason == REASON_OOM
    assert victim.read_text() == "root's own\n"
    assert took < 20


def _read_later(fifo: Path, after_s: float) -> None:
    """Open ``fifo`` for reading after ``after_s`` (a writer blocked opening it goes on)."""
    time.sleep(after_s)
    with contextlib.suppress(OSError):
        fd = os.open(fifo, os.O_RDONLY | os.O_NONBLOCK)
        time.sleep(1.0)
        os.close(fd)


def test_a_stuck_writer_does_not_hold_the_agent_at_the_oom_line(tmp_path: Path) -> None:
    """The output file's writer is stopped (a file system that hangs, or its user stopped
    it) and its pipe full when the task ends out of memory: the agent does not block writing
    its line there (its whole loop would), it says it in the log instead and stops the
    writer as always."""
    cgroups = _cgroups()
    rt = ProcessRuntime(tmp_path / "work", memory_cgroups=cgroups)
    # the pipe fills (its writer stopped) while a background head blocks on it, then the hog
    # (bash's "Killed" would wait on the pipe too: the task would not end)
    script = f"exec 2>/dev/null; sleep 0.5; head -c 1000000 /dev/zero & sleep 0.5; {SHELL_HOG}"
    spec = batch("6.main.0", script, output_file=str(tmp_path / "o.txt"), memory_bytes=64 << 20)
    rt.start(spec)
    rt.poll()
    (writer,) = rt._tasks["6.main.0"].writers
    os.kill(writer.pid, signal.SIGSTOP)
    ended: list[TaskReport] = []

    def watch() -> None:
        ended.extend(wait_end(rt, "6.main.0", timeout=60).values())

    thread = threading.Thread(target=watch, daemon=True)
    thread.start()
    thread.join(timeout=30)
    stuck = thread.is_alive()
    with contextlib.suppress(ProcessLookupError):
        os.kill(writer.pid, signal.SIGCONT)  # (lets a stuck agent go on)
    thread.join(timeout=30)
    try:
        log = read_all(rt, "6.main.0")
    finally:
        rt.shutdown(grace_s=0.2)
    assert not stuck, "the agent blocked writing the OOM line to a full pipe"
    assert [r.reason for r in ended] == [REASON_OOM]
    assert "Detected 1 oom-kill event(s) in StepId=6.batch cgroup" in log


#: slurmstepd's line when it stops a batch script, as the agent words it.
STOPPED = re.compile(
    r"fusesched: error: \*\*\* JOB (\d+) ON n-7 CANCELLED AT "
    r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d(.*) \*\*\*\n"
)


def test_a_stopped_batch_script_says_why_as_slurmstepd_does(tmp_path: Path) -> None:
    """A batch script stopped at its time limit, or cancelled, preempted or requeued by the
    controller, gets slurmstepd's line in its error file (else its output file) and log
    (``*** JOB 11 ON n-7 CANCELLED AT <time> DUE TO TIME LIMIT ***``: what users grep a job's
    output for); a stop for another reason, or a task that is not a batch script, none."""
    rt = ProcessRuntime(tmp_path / "work")
    env = {"SLURMD_NODENAME": "n-7"}
    script = "echo started; trap 'echo bye; exit 143' TERM; sleep 30 & wait"
    cases = {
        "11": ("walltime", " DUE TO TIME LIMIT"),
        "12": ("cancelled by user", ""),
        "13": ("preempted for job 9 (gpu, gold)", " DUE TO PREEMPTION"),
        "14": ("requeued by user", " DUE TO JOB REQUEUE"),
        "15": (f"{REASON_LIVENESS}: exit 1", None),
    }
    files = {job: tmp_path / f"{job}.err" for job in cases}
    try:
        for job, (reason, _) in cases.items():
            fields: dict[str, object] = {"env": env, "error_file": str(files[job])}
            fields["output_file"] = str(tmp_path / f"{job}.out")
            if reason == "walltime":
                fields["walltime_s"] = 1.0
            rt.start(batch(f"{job}.main.0", script, **fields))
        rt.start(launch("16.main.0", "sleep", "30", env=env))
        time.sleep(0.5)
        for job, (reason, _) in cases.items():
            if reason != "walltime":
                rt.kill(f"{job}.main.0", 2.0, reason)
        rt.kill("16.main.0", 2.0, "cancelled by user")
        wait_end(rt, *(f"{job}.main.0" for job in [*cases, "16"]), timeout=20)
        logs = {job: read_all(rt, f"{job}.main.0") for job in [*cases, "16"]}
    finally:
        rt.shutdown(grace_s=0.2)
    for job, (_, cause) in cases.items():
        said = STOPPED.findall(files[job].read_text())
        if cause is None:
            assert said == [] and "CANCELLED" not in logs[job]
            continue
        assert said == [(job, cause)], (job, files[job].read_text())
        assert STOPPED.findall(logs[job]) == [(job, cause)]
        assert (tmp_path / f"{job}.out").read_text() == "started\nbye\n"
    assert "CANCELLED" not in logs["16"]
