"""Container tasks under bubblewrap and the image cache."""

from __future__ import annotations

import io
import tarfile
import threading
import time
from pathlib import Path

import pytest

from fusesched.agent.containers import TASK_DIR_IN_CONTAINER, Bind, bwrap_argv
from fusesched.agent.images import ImageCache, ImageError, file_sha256
from fusesched.agent.runtime import ProcessRuntime
from fusesched.api.wire import TaskState

from .conftest import make_rootfs
from .helpers import launch, read_all, run_one, wait_end


def _tarball(rootfs: Path, target: Path) -> Path:
    with tarfile.open(target, "w:gz") as archive:
        archive.add(rootfs, arcname=".")
    return target


def test_argv_shares_the_network_and_isolates_pids_and_mounts(tmp_path: Path) -> None:
    argv = bwrap_argv(
        tmp_path,
        ["python", "train.py"],
        task_dir=tmp_path / "task",
        binds=[Bind(Path("/data"), "/data", read_only=False)],
        unshare_user=False,
    )
    assert argv[0] == "bwrap"
    assert "--unshare-pid" in argv
    assert not any(a.startswith("--unshare-net") or a == "--unshare-all" for a in argv)
    assert "--unshare-user" not in argv
    assert argv[argv.index("--ro-bind") : argv.index("--ro-bind") + 3] == [
        "--ro-bind",
        str(tmp_path),
        "/",
    ]
    assert argv[argv.index("/data") - 1 : argv.index("/data") + 2] == ["--bind", "/data", "/data"]
    assert argv[-3:] == ["--", "python", "train.py"]
    assert argv[argv.index("--chdir") + 1] == TASK_DIR_IN_CONTAINER
    assert "--unshare-user" in bwrap_argv(tmp_path, ["x"], task_dir=tmp_path, unshare_user=True)


def test_task_sees_only_its_image_and_its_own_pids(
    container_runtime: ProcessRuntime, tmp_path: Path
) -> None:
    image = make_rootfs(tmp_path / "image")
    host_marker = Path("/tmp") / f"fusesched-host-marker-{time.time_ns()}"
    host_marker.write_text("host\n")
    try:
        probe = (
            f"cat /etc/image-marker; test -e {host_marker} && echo HOST-VISIBLE; "
            "echo pid=$$; ls /proc | grep -c '^[0-9]'; echo cwd=$PWD; "
            "echo $FUSESCHED_TASK_DIR $CUDA_VISIBLE_DEVICES; echo out > result.txt"
        )
        spec = launch("c1.0.0", "/bin/sh", "-c", probe, image=str(image), gpu_indices=[1])
        report, text = run_one(container_runtime, spec)
    finally:
        host_marker.unlink()
    assert report.exit_code == 0, text
    lines = text.splitlines()
    assert lines[0] == "from the image"
    assert "HOST-VISIBLE" not in text
    assert lines[1] == "pid=2"  # bwrap's reaper is PID 1 of the task's own PID namespace
    assert int(lines[2]) <= 4  # reaper, shell, ls, grep: no host process is visible
    assert lines[3] == f"cwd={TASK_DIR_IN_CONTAINER}"
    assert lines[4] == f"{TASK_DIR_IN_CONTAINER} 1"
    # the task folder is shared with the host: outputs survive the container
    assert (tmp_path / "work" / "tasks" / "c1.0.0" / "result.txt").read_text() == "out\n"


def test_script_in_a_container_and_read_only_root(
    container_runtime: ProcessRuntime, tmp_path: Path
) -> None:
    image = make_rootfs(tmp_path / "image")
    script = "touch /etc/x 2>/dev/null && echo WROTE-IMAGE; touch /tmp/ok && echo tmp-ok; exit 6"
    report, text = run_one(container_runtime, launch("c2.0.0", script=script, image=str(image)))
    assert report.exit_code == 6
    assert text == "tmp-ok\n"


def test_missing_command_in_the_image_fails_to_start(
    container_runtime: ProcessRuntime, tmp_path: Path
) -> None:
    image = make_rootfs(tmp_path / "image")
    report, _ = run_one(container_runtime, launch("c3.0.0", "/opt/nothing", image=str(image)))
    assert report.state is TaskState.FAILED_TO_START
    assert report.reason.startswith("container: execvp /opt/nothing")


def test_graceful_kill_inside_a_container(
    container_runtime: ProcessRuntime, tmp_path: Path
) -> None:
    image = make_rootfs(tmp_path / "image")
    trap = "trap 'echo stopping; exit 5' TERM; echo ready; while true; do sleep 0.02; done"
    container_runtime.start(launch("c4.0.0", "/bin/bash", "-c", trap, image=str(image)))
    deadline = time.monotonic() + 5
    while "ready" not in read_all(container_runtime, "c4.0.0"):
        assert time.monotonic() < deadline
        time.sleep(0.01)
    container_runtime.kill("c4.0.0", grace_s=5.0, reason="cancelled")
    report = wait_end(container_runtime, "c4.0.0", timeout=3.0)["c4.0.0"]
    assert (report.exit_code, report.reason) == (5, "cancelled")
    assert read_all(container_runtime, "c4.0.0").splitlines()[-1] == "stopping"

    container_runtime.start(
        launch("c4.0.1", "/bin/sh", "-c", "trap '' TERM; sleep 30", image=str(image))
    )
    time.sleep(0.1)
    container_runtime.kill("c4.0.1", grace_s=0.2, reason="cancelled")
    assert wait_end(container_runtime, "c4.0.1")["c4.0.1"].exit_code == -9


def test_a_tarball_is_unpacked_once_for_concurrent_starts(
    container_runtime: ProcessRuntime, tmp_path: Path
) -> None:
    tarball = _tarball(make_rootfs(tmp_path / "src"), tmp_path / "image.tar.gz")
    cache = container_runtime.image_cache
    assert cache is not None
    results: list[Path] = []
    threads = [
        threading.Thread(target=lambda: results.append(cache.resolve(str(tarball))))
        for _ in range(4)
    ]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert cache.unpacked == 1
    assert len(set(results)) == 1
    rootfs = results[0]
    assert rootfs.parent.name == file_sha256(tarball)
    # a second agent on the same node (another ImageCache instance) reuses it too
    other = ImageCache(cache.cache_dir)
    assert other.resolve(str(tarball)) == rootfs and other.unpacked == 0
    # and two tasks of one gang run from it
    for index in range(2):
        container_runtime.start(
            launch(f"c5.0.{index}", "/bin/cat", "/etc/image-marker", image=str(tarball))
        )
    ends = wait_end(container_runtime, "c5.0.0", "c5.0.1")
    assert {r.exit_code for r in ends.values()} == {0}
    assert read_all(container_runtime, "c5.0.1") == "from the image\n"
    assert cache.unpacked == 1


def _evil_tar(path: Path, members: list[tuple[str, str, str]]) -> Path:
    """members: (name, kind, payload) with kind file | symlink | hardlink."""
    with tarfile.open(path, "w") as archive:
        for name, kind, payload in members:
            info = tarfile.TarInfo(name)
            if kind == "file":
                info.size = len(payload)
                archive.addfile(info, io.BytesIO(payload.encode()))
            else:
                info.type = tarfile.SYMTYPE if kind == "symlink" else tarfile.LNKTYPE
                info.linkname = payload
                archive.addfile(info)
    return path


@pytest.mark.parametrize(
    "members",
    [
        [("../escaped.txt", "file", "x")],
        [("/abs/../../escaped.txt", "file", "x")],
        [("etc", "symlink", "/"), ("etc/escaped.txt", "file", "x")],
        [("passwd", "hardlink", "/etc/passwd")],
        [("up", "hardlink", "../outside")],
    ],
)
def test_unsafe_tarballs_are_refused(tmp_path: Path, members: list[tuple[str, str, str]]) -> None:
    (tmp_path / "outside").write_text("outside")
    cache = ImageCache(tmp_path / "cache")
    tarball = _evil_tar(tmp_path / "evil.tar", members)
    with pytest.raises(ImageError, match="bad image"):
        cache.resolve(str(tarball))
    assert not (tmp_path / "escaped.txt").exists()
    assert not Path("/escaped.txt").exists()
    assert not list((tmp_path / "cache").glob("*/rootfs"))


def test_absolute_symlinks_are_kept_for_the_container(tmp_path: Path) -> None:
    tarball = _evil_tar(
        tmp_path / "ok.tar",
        [("usr/bin/tool", "file", "#!/bin/sh\n"), ("bin", "symlink", "/usr/bin")],
    )
    rootfs = ImageCache(tmp_path / "cache").resolve(str(tarball))
    assert (rootfs / "bin").readlink() == Path("/usr/bin")
    for mount_point in ("proc", "dev", "tmp"):
        assert (rootfs / mount_point).is_dir()


def test_image_errors(tmp_path: Path) -> None:
    cache = ImageCache(tmp_path / "cache")
    with pytest.raises(ImageError, match="image not found"):
        cache.resolve(str(tmp_path / "none.tar"))
    truncated = tmp_path / "cut.tar.gz"
    data = _tarball(make_rootfs(tmp_path / "src"), tmp_path / "whole.tar.gz").read_bytes()
    truncated.write_bytes(data[: len(data) // 2])
    with pytest.raises(ImageError):
        cache.resolve(str(truncated))
    assert cache.resolve(str(tmp_path / "src")) == (tmp_path / "src").resolve()  # in place


def test_walltime_in_a_container_reports_the_signal(
    container_runtime: ProcessRuntime, tmp_path: Path
) -> None:
    image = make_rootfs(tmp_path / "image")
    spec = launch("c6.0.0", "/bin/sleep", "30", image=str(image), walltime_s=0.2, grace_s=1.0)
    report, _ = run_one(container_runtime, spec)
    # bwrap exits 128+15 when its command dies of SIGTERM; the runtime reports -15 as for bare
    assert (report.exit_code, report.reason) == (-15, "walltime exceeded")
