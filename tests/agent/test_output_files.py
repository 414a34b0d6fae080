"""A batch task's output files (``TaskLaunch.output_file``, agent/output_files.py) with real
processes: a task writing far faster than its file takes it loses nothing, in the file or in
its log (it waits on the pipe); a link the job put in place of its file, pointing at a file
of root's, is opened with the task's user's rights (the kernel refuses), never root's."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from fusesched.agent.output_files import unwritable
from fusesched.agent.runtime import ProcessRuntime
from fusesched.agent.users import Identity
from fusesched.api.wire import TaskLaunch

from .helpers import run_one

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
