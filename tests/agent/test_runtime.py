"""ProcessRuntime with real processes: exits, logs, environment, pinning, kills, limits."""

from __future__ import annotations

import os
import sys
import time
from pathlib import Path

import pytest

from fusesched.agent.cgroups import MemoryCgroups
from fusesched.agent.images import ImageCache
from fusesched.agent.logtext import chunk_end
from fusesched.agent.runtime import REASON_OOM, REASON_WALLTIME, ProcessRuntime
from fusesched.agent.task_env import cuda_visible_devices
from fusesched.api.wire import TaskState

from .helpers import launch, read_all, run_one, wait_end


def test_exit_code_and_combined_log(runtime: ProcessRuntime) -> None:
    runtime.start(launch("j1.main.0", "sh", "-c", "echo out; echo err >&2; exit 3"))
    first = runtime.poll()  # on a busy machine the task may have ended already too
    started = [r for r in first if r.state is TaskState.RUNNING]
    assert [(r.task_id, r.state) for r in started] == [("j1.main.0", TaskState.RUNNING)]
    assert started[0].pid is not None
    ended = [r for r in first if r.state is not TaskState.RUNNING]
    report = ended[0] if ended else wait_end(runtime, "j1.main.0")["j1.main.0"]
    assert (report.state, report.exit_code, report.reason) == (TaskState.EXITED, 3, "")
    assert read_all(runtime, "j1.main.0") == "out\nerr\n"
    assert runtime.running() == []
    assert runtime.poll() == []


def test_script_runs_with_bash_and_gets_argv(runtime: ProcessRuntime) -> None:
    script = '#!/bin/bash\n#SBATCH --nodes=1\necho "args=$*" shell=${BASH_VERSION:+bash}\n'
    report, text = run_one(runtime, launch("j2.0.0", "a", "b", script=script))
    assert report.exit_code == 0
    assert text == "args=a b shell=bash\n"


@pytest.mark.parametrize(
    ("first", "body", "shown"),
    [
        # Slurm executes the script: its #! line picks the interpreter, as the kernel's
        ("#!/usr/bin/env python3", "import sys\nprint('py', sys.argv[1:])", "py ['a', 'b']"),
        (f"#!{sys.executable} -I", "import sys\nprint(sys.flags.isolated)", "1"),
        ("#!/bin/bash -l", "shopt -q login_shell && echo login", "login"),
        ("#! /bin/sh", 'echo "sh $1"', "sh a"),
        ("#SBATCH -n 1", 'echo "bash ${BASH_VERSION:+yes}"', "bash yes"),  # (no #!: bash)
    ],
)
def test_a_script_runs_by_its_interpreter(
    runtime: ProcessRuntime, first: str, body: str, shown: str
) -> None:
    script = f"{first}\n#SBATCH -J x\n{body}\n"
    report, text = run_one(runtime, launch("j2.1.0", "a", "b", script=script))
    assert (report.exit_code, text) == (0, f"{shown}\n")


def test_a_login_shell_keeps_the_agents_srun_first_on_its_path(
    runtime: ProcessRuntime, tmp_path: Path
) -> None:
    """``#!/bin/bash -l`` (HPC scripts' way to get ``module``) reads /etc/profile, which
    resets PATH: the agent's ``srun`` would be lost (or a real Slurm's found); its BASH_ENV
    file puts it first again, then reads the job's own BASH_ENV."""
    own = tmp_path / "own_env.sh"
    own.write_text("OWN_ENV_READ=yes\n")
    script = "#!/bin/bash -l\ncommand -v srun scontrol\necho ${OWN_ENV_READ:-no}\n"
    env = {"SLURM_JOB_ID": "2", "BASH_ENV": str(own)}
    report, text = run_one(runtime, launch("2.4.0", script=script, env=env))
    srun, scontrol, read = text.split()
    assert report.exit_code == 0
    assert srun == str(runtime.work_dir / "bin" / "srun") and scontrol.endswith("/bin/scontrol")
    assert read == "yes"


def test_a_script_whose_interpreter_is_missing_fails_to_start(runtime: ProcessRuntime) -> None:
    runtime.start(launch("j2.2.0", script="#!/no/such/python\nprint(1)\n"))
    [report] = runtime.poll()
    assert report.state is TaskState.FAILED_TO_START
    assert report.reason == "executable not found: /no/such/python"


def test_environment_and_cuda_visible_devices(runtime: ProcessRuntime, tmp_path: Path) -> None:
    show = "echo $CUDA_VISIBLE_DEVICES/$MY_VAR/$FUSESCHED_TASK_ID/$FUSESCHED_JOB_ID/$PWD"
    spec = launch("j3.w.0", "sh", "-c", show, env={"MY_VAR": "x"}, gpu_indices=[2, 0])
    _report, text = run_one(runtime, spec)
    task_dir = tmp_path / "work" / "tasks" / "j3.w.0"
    assert text.strip() == f"2,0/x/j3.w.0/j3/{task_dir}"

    mig = launch("j3.w.1", "sh", "-c", "echo $CUDA_VISIBLE_DEVICES", gpu_uuids=["MIG-a", "MIG-b"])
    assert run_one(runtime, mig)[1] == "MIG-a,MIG-b\n"
    # no GPUs given: none visible, not "all of them"
    none = launch("j3.w.2", "sh", "-c", 'echo "[${CUDA_VISIBLE_DEVICES-unset}]"')
    assert run_one(runtime, none)[1] == "[]\n"
    # the launch cannot override what the agent assigned
    forged = launch(
        "j3.w.3",
        "sh",
        "-c",
        "echo $CUDA_VISIBLE_DEVICES",
        env={"CUDA_VISIBLE_DEVICES": "0,1,2,3"},
        gpu_indices=[1],
    )
    assert run_one(runtime, forged)[1] == "1\n"
    assert cuda_visible_devices(forged) == "1"


def test_workdir(runtime: ProcessRuntime, tmp_path: Path) -> None:
    _report, text = run_one(runtime, launch("j4.0.0", "pwd", workdir=str(tmp_path)))
    assert text == f"{tmp_path}\n"


def test_tmp_dir_is_the_tasks_tmpdir_unless_the_job_sets_one(tmp_path: Path) -> None:
    tmp = tmp_path / "node-tmp"
    tmp.mkdir()
    rt = ProcessRuntime(tmp_path / "work", ImageCache(tmp_path / "images"), tmp_dir=tmp)
    try:
        report, text = run_one(rt, launch("t1", "sh", "-c", 'echo "$TMPDIR"'))
        assert (report.exit_code, text.strip()) == (0, str(tmp))
        own = launch("t2", "sh", "-c", 'echo "$TMPDIR"', env={"TMPDIR": "/job/own"})
        report, text = run_one(rt, own)
        assert text.strip() == "/job/own"
    finally:
        rt.shutdown(grace_s=0.2)


def test_cpu_affinity_seen_by_the_child(runtime: ProcessRuntime) -> None:
    cpu = max(os.sched_getaffinity(0))
    spec = launch(
        "j5.0.0",
        "sh",
        "-c",
        "grep Cpus_allowed_list /proc/self/status; echo $FUSESCHED_CPU_IDS",
        cpu_ids=[cpu],
    )
    report, text = run_one(runtime, spec)
    assert report.exit_code == 0
    assert text.split() == ["Cpus_allowed_list:", str(cpu), str(cpu)]


def test_kill_with_grace_lets_a_trapping_task_exit_cleanly(runtime: ProcessRuntime) -> None:
    script = "trap 'echo stopping; exit 4' TERM\necho ready\nwhile true; do sleep 0.02; done\n"
    runtime.start(launch("j6.0.0", script=script))
    _wait_for_output(runtime, "j6.0.0", "ready")
    runtime.kill("j6.0.0", grace_s=5.0, reason="cancelled")
    report = wait_end(runtime, "j6.0.0", timeout=3.0)["j6.0.0"]
    assert (report.exit_code, report.reason) == (4, "cancelled")
    lines = read_all(runtime, "j6.0.0").splitlines()
    assert (lines[0], lines[-1]) == ("ready", "stopping")  # bash may add "Terminated" (sleep)


def test_kill_escalates_to_sigkill_when_sigterm_is_ignored(runtime: ProcessRuntime) -> None:
    script = "trap '' TERM\necho ready\nwhile true; do sleep 0.02; done\n"
    runtime.start(launch("j7.0.0", script=script))
    _wait_for_output(runtime, "j7.0.0", "ready")
    began = time.monotonic()
    runtime.kill("j7.0.0", grace_s=0.3, reason="preempted")
    deadline = runtime.next_deadline()
    assert deadline is not None and deadline <= time.monotonic() + 0.3
    report = wait_end(runtime, "j7.0.0")["j7.0.0"]
    assert (report.exit_code, report.reason) == (-9, "preempted")
    assert time.monotonic() - began >= 0.3


def test_kill_reaches_the_whole_process_group(runtime: ProcessRuntime, tmp_path: Path) -> None:
    pidfile = tmp_path / "child.pid"
    runtime.start(launch("j8.0.0", "sh", "-c", f"sleep 30 & echo $! > {pidfile}; wait"))
    while not pidfile.exists() or not pidfile.read_text().strip():
        time.sleep(0.01)
    child = int(pidfile.read_text())
    runtime.kill("j8.0.0", grace_s=2.0)
    report = wait_end(runtime, "j8.0.0")["j8.0.0"]
    assert report.reason == "cancelled"
    assert not _alive(child)


def test_leftover_processes_die_with_the_task(runtime: ProcessRuntime, tmp_path: Path) -> None:
    pidfile = tmp_path / "bg.pid"
    spec = launch("j9.0.0", "sh", "-c", f"sleep 30 >/dev/null 2>&1 & echo $! > {pidfile}")
    report, _ = run_one(runtime, spec)
    assert report.exit_code == 0
    assert not _alive(int(pidfile.read_text()))


def test_walltime_exceeded(runtime: ProcessRuntime) -> None:
    spec = launch("j10.0.0", "sleep", "30", walltime_s=0.2, grace_s=1.0)
    began = time.monotonic()
    report, _ = run_one(runtime, spec)
    assert (report.exit_code, report.reason) == (-15, REASON_WALLTIME)
    assert 0.2 <= time.monotonic() - began < 3.0


@pytest.mark.parametrize(
    ("fields", "reason"),
    [
        ({"argv": ["no-such-program-xyz"]}, "executable not found: no-such-program-xyz"),
        ({"argv": ["./missing.sh"]}, "executable not found: ./missing.sh"),
        ({"argv": []}, "nothing to run"),
        ({"argv": ["true"], "workdir": "/no/such/dir"}, "working directory does not exist"),
        ({"argv": ["true"], "cpu_ids": [4096]}, "CPUs 4096 are not available here"),
        ({"argv": ["true"], "image": "/no/such/image.tar"}, "image not found: /no/such/image.tar"),
        ({"argv": ["true"], "task_id": "../escape"}, "invalid task id"),
    ],
)
def test_failed_to_start(runtime: ProcessRuntime, fields: dict[str, object], reason: str) -> None:
    spec = launch("j11.0.0", **fields)
    runtime.start(spec)
    [report] = runtime.poll()
    assert report.state is TaskState.FAILED_TO_START
    assert report.reason.startswith(reason), report.reason
    assert runtime.running() == []


def test_a_file_that_is_not_executable(runtime: ProcessRuntime, tmp_path: Path) -> None:
    plain = tmp_path / "plain.sh"
    plain.write_text("echo hi\n")
    plain.chmod(0o644)
    runtime.start(launch("j12.0.1", str(plain)))
    [report] = runtime.poll()
    assert (report.state, report.reason) == (TaskState.FAILED_TO_START, f"not executable: {plain}")


def test_a_file_that_is_not_an_image(runtime: ProcessRuntime, tmp_path: Path) -> None:
    bogus = tmp_path / "image.tar"
    bogus.write_text("not a tarball")
    runtime.start(launch("j12.0.0", "true", image=str(bogus)))
    [report] = runtime.poll()
    assert report.state is TaskState.FAILED_TO_START
    assert "is not a root-filesystem directory or a tarball" in report.reason


def test_start_of_a_running_task_is_ignored(runtime: ProcessRuntime) -> None:
    spec = launch("j13.0.0", "sleep", "30")
    runtime.start(spec)
    runtime.start(spec)
    assert [r.state for r in runtime.poll()] == [TaskState.RUNNING]
    assert runtime.running() == ["j13.0.0"]
    runtime.kill("j13.0.0", 0, "done")
    assert wait_end(runtime, "j13.0.0")["j13.0.0"].exit_code == -9


def test_read_log_offsets_utf8_and_invalid_bytes(runtime: ProcessRuntime) -> None:
    # "é" is two bytes; \377 is not UTF-8 at all
    spec = launch("j14.0.0", "sh", "-c", "printf 'ab\\303\\251cd\\377e'")
    run_one(runtime, spec)
    assert runtime.read_log("j14.0.0", 0, max_bytes=4) is not None
    first = runtime.read_log("j14.0.0", 0, max_bytes=4)
    assert first is not None and first.data == "ab\u00e9"  # 4 bytes
    rest = runtime.read_log("j14.0.0", chunk_end(first))
    assert rest is not None and rest.data == "cd?e"  # one "?" per undecodable byte
    assert chunk_end(rest) == 8
    assert runtime.read_log("j14.0.0", 8) is None
    assert runtime.read_log("unknown", 0) is None
    # a running task's chunk never ends inside a character
    runtime.start(launch("j14.0.1", "sh", "-c", "printf 'x\\303\\251'; sleep 30"))
    _wait_for_output(runtime, "j14.0.1", "x")
    cut = runtime.read_log("j14.0.1", 0, max_bytes=4)
    assert cut is not None and cut.data == "x\u00e9"
    half = runtime.read_log("j14.0.1", 0, max_bytes=2)  # 4 bytes at least are read
    assert half is not None and half.data == "x\u00e9"


def test_shutdown_kills_everything_and_leaves_reports(runtime: ProcessRuntime) -> None:
    runtime.start(launch("j15.0.0", "sleep", "30"))
    runtime.start(launch("j15.0.1", "sh", "-c", "trap '' TERM; while true; do sleep 0.02; done"))
    time.sleep(0.1)
    began = time.monotonic()
    runtime.shutdown(grace_s=0.3)
    assert time.monotonic() - began < 3.0
    assert runtime.running() == []
    ends = {r.task_id: r for r in runtime.poll() if r.state is TaskState.EXITED}
    assert ends["j15.0.0"].exit_code == -15
    assert ends["j15.0.1"].exit_code == -9
    assert {r.reason for r in ends.values()} == {"agent shutdown"}


def test_memory_limit_through_a_cgroup(tmp_path: Path) -> None:
    cgroups = MemoryCgroups.detect()
    if not cgroups.available:
        pytest.skip(f"no writable cgroup v1 memory controller: {cgroups.unavailable_reason}")
    rt = ProcessRuntime(tmp_path / "work", ImageCache(tmp_path / "images"), memory_cgroups=cgroups)
    try:
        hog = "b = bytearray(256 * 1024 * 1024); print('survived')"
        spec = launch("j16.0.0", sys.executable, "-c", hog, memory_bytes=64 * 1024 * 1024)
        report, text = run_one(rt, spec)
        assert (report.exit_code, report.reason) == (-9, REASON_OOM)
        assert "survived" not in text
        # the agent says so at the end of its output, in slurmstepd's words
        assert text.endswith(
            "fusesched: error: Detected 1 oom-kill event(s) in task j16.0.0 cgroup. Some of "
            "your processes may have been killed by the cgroup out-of-memory handler.\n"
        )
        assert not list(cgroups.parent.glob("*.j16.0.0"))  # type: ignore[union-attr]
        small = launch(
            "j16.0.1",
            "sh",
            "-c",
            "echo $FUSESCHED_MEMORY_LIMIT_BYTES; cat /proc/self/cgroup | grep memory",
            memory_bytes=64 * 1024 * 1024,
        )
        report, text = run_one(rt, small)
        assert report.exit_code == 0
        limit, cgroup_line = text.splitlines()
        assert limit == str(64 * 1024 * 1024)
        assert cgroup_line.endswith(".j16.0.1") and "/fusesched/" in cgroup_line
    finally:
        rt.shutdown(grace_s=0.2)


def test_agents_on_one_machine_keep_their_cgroups_apart(tmp_path: Path) -> None:
    """Two agents (of two clusters) run a task of the same id: starting one must not kill the
    other (they share the machine's cgroup parent)."""
    cgroups = MemoryCgroups.detect()
    if not cgroups.available:
        pytest.skip(f"no writable cgroup v1 memory controller: {cgroups.unavailable_reason}")
    first = ProcessRuntime(tmp_path / "a", None, memory_cgroups=cgroups)
    second = ProcessRuntime(tmp_path / "b", None, memory_cgroups=cgroups)
    try:
        first.start(launch("7.main.0", "sleep", "30", memory_bytes=64 * 1024 * 1024))
        report, _ = run_one(second, launch("7.main.0", "true", memory_bytes=64 * 1024 * 1024))
        assert report.exit_code == 0
        assert first.running() == ["7.main.0"]
        assert not [r for r in first.poll() if r.state is not TaskState.RUNNING]
    finally:
        first.shutdown(grace_s=0.2)
        second.shutdown(grace_s=0.2)


def test_no_memory_cgroup_means_no_hard_limit_and_says_so(tmp_path: Path) -> None:
    rt = ProcessRuntime(
        tmp_path / "work", None, memory_cgroups=MemoryCgroups.disabled("no cgroups in the test")
    )
    spec = launch(
        "j17.0.0", "sh", "-c", 'echo "[$FUSESCHED_MEMORY_LIMIT_BYTES]"', memory_bytes=10**9
    )
    rt.start(spec)
    first = rt.poll()  # on a busy machine the task may have ended already too
    [started] = [r for r in first if r.state is TaskState.RUNNING]
    assert started.reason == "memory limit not enforced: no cgroups in the test"
    ended = [r for r in first if r.state is not TaskState.RUNNING]
    assert (ended[0] if ended else wait_end(rt, "j17.0.0")["j17.0.0"]).exit_code == 0
    assert read_all(rt, "j17.0.0") == "[]\n"
    rt.start(launch("j17.0.1", "true", image="/tmp"))
    [failed] = rt.poll()
    assert failed.reason == "container images are not enabled on this agent"


def _wait_for_output(rt: ProcessRuntime, task_id: str, text: str, timeout: float = 5.0) -> None:
    deadline = time.monotonic() + timeout
    while text not in read_all(rt, task_id):
        if time.monotonic() > deadline:
            raise AssertionError(f"{task_id} never printed {text!r}")
        time.sleep(0.01)


def _alive(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/stat") as handle:
            return handle.read().rsplit(")", 1)[1].split()[0] != "Z"
    except FileNotFoundError:
        return False


def test_a_new_agent_kills_what_a_crashed_one_left_running(tmp_path: Path) -> None:
    crashed = ProcessRuntime(tmp_path / "work", None, memory_cgroups=MemoryCgroups.disabled("-"))
    crashed.start(launch("j18.0.0", "sleep", "30"))
    crashed.start(launch("j18.0.1", "true"))
    reports = crashed.poll()  # j18.0.1 may have ended already: its exit can be reported too
    started = next(r for r in reports if r.task_id == "j18.0.0")
    assert started.state is TaskState.RUNNING and started.pid is not None
    time.sleep(0.1)  # j18.0.1 has exited; reaped or not, j18.0.0's pid file is still there
    fresh = ProcessRuntime(tmp_path / "work", None, memory_cgroups=MemoryCgroups.disabled("-"))
    assert "j18.0.0" in fresh.orphans_killed
    assert wait_end(crashed, "j18.0.0")["j18.0.0"].exit_code == -9
    assert not list((tmp_path / "work" / "tasks").glob("*/pid"))
