"""A task under another identity is started without anything of the job's environment reaching
a program that runs as root: a real ``LD_PRELOAD`` library (compiled here) records the uid of
every process that loads it, and the job's variables reach the task byte for byte."""

from __future__ import annotations

import os
import shutil
import subprocess
import tarfile
import time
from pathlib import Path

import pytest

from fusesched.agent.images import ImageCache
from fusesched.agent.runtime import ProcessRuntime
from fusesched.agent.task_shim import ENV_NAME, find_setpriv
from fusesched.agent.users import Identity
from fusesched.api.wire import TaskState

from .helpers import launch, run_one

pytestmark = pytest.mark.skipif(os.geteuid() != 0, reason="only root switches users")

WHO = Identity("someone", 234567, 234568)

RECORDER = r"""
#include <stdio.h>
#include <stdlib.h>
#include <unistd.h>
__attribute__((constructor)) static void record(void) {
    const char *path = getenv("UID_RECORD");
    if (!path) return;
    FILE *f = fopen(path, "a");
    if (f) { fprintf(f, "%d\n", (int)geteuid()); fclose(f); }
}
"""


def recorder(folder: Path) -> Path:
    compiler = shutil.which("cc") or shutil.which("gcc")
    if compiler is None:
        pytest.skip("no C compiler to build the LD_PRELOAD probe")
    source = folder / "record.c"
    source.write_text(RECORDER)
    library = folder / "record.so"
    subprocess.run(
        [compiler, "-shared", "-fPIC", "-o", str(library), str(source)],
        check=True,
        capture_output=True,
    )
    library.chmod(0o755)
    return library


def test_no_root_stage_loads_the_jobs_preload_library(shared: Path) -> None:
    library = recorder(shared)
    record = shared / "uids"
    record.touch()
    record.chmod(0o666)
    rt = ProcessRuntime(shared / "work", identities=lambda _user: WHO)
    env = {"LD_PRELOAD": str(library), "UID_RECORD": str(record)}
    try:
        report, text = run_one(rt, launch("j1.0.0", "id", "-u", env=env))
    finally:
        rt.shutdown(grace_s=0.2)
    assert report.exit_code == 0, text
    uids = [int(line) for line in record.read_text().split()]
    assert uids, "the task itself never loaded the library: LD_PRELOAD did not reach it"
    assert 0 not in uids, f"a program running as root loaded the job's library: {uids}"
    assert set(uids) == {WHO.uid}


def test_the_jobs_variables_reach_the_task_literally(shared: Path) -> None:
    rt = ProcessRuntime(shared / "work", identities=lambda _user: WHO)
    tricky = 'it\'s "quoted" $HOME `id` \\ and\na second line'
    try:
        report, text = run_one(
            rt,
            launch(
                "j2.0.0",
                "sh",
                "-c",
                'printf "%s|" "$TRICKY" "$EMPTY"',
                env={"TRICKY": tricky, "EMPTY": ""},
            ),
        )
    finally:
        rt.shutdown(grace_s=0.2)
    assert report.exit_code == 0, text
    assert text == f"{tricky}||"
    if find_setpriv() is not None:  # the quick start's file is gone once read
        assert not (shared / "work" / "tasks" / "j2.0.0" / ENV_NAME).exists()


def test_an_image_tarball_its_user_may_not_read_is_refused(shared: Path, tmp_path: Path) -> None:
    if shutil.which("bwrap") is None:
        pytest.skip("bubblewrap is not installed")
    tarball = tmp_path / "private.tar"  # pytest's folders are root's alone (0700)
    with tarfile.open(tarball, "w") as tar:
        tar.add(shared, arcname=".", recursive=False)
    rt = ProcessRuntime(
        shared / "work", ImageCache(shared / "images"), identities=lambda _user: WHO
    )
    try:
        report, _ = run_one(rt, launch("j3.0.0", "true", image=str(tarball)))
    finally:
        rt.shutdown(grace_s=0.2)
    assert report.state is TaskState.FAILED_TO_START
    assert "may not read" in (report.reason or "")
    assert not any((shared / "images").rglob("rootfs"))  # nothing was unpacked


def test_a_link_put_in_place_of_the_log_is_not_read(shared: Path, tmp_path: Path) -> None:
    secret = tmp_path / "secret"  # pytest's folders are root's alone (0700)
    secret.write_text("TOP SECRET\n")
    rt = ProcessRuntime(shared / "work", identities=lambda _user: WHO)
    script = f"echo before; rm -f output.log; ln -s {secret} output.log; echo after"
    try:
        report, text = run_one(rt, launch("j4.0.0", "sh", "-c", script))
    finally:
        rt.shutdown(grace_s=0.2)
    assert report.exit_code == 0
    assert (shared / "work" / "tasks" / "j4.0.0" / "output.log").is_symlink()
    assert "TOP SECRET" not in text


def test_a_pid_file_the_tasks_user_forged_kills_nothing(shared: Path) -> None:
    victim = subprocess.Popen(["sleep", "30"], start_new_session=True)  # someone else's
    rt = ProcessRuntime(shared / "work", identities=lambda _user: WHO)
    try:
        with open(f"/proc/{victim.pid}/stat") as handle:
            start = handle.read().rsplit(")", 1)[1].split()[19]
        script = f'rm -f pid; echo "{victim.pid} {start}" > pid; sleep 30'
        rt.start(launch("j5.0.0", "sh", "-c", script))
        pid_file = shared / "work" / "tasks" / "j5.0.0" / "pid"
        deadline = time.monotonic() + 10
        while time.monotonic() < deadline:  # the task replaced the agent's pid file
            if pid_file.exists() and pid_file.stat().st_uid == WHO.uid:
                break
            time.sleep(0.05)
        assert pid_file.stat().st_uid == WHO.uid
        fresh = ProcessRuntime(shared / "work", identities=lambda _user: WHO)  # agent restart
        assert "j5.0.0" not in fresh.orphans_killed
        assert victim.poll() is None  # still alive
    finally:
        rt.shutdown(grace_s=0.2)
        victim.kill()
        victim.wait()
