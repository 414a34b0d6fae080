"""What the agent (root) does to paths a task's user can influence: never a way for that user
to make root chown, chmod, read, copy or unpack something the user could not reach itself.

Every test runs real processes under a real unprivileged uid; the attacks are done by that uid
(``users.run_as``), as a second task of the same user would. docs/AGENT.md ("What root does
to the user's paths") lists each operation with its test here.
"""

from __future__ import annotations

import fcntl
import io
import os
import shutil
import stat
import subprocess
import tarfile
import time
from pathlib import Path

import pytest

from fusesched.agent import joining
from fusesched.agent.config import AgentConfig, DataCacheConfig, PowerHookConfig
from fusesched.agent.images import ImageCache, ImageError, file_sha256
from fusesched.agent.power_caps import PowerCaps
from fusesched.agent.runtime import ProcessRuntime
from fusesched.agent.sensors import PsutilTaskSensor
from fusesched.agent.users import READER_UID, Identity, IdentityError, resolve, run_as
from fusesched.api.wire import DatasetWire, TaskState

from .helpers import launch, run_one

pytestmark = pytest.mark.skipif(os.geteuid() != 0, reason="only root switches users")

WHO = Identity("someone", 234567, 234568)


def as_user(script: str, *args: str) -> subprocess.CompletedProcess[str]:
    return run_as(WHO, ["/bin/sh", "-c", script, "sh", *args], timeout=10)


def test_the_task_folder_is_handed_over_last(
    shared: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """While root hands the folder over, the user swaps a folder the walk is about to enter
    for a link to a folder of root's: root must not chown what the link points into."""
    victim = tmp_path / "victim"
    (victim / "b").mkdir(parents=True)
    (victim / "b" / "secret").write_text("root's")
    task_dir = shared / "work" / "tasks" / "j1.0.0"
    attacks: list[subprocess.CompletedProcess[str]] = []
    real_chown = os.chown

    def chown(path: str | Path, uid: int, gid: int, *, follow_symlinks: bool = True) -> None:
        real_chown(path, uid, gid, follow_symlinks=follow_symlinks)
        if str(path).endswith("/a/b") and not attacks:  # as another task of the user would
            swap = 'cd "$1" && mv a a.moved && ln -s "$2" a'
            attacks.append(as_user(swap, str(task_dir), str(victim)))

    monkeypatch.setattr(os, "chown", chown)
    rt = ProcessRuntime(shared / "work", identities=lambda _user: WHO)
    try:
        run_one(rt, launch("j1.0.0", "true", checkpoint_dir="a/b/c"))
    finally:
        rt.shutdown(grace_s=0.2)
    assert attacks, "the hand-over never reached a/b"
    assert (victim / "b").stat().st_uid == 0
    assert (victim / "b" / "secret").stat().st_uid == 0
    assert attacks[0].returncode != 0, "the user got into its folder before it was handed over"


def test_a_working_directory_its_user_cannot_reach_is_refused(shared: Path, tmp_path: Path) -> None:
    """subprocess's ``cwd`` is entered by root before the uid switch: a task must not start
    inside a folder below one its user may not search (``/home/alice/public`` under a 0700
    ``/home/alice``), where relative paths would read what the user could not."""
    public = tmp_path / "public"  # tmp_path: root's alone (0700)
    public.mkdir()
    public.chmod(0o755)
    (public / "file").write_text("behind a folder the user may not search\n")
    (public / "file").chmod(0o644)
    rt = ProcessRuntime(shared / "work", identities=lambda _user: WHO)
    try:
        report, text = run_one(rt, launch("j2.0.0", "cat", "file", workdir=str(public)))
    finally:
        rt.shutdown(grace_s=0.2)
    assert "behind a folder" not in text
    assert report.state is TaskState.FAILED_TO_START
    assert "not reachable" in report.reason


def test_a_reachable_working_directory_is_entered_as_the_user(shared: Path) -> None:
    work = shared / "elsewhere"
    work.mkdir()
    work.chmod(0o755)
    rt = ProcessRuntime(shared / "work", identities=lambda _user: WHO)
    try:
        report, text = run_one(rt, launch("j3.0.0", "sh", "-c", "pwd; id -u", workdir=str(work)))
        relative, rtext = run_one(rt, launch("j4.0.0", "pwd", workdir="sub", files={}))
    finally:
        rt.shutdown(grace_s=0.2)
    assert report.exit_code == 0, text
    assert text.split() == [str(work), str(WHO.uid)]
    assert relative.state is TaskState.FAILED_TO_START  # no such folder in the task's folder
    assert "does not exist" in relative.reason, rtext


def _tar(path: Path, files: dict[str, str], *, uid: int = 0, uname: str = "") -> Path:
    with tarfile.open(path, "w") as archive:
        for name, text in files.items():
            info = tarfile.TarInfo(name)
            data = text.encode()
            info.size, info.mode, info.uid, info.gid, info.uname = len(data), 0o755, uid, uid, uname
            archive.addfile(info, io.BytesIO(data))
    return path


def test_an_images_files_are_roots_not_the_uids_its_tarball_names(tmp_path: Path) -> None:
    """Unpacked as root, a tarball's recorded owners would own the shared, cached image: the
    user with that uid on this node could change what other users' containers run."""
    tarball = _tar(tmp_path / "image.tar", {"bin/tool": "#!/bin/sh\n"}, uid=WHO.uid)
    rootfs = ImageCache(tmp_path / "cache").resolve(str(tarball))
    assert (rootfs / "bin" / "tool").stat().st_uid == 0
    assert (rootfs / "bin").stat().st_uid == 0


def test_a_tarball_rewritten_after_it_was_hashed_is_not_cached_under_that_hash(
    shared: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The tarball's owner rewrites it between the hash and the unpack: what is unpacked
    must never land under the first contents' hash, where other users' tasks would run it."""
    good = _tar(shared / "good.tar", {"marker": "good\n"})
    mine = shared / "mine.tar"
    shutil.copyfile(good, mine)
    evil = _tar(shared / "evil.tar", {"marker": "EVIL\n", "pad": "x" * 4096})
    for item in (mine, evil):
        os.chown(item, WHO.uid, WHO.gid)
    real_flock = fcntl.flock
    rewritten: list[int] = []

    def flock(fd: int, operation: int) -> None:
        real_flock(fd, operation)
        if not rewritten:  # hashed, not yet unpacked: the owner writes to its own file
            done = as_user('cat "$1" > "$2"', str(evil), str(mine))
            rewritten.append(done.returncode)

    monkeypatch.setattr(fcntl, "flock", flock)
    cache = ImageCache(shared / "images")
    try:
        cache.resolve(str(mine), WHO)
    except ImageError as exc:
        assert "changed" in str(exc)
    assert rewritten == [0]
    good_root = shared / "images" / file_sha256(good) / "rootfs"
    assert not good_root.exists() or (good_root / "marker").read_text() == "good\n"


def test_an_image_link_swapped_after_the_readability_check_is_not_followed(
    shared: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The user's link names a tarball it may read while that is checked, then another
    user's (root's) private tarball: root must unpack the file that was checked."""
    if shutil.which("bwrap") is None:
        pytest.skip("bubblewrap is not installed")
    public = _tar(shared / "public.tar", {"marker": "public\n"})
    public.chmod(0o644)
    private = _tar(tmp_path / "private.tar", {"marker": "SECRET\n"})  # tmp_path: root's (0700)
    link = shared / "image.tar"
    link.symlink_to(public)
    real_run = subprocess.run
    swapped: list[bool] = []

    def run(argv: list[str], *args: object, **kwargs: object) -> object:
        done = real_run(argv, *args, **kwargs)  # type: ignore[call-overload]
        if argv[0] in ("/usr/bin/find", "/bin/sh") and not swapped:  # the user's check
            link.unlink()
            link.symlink_to(private)
            swapped.append(True)
        return done

    monkeypatch.setattr(subprocess, "run", run)
    rt = ProcessRuntime(shared / "work", ImageCache(shared / "images"), identities=lambda _: WHO)
    try:
        run_one(rt, launch("j5.0.0", "true", image=str(link)))
    finally:
        rt.shutdown(grace_s=0.2)
    assert swapped
    markers = [p.read_text() for p in (shared / "images").rglob("marker")]
    assert markers == ["public\n"]  # the file that was checked, and no other


def test_an_image_that_is_a_fifo_is_refused_without_opening_it(shared: Path) -> None:
    fifo = shared / "image.tar"
    os.mkfifo(fifo)
    with pytest.raises(ImageError, match="neither a directory nor a file"):
        ImageCache(shared / "images").resolve(str(fifo), WHO)


def _cached_runtime(shared: Path) -> ProcessRuntime:
    config = AgentConfig(
        work_dir=shared / "work",
        image_cache_dir=shared / "images",
        memory_cgroup=False,
        uid_map={WHO.name: WHO.uid},
        data_cache=DataCacheConfig(dir=shared / "cache", capacity=1 << 20),
    )
    return ProcessRuntime.from_config(config)


def _cached_texts(shared: Path) -> list[str]:
    return [p.read_text(errors="replace") for p in (shared / "cache").rglob("*") if p.is_file()]


def test_staging_ahead_never_copies_what_not_everyone_may_read(
    shared: Path, tmp_path: Path
) -> None:
    """A stage-ahead item names no user: root must not copy a private file into the cache,
    whose copies every user may read."""
    secret = tmp_path / "secret.txt"  # tmp_path: root's alone (0700)
    secret.write_text("TOP SECRET\n")
    rt = _cached_runtime(shared)
    cache = rt.data_cache
    assert cache is not None
    try:
        cache.stage_ahead(DatasetWire(name="loot", source=str(secret)))
        deadline = time.monotonic() + 10
        while not cache.idle() and time.monotonic() < deadline:
            time.sleep(0.02)
    finally:
        rt.shutdown(grace_s=0.2)
    assert all("TOP SECRET" not in text for text in _cached_texts(shared))


def test_a_dataset_link_swapped_after_the_check_is_not_copied_by_root(
    shared: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The user's source holds a link to a file it may read while that is checked, then to
    a file it may not: root must never copy the second (the kernel checks each read)."""
    secret = tmp_path / "secret.txt"  # tmp_path: root's alone (0700)
    secret.write_text("TOP SECRET\n")
    public = shared / "public.txt"
    public.write_text("public\n")
    public.chmod(0o644)
    source = shared / "mydata"
    source.mkdir()
    source.chmod(0o755)
    (source / "file").symlink_to(public)
    real_run = subprocess.run
    swapped: list[bool] = []

    def run(argv: list[str], *args: object, **kwargs: object) -> object:
        done = real_run(argv, *args, **kwargs)  # type: ignore[call-overload]
        if argv[0] == "/usr/bin/find" and not swapped:  # the user's check passed
            (source / "file").unlink()
            (source / "file").symlink_to(secret)
            swapped.append(True)
        return done

    monkeypatch.setattr(subprocess, "run", run)
    rt = _cached_runtime(shared)
    spec = launch("j6.0.0", "true", user=WHO.name, datasets=[{"name": "d", "source": str(source)}])
    try:
        run_one(rt, spec)
    finally:
        rt.shutdown(grace_s=0.2)
    assert swapped
    assert all("TOP SECRET" not in text for text in _cached_texts(shared))


def test_devices_and_fifos_in_a_dataset_are_never_read(shared: Path) -> None:
    """A source holding a FIFO (root would wait on it forever) or a link to ``/dev/zero``
    (root would copy until the disk is full): the copy skips both."""
    source = shared / "mydata"
    source.mkdir()
    (source / "real").write_text("data\n")
    os.mkfifo(source / "pipe")
    (source / "zero").symlink_to("/dev/zero")
    for item in (source, source / "real", source / "pipe"):
        item.chmod(0o755 if item.is_dir() else 0o644)
    rt = _cached_runtime(shared)
    data = [{"name": "d", "source": str(source)}]
    spec = launch(
        "j7.0.0", "sh", "-c", 'cat "$FUSESCHED_DATA_D/real"', user=WHO.name, datasets=data
    )
    try:
        report, text = run_one(rt, spec, timeout=30)
    finally:
        rt.shutdown(grace_s=0.2)
    copy = shared / "cache" / "d" / "mydata"
    assert (copy / "real").read_text() == "data\n"
    assert not (copy / "pipe").exists() and not (copy / "zero").exists()
    assert (report.exit_code, text) == (0, "data\n"), report.reason


def test_the_agents_own_folders_may_not_be_another_users(shared: Path) -> None:
    """A work dir below a folder a user made first (the default ``$TMPDIR/fusesched`` on a
    shared node): that user could swap the agent's task folders and pid files for links."""
    squatted = shared / "fusesched"
    squatted.mkdir()
    os.chown(squatted, WHO.uid, WHO.gid)
    with pytest.raises(IdentityError, match="belongs to uid"):
        ProcessRuntime(squatted / "work", identities=lambda _user: WHO)
    open_dir = shared / "open"
    open_dir.mkdir()
    open_dir.chmod(0o777)
    with pytest.raises(IdentityError, match="writable by others"):
        ProcessRuntime(shared / "work", ImageCache(open_dir / "images"), identities=lambda _: WHO)
    sticky = shared / "sticky"  # as /tmp: others cannot replace root's folders there
    sticky.mkdir()
    sticky.chmod(0o1777)
    ProcessRuntime(sticky / "work", identities=lambda _user: WHO).shutdown(grace_s=0.1)


def test_a_malformed_task_id_never_reaches_a_power_hook(shared: Path) -> None:
    record = shared / "hook-argv"
    hook = shared / "hook"
    hook.write_text(f'#!/bin/sh\nprintf "%s\\n" "$@" >> {record}\n')
    hook.chmod(0o755)
    power = PowerCaps({"gpu_watts": PowerHookConfig(apply=[str(hook), "{task}"])})
    rt = ProcessRuntime(shared / "work", identities=lambda _user: WHO, power=power)
    try:
        report, _ = run_one(rt, launch("--help", "true", power_cap={"gpu_watts": 100}))
    finally:
        rt.shutdown(grace_s=0.2)
    assert report.state is TaskState.FAILED_TO_START
    assert "invalid task id" in report.reason
    assert not record.exists()


def test_sensors_never_stat_through_links_the_task_put_in_place(
    shared: Path, tmp_path: Path
) -> None:
    """Log size and newest checkpoint are read as root: a link in their place must not
    report the size or age of files the user cannot reach."""
    secret_dir = tmp_path / "private"  # tmp_path: root's alone (0700)
    secret_dir.mkdir()
    (secret_dir / "big").write_bytes(b"x" * 12345)
    rt = ProcessRuntime(shared / "work", identities=lambda _user: WHO)
    script = (
        f"rm -f output.log; ln -s {secret_dir}/big output.log; rmdir checkpoints; "
        f"ln -s {secret_dir} checkpoints; touch ready; sleep 30"
    )
    task_dir = shared / "work" / "tasks" / "j8.0.0"
    try:
        rt.start(launch("j8.0.0", "sh", "-c", script))
        deadline = time.monotonic() + 10
        while not (task_dir / "ready").exists() and time.monotonic() < deadline:
            rt.poll()
            time.sleep(0.02)
        [sample] = PsutilTaskSensor().sample_tasks(rt.watches(), time.time())
    finally:
        rt.shutdown(grace_s=0.2)
    assert (task_dir / "checkpoints").is_symlink()
    assert sample.log_bytes == 0
    assert (sample.checkpoint_mtime, sample.checkpoint_bytes) == (None, 0)


def test_a_checkpoint_folder_of_someone_else_is_not_watched(shared: Path) -> None:
    """A job naming a folder it may reach but not list (another task's folder, a 0711 home)
    as its checkpoint folder: root's sensors must not report what is in it."""
    other = shared / "other"  # root's; reachable, not listable
    other.mkdir()
    other.chmod(0o711)
    (other / "private-checkpoint").write_bytes(b"y" * 777)
    rt = ProcessRuntime(shared / "work", identities=lambda _user: WHO)
    try:
        rt.start(launch("j9.0.0", "sleep", "30", checkpoint_dir=str(other)))
        rt.poll()
        [sample] = PsutilTaskSensor().sample_tasks(rt.watches(), time.time())
    finally:
        rt.shutdown(grace_s=0.2)
    assert (sample.checkpoint_mtime, sample.checkpoint_bytes) == (None, 0)


def test_the_stored_credential_is_read_only_from_the_agents_own_file(
    shared: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The node's credential lies in the work dir: a link or a file someone else put there
    must neither be read (sent to the controller as the token) nor written through."""
    monkeypatch.setattr(joining, "join", lambda *_args: "node-token")
    work = shared / "work"
    work.mkdir()
    stolen = shared / "readable-by-the-user"
    stolen.write_text("not the agent's\n")
    (work / joining.CREDENTIAL_FILE).symlink_to(stolen)
    with pytest.raises(OSError):
        joining.credential("http://controller", "n1", work, "join-token")
    (work / joining.CREDENTIAL_FILE).unlink()
    planted = work / joining.CREDENTIAL_FILE
    planted.write_text("planted\n")
    os.chown(planted, WHO.uid, WHO.gid)
    with pytest.raises(OSError):
        joining.credential("http://controller", "n1", work, "join-token")
    planted.unlink()
    assert joining.credential("http://controller", "n1", work, "join-token") == "node-token"
    assert joining.credential("http://controller", "n1", work, None) == "node-token"  # stored
    assert stat.S_IMODE(planted.stat().st_mode) == 0o600


def test_no_task_runs_as_the_dataset_reader() -> None:
    """``nobody`` reads sources for the cache: a task under its uid could tamper with a copy
    being made (another user's dataset)."""
    with pytest.raises(IdentityError, match="reads datasets"):
        resolve("x", uid_map={"x": READER_UID})
    assert resolve("nobody").uid != READER_UID


def test_a_world_readable_file_is_copied_by_the_reader(shared: Path) -> None:
    source = shared / "words.txt"
    source.write_text("hello\n")
    source.chmod(0o644)
    rt = _cached_runtime(shared)
    data = [{"name": "words", "source": f"file://{source}"}]
    spec = launch(
        "j10.0.0", "sh", "-c", 'cat "$FUSESCHED_DATA_WORDS"', user=WHO.name, datasets=data
    )
    try:
        report, text = run_one(rt, spec, timeout=30)
    finally:
        rt.shutdown(grace_s=0.2)
    copy = shared / "cache" / "words" / "words.txt"
    assert (report.exit_code, text) == (0, "hello\n"), report.reason
    assert copy.read_text() == "hello\n"
    assert (copy.stat().st_uid, stat.S_IMODE(copy.stat().st_mode)) == (0, 0o644)
