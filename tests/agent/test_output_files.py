"""A batch task's output files (``TaskLaunch.output_file``, agent/output_files.py) with real
processes: a task writing far faster than its file takes it loses nothing, in the file or in
its log (it waits on the pipe); a link the job put in place of its file, pointing at a file
of root's, is opened with the task's user's rights (the kernel refuses), never root's."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

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
