"""The node-local dataset cache, and tasks reading their datasets through the runtime."""

from __future__ import annotations

import os
import shutil
import stat
import tempfile
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from fusesched.agent.config import ConfigError, parse_config
from fusesched.agent.dataset_staging import CopyStager, DatasetError, RsyncStager, make_stager
from fusesched.agent.datasets import META_NAME, DatasetCache
from fusesched.agent.images import ImageCache
from fusesched.agent.runtime import ProcessRuntime
from fusesched.agent.task_data import DATA_IN_CONTAINER, TaskData
from fusesched.agent.users import Identity
from fusesched.api.wire import DatasetWire, TaskState

from .conftest import make_rootfs
from .helpers import launch, run_one, wait_end


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        self.now += 1.0
        return self.now


class CountingStager(CopyStager):
    """Copies as ``copy`` does; counts, and can be held mid-copy."""

    def __init__(self) -> None:
        self.calls: list[str] = []
        self.hold = threading.Event()
        self.hold.set()
        self.inside = threading.Event()

    def stage(self, source: Path, dest: Path) -> None:
        self.calls.append(source.name)
        super().stage(source, dest)
        self.inside.set()
        assert self.hold.wait(10)


def wait_for(condition: Callable[[], bool], timeout: float = 5.0) -> None:
    deadline = time.monotonic() + timeout
    while not condition():
        assert time.monotonic() < deadline, "timed out"
        time.sleep(0.01)


def make_source(root: Path, name: str, size: int) -> DatasetWire:
    """A folder dataset of ``size`` bytes (two files) under ``root``."""
    folder = root / name
    folder.mkdir(parents=True)
    (folder / "part-0").write_bytes(b"x" * (size // 2))
    (folder / "sub").mkdir()
    (folder / "sub" / "part-1").write_bytes(b"y" * (size - size // 2))
    return DatasetWire(name=name, source=str(folder), size_bytes=size)


@pytest.fixture
def shared(tmp_path: Path) -> Path:
    return tmp_path / "shared"


def new_cache(tmp_path: Path, capacity: int, **kw: object) -> DatasetCache:
    return DatasetCache(tmp_path / "cache", capacity, clock=Clock(), **kw)  # type: ignore[arg-type]


def test_a_folder_is_staged_atomically_and_readable_by_all(tmp_path: Path, shared: Path) -> None:
    stager = CountingStager()
    cache = new_cache(tmp_path, 10_000, stager=stager)
    data = make_source(shared, "imagenet", 300)
    (shared / "imagenet" / "part-0").chmod(0o600)
    stager.hold.clear()
    got = {}
    thread = threading.Thread(target=lambda: got.update(grant=cache.acquire(data)))
    thread.start()
    assert stager.inside.wait(5)
    # mid-copy: only a hidden staging folder; nothing is offered as cached
    assert cache.cached() == []
    assert not (cache.root / "imagenet").exists()
    assert [p.name.startswith(".staging-imagenet-") for p in cache.root.iterdir()] == [True]
    stager.hold.set()
    thread.join(5)
    grant = got["grant"]
    assert grant.cached and grant.path == cache.root / "imagenet" / "imagenet"
    assert (grant.path / "sub" / "part-1").read_bytes() == b"y" * 150
    assert cache.cached() == ["imagenet"] and cache.used_bytes() == 300
    assert (cache.root / "imagenet" / META_NAME).is_file()
    assert stat.S_IMODE((grant.path / "part-0").stat().st_mode) == 0o644
    assert stat.S_IMODE((grant.path / "sub").stat().st_mode) == 0o755
    # a second use is a hit: no copy
    again = cache.acquire(data)
    assert again.path == grant.path and stager.calls == ["imagenet"]


def test_tasks_asking_at_once_share_one_copy(tmp_path: Path, shared: Path) -> None:
    stager = CountingStager()
    cache = new_cache(tmp_path, 1000, stager=stager)
    data = make_source(shared, "popular", 100)
    stager.hold.clear()
    grants = []
    threads = [threading.Thread(target=lambda: grants.append(cache.acquire(data))) for _ in "ab"]
    for thread in threads:
        thread.start()
    assert stager.inside.wait(5)
    time.sleep(0.05)  # the second asker waits for the first one's copy
    assert grants == []
    stager.hold.set()
    for thread in threads:
        thread.join(5)
    assert len(grants) == 2 and grants[0] == grants[1] and grants[0].cached
    assert stager.calls == ["popular"] and cache.used_bytes() == 100


def test_a_file_source_and_a_file_uri(tmp_path: Path, shared: Path) -> None:
    shared.mkdir()
    (shared / "words.txt").write_text("hello\n")
    cache = new_cache(tmp_path, 1000)
    grant = cache.acquire(DatasetWire(name="words", source=f"file://{shared}/words.txt"))
    assert grant.cached and grant.path.read_text() == "hello\n"
    assert grant.path.name == "words.txt"


def test_lru_eviction_keeps_the_cache_within_capacity(tmp_path: Path, shared: Path) -> None:
    cache = new_cache(tmp_path, 250)
    a, b, c = (make_source(shared, n, 100) for n in ("a", "b", "c"))
    for dataset in (a, b):
        cache.release(cache.acquire(dataset))
    cache.release(cache.acquire(a))  # a used more recently than b
    cache.release(cache.acquire(c))
    assert cache.cached() == ["a", "c"]  # b, least recently used, made room
    assert cache.used_bytes() <= 250
    # evicted folders are removed in the background
    wait_for(lambda: sorted(p.name for p in cache.root.iterdir()) == ["a", "c"])


def test_pinned_datasets_are_never_evicted(tmp_path: Path, shared: Path) -> None:
    cache = new_cache(tmp_path, 250)
    a, b, c, d = (make_source(shared, n, 100) for n in ("a", "b", "c", "d"))
    pinned = cache.acquire(a)  # a task still reads it (oldest, yet kept)
    cache.release(cache.acquire(b))
    cache.release(cache.acquire(c))
    assert cache.cached() == ["a", "c"]
    held_c = cache.acquire(c)
    # a and c pinned: d cannot fit, so its task reads the shared source; nothing is evicted
    fallback = cache.acquire(d)
    assert not fallback.cached and fallback.path == shared / "d"
    assert cache.cached() == ["a", "c"]
    cache.release(pinned)
    cache.release(held_c)
    cache.release(fallback)  # harmless: it was never pinned
    assert cache.acquire(d).cached
    assert cache.cached() == ["c", "d"]


def test_too_big_a_dataset_is_read_at_its_shared_path(tmp_path: Path, shared: Path) -> None:
    cache = new_cache(tmp_path, 150)
    small = make_source(shared, "small", 100)
    cache.release(cache.acquire(small))
    grant = cache.acquire(make_source(shared, "huge", 200))
    assert not grant.cached and grant.path == shared / "huge"
    assert cache.cached() == ["small"]  # nothing evicted in vain


def test_the_index_is_rebuilt_after_a_restart(tmp_path: Path, shared: Path) -> None:
    clock = Clock()
    cache = DatasetCache(tmp_path / "cache", 300, clock=clock)
    a, b, c = (make_source(shared, n, 100) for n in ("a", "b", "c"))
    cache.release(cache.acquire(a))
    cache.release(cache.acquire(b))
    cache.release(cache.acquire(a))  # b is now the least recently used
    # a crash mid-copy and mid-eviction leaves hidden folders behind; a stranger's folder too
    (cache.root / ".staging-c-0123abcd" / "c").mkdir(parents=True)
    (cache.root / ".staging-c-0123abcd" / "c" / "half").write_bytes(b"x" * 10)
    (cache.root / ".evicting-z-0123abcd").mkdir()
    (cache.root / "notes").mkdir()

    restarted = DatasetCache(tmp_path / "cache", 150, clock=clock)
    assert restarted.cached() == ["a"]  # the capacity shrank: b (least recently used) went
    assert restarted.used_bytes() == 100
    wait_for(lambda: {p.name for p in restarted.root.iterdir()} == {"a", "notes"})
    grant = restarted.acquire(a)  # leftovers removed; what is not ours is left alone
    assert grant.cached and (grant.path / "part-0").read_bytes() == b"x" * 50
    restarted.release(grant)
    assert restarted.acquire(c).cached and restarted.cached() == ["c"]


def test_a_changed_source_replaces_the_cached_copy(tmp_path: Path, shared: Path) -> None:
    cache = new_cache(tmp_path, 1000)
    first = make_source(shared / "v1", "ds", 100)
    cache.release(cache.acquire(first))
    second = make_source(shared / "v2", "ds", 60)
    grant = cache.acquire(second)
    assert grant.cached and cache.used_bytes() == 60


def test_a_missing_source_is_a_clear_error(tmp_path: Path) -> None:
    cache = new_cache(tmp_path, 1000)
    missing = DatasetWire(name="gone", source="/nonexistent/gone")
    with pytest.raises(DatasetError, match=r"^dataset gone: source /nonexistent/gone not found$"):
        cache.acquire(missing)
    with pytest.raises(DatasetError, match="not an absolute path or file:// URI"):
        cache.acquire(DatasetWire(name="rel", source="s3://bucket/x"))
    assert cache.cached() == [] and list(cache.root.iterdir()) == []


def test_rsync_stager(tmp_path: Path, shared: Path) -> None:
    if shutil.which("rsync") is None:
        pytest.skip("rsync is not installed; scripts/system_deps.sh installs it")
    cache = new_cache(tmp_path, 1000, stager=RsyncStager())
    grant = cache.acquire(make_source(shared, "tree", 100))
    assert (grant.path / "sub" / "part-1").read_bytes() == b"y" * 50
    shared_file = shared / "one.bin"
    shared_file.write_bytes(b"z" * 7)
    assert cache.acquire(DatasetWire(name="one", source=str(shared_file))).path.read_bytes() == (
        b"z" * 7
    )
    with pytest.raises(DatasetError, match="unknown stager"):
        make_stager("scp")


def test_stage_ahead_copies_in_the_background_once(tmp_path: Path, shared: Path) -> None:
    stager = CountingStager()
    cache = new_cache(tmp_path, 1000, stager=stager)
    data = make_source(shared, "ahead", 100)
    stager.hold.clear()
    assert cache.stage_ahead(data)
    assert stager.inside.wait(5)
    assert not cache.stage_ahead(data)  # a duplicate is ignored
    stager.hold.set()
    wait_for(cache.idle)
    assert cache.cached() == ["ahead"] and stager.calls == ["ahead"]
    assert not cache.stage_ahead(data)  # already cached
    assert cache.stage_ahead(DatasetWire(name="nope", source="/nonexistent"))
    wait_for(cache.idle)  # a failure is logged; the worker goes on
    assert cache.cached() == ["ahead"]
    cache.close()


# -- configuration ---------------------------------------------------------------------------


def test_config_accepts_a_data_cache(tmp_path: Path) -> None:
    config = parse_config({"data_cache": {"dir": str(tmp_path), "capacity": "2Gi"}})
    assert config.data_cache is not None
    assert config.data_cache.capacity_bytes() == 2 * 1024**3
    assert config.data_cache.stager == "copy"


@pytest.mark.parametrize(
    ("section", "message"),
    [
        ({"dir": "relative", "capacity": 1}, "data_cache.dir: must be an absolute path"),
        ({"dir": "/x", "capacity": "lots"}, "data_cache.capacity: cannot parse quantity 'lots'"),
        ({"dir": "/x", "capacity": 0}, "data_cache.capacity: must be more than 0 bytes"),
        ({"dir": "/x"}, "data_cache.capacity: Field required"),
        ({"dir": "/x", "capacity": 1, "stager": "scp"}, "data_cache.stager: Input should be"),
        ({"dir": "/x", "capacity": 1, "size": 2}, "data_cache.size: Extra inputs"),
    ],
)
def test_config_errors(section: dict[str, object], message: str) -> None:
    with pytest.raises(ConfigError, match=r"agent\.yaml: invalid agent configuration") as info:
        parse_config({"data_cache": section}, "agent.yaml")
    assert message in str(info.value)


# -- tasks -----------------------------------------------------------------------------------


@pytest.fixture
def cached_runtime(tmp_path: Path) -> Iterator[ProcessRuntime]:
    stager = CountingStager()
    rt = ProcessRuntime(
        tmp_path / "work",
        ImageCache(tmp_path / "images"),
        data_cache=DatasetCache(tmp_path / "cache", 250, stager),
    )
    yield rt
    rt.shutdown(grace_s=0.2)


def wire(data: DatasetWire) -> dict[str, object]:
    return data.model_dump()


def test_a_task_reads_its_cached_dataset(cached_runtime: ProcessRuntime, shared: Path) -> None:
    data = make_source(shared, "corpus", 100)
    spec = launch(
        "j1.0",
        "sh",
        "-c",
        'cat "$FUSESCHED_DATA_CORPUS/part-0"; echo " $FUSESCHED_DATA_CORPUS"',
        datasets=[wire(data)],
    )
    report, output = run_one(cached_runtime, spec)
    assert report.exit_code == 0, output
    cache = cached_runtime.data_cache
    assert cache is not None
    assert output == f"{'x' * 50} {cache.root / 'corpus' / 'corpus'}\n"
    assert cache.cached() == ["corpus"]


def test_without_a_cache_the_task_reads_the_shared_path(
    runtime: ProcessRuntime, shared: Path
) -> None:
    data = make_source(shared, "corpus", 10)
    spec = launch("j1.0", "sh", "-c", 'echo "$FUSESCHED_DATA_CORPUS"', datasets=[wire(data)])
    report, output = run_one(runtime, spec)
    assert report.exit_code == 0 and output == f"{shared / 'corpus'}\n"


@pytest.mark.parametrize("cached", [True, False])
def test_a_missing_source_fails_the_start_with_a_reason(
    cached: bool, cached_runtime: ProcessRuntime, runtime: ProcessRuntime
) -> None:
    rt = cached_runtime if cached else runtime
    gone = {"name": "gone", "source": "file:///nonexistent/gone"}
    spec = launch("j1.0", "true", datasets=[gone])
    rt.start(spec)
    report = wait_end(rt, "j1.0")["j1.0"]
    assert report.state is TaskState.FAILED_TO_START
    assert report.reason == "dataset gone: source file:///nonexistent/gone not found"
    assert rt.running() == []


def test_a_task_waiting_for_its_data_counts_as_running_and_can_be_killed(
    cached_runtime: ProcessRuntime, shared: Path
) -> None:
    cache = cached_runtime.data_cache
    assert cache is not None
    stager = cache.stager
    assert isinstance(stager, CountingStager)
    stager.hold.clear()
    spec = launch("j1.0", "true", datasets=[wire(make_source(shared, "slow", 100))])
    cached_runtime.start(spec)
    assert stager.inside.wait(5)
    assert cached_runtime.poll() == []  # no RUNNING report before it really runs
    assert cached_runtime.running() == ["j1.0"]
    assert [la.task_id for la in cached_runtime.launches()] == ["j1.0"]
    cached_runtime.kill("j1.0", 5.0, "cancelled")
    (report,) = cached_runtime.poll()
    assert (report.state, report.exit_code, report.reason) == (TaskState.EXITED, -15, "cancelled")
    assert cached_runtime.running() == []
    stager.hold.set()  # the copy still completes, into the cache, unpinned
    wait_for(cache.idle)
    assert cache.cached() == ["slow"]
    time.sleep(0.05)
    assert cached_runtime.poll() == []  # and the task never starts


def test_a_running_task_pins_its_dataset_until_it_ends(
    cached_runtime: ProcessRuntime, shared: Path, tmp_path: Path
) -> None:
    cache = cached_runtime.data_cache
    assert cache is not None
    gate = tmp_path / "gate"
    a, b, c = (make_source(shared, n, 100) for n in ("a", "b", "c"))
    spec = launch(
        "j1.0", "sh", "-c", f"while [ ! -e {gate} ]; do sleep 0.02; done", datasets=[wire(a)]
    )
    cached_runtime.start(spec)
    deadline = time.monotonic() + 5
    while not any(r.state is TaskState.RUNNING for r in cached_runtime.poll()):
        assert time.monotonic() < deadline
        time.sleep(0.01)
    cache.release(cache.acquire(b))
    cache.release(cache.acquire(c))  # a is the oldest, yet pinned: b goes
    assert cache.cached() == ["a", "c"]
    gate.touch()
    assert wait_end(cached_runtime, "j1.0")["j1.0"].exit_code == 0
    cache.release(cache.acquire(b))  # unpinned, and used until just now: c goes
    assert cache.cached() == ["a", "b"]


def test_a_container_task_sees_its_datasets_read_only(
    container_runtime: ProcessRuntime, shared: Path, tmp_path: Path
) -> None:
    image = make_rootfs(tmp_path / "image")
    folder = make_source(shared, "tree", 10)
    (shared / "one.txt").write_text("one\n")
    datasets = [wire(folder), {"name": "one", "source": f"file://{shared}/one.txt"}]
    probe = (
        'echo $FUSESCHED_DATA_TREE $FUSESCHED_DATA_ONE; cat "$FUSESCHED_DATA_ONE"; '
        'cat "$FUSESCHED_DATA_TREE/sub/part-1"; echo; '
        'touch "$FUSESCHED_DATA_TREE/new" 2>/dev/null || echo read-only'
    )
    spec = launch("c1.0.0", "/bin/sh", "-c", probe, image=str(image), datasets=datasets)
    report, text = run_one(container_runtime, spec)
    assert report.exit_code == 0, text
    assert text.splitlines() == [
        f"{DATA_IN_CONTAINER}/tree/tree {DATA_IN_CONTAINER}/one/one.txt",
        "one",
        "yyyyy",
        "read-only",
    ]


@pytest.mark.skipif(os.geteuid() != 0, reason="only root switches users")
def test_a_dataset_its_user_may_not_read_is_refused_before_any_copy(tmp_path: Path) -> None:
    who = Identity("reader", 234_600, 234_600)
    secret = tmp_path / "secret"  # pytest's folders are root's alone (0700)
    secret.write_text("root only")
    open_dir = Path(tempfile.mkdtemp(prefix="fusesched-data-"))
    try:
        open_dir.chmod(0o755)
        (open_dir / "public").write_text("anyone")
        (open_dir / "public").chmod(0o644)
        cache = DatasetCache(open_dir / "cache", 1 << 20)
        data = TaskData(cache, identities=lambda _user: who)
        for name, source in (("secret", secret), ("public", open_dir / "public")):
            data.begin(
                launch(f"{name}.0.0", "true", datasets=[{"name": "d", "source": str(source)}])
            )
        deadline = time.monotonic() + 10
        results: dict[str, object] = {}
        while len(results) < 2 and time.monotonic() < deadline:
            results.update((spec.task_id, outcome) for spec, outcome in data.ready())
            time.sleep(0.02)
        assert isinstance(results["secret.0.0"], str)
        assert "may not read" in results["secret.0.0"]
        assert isinstance(results["public.0.0"], list)  # granted
        copies = [p for p in (open_dir / "cache").rglob("*") if p.is_file()]
        assert all("root only" not in p.read_text(errors="ignore") for p in copies)
    finally:
        shutil.rmtree(open_dir, ignore_errors=True)
