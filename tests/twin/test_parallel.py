"""Sweeps: the same results inline, on a process pool and on a local Ray cluster."""

from __future__ import annotations

import os
import shutil
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from tests.twin.builders import snapshot

from fusesched.twin.parallel import ParallelError, Task, run_all
from fusesched.twin.runner import RunOptions
from fusesched.twin.scenario import parse_scenario
from fusesched.twin.snapshot import save

OPTIONS = RunOptions(energy=False)


def tasks() -> list[Task]:
    a = parse_scenario({"name": "a", "arrival": {"rate": 2, "jitter_s": 3}})
    b = parse_scenario({"name": "b", "nodes": {"add": [{"like": "gpu-1", "count": 1}]}})
    return [Task(s, seed, OPTIONS) for s in (a, b) for seed in (0, 1)]


@pytest.fixture(scope="module")
def data(tmp_path_factory: pytest.TempPathFactory) -> bytes:
    path = tmp_path_factory.mktemp("snap") / "s.json.gz"
    save(snapshot(80), path)
    return path.read_bytes()


def test_a_process_pool_gives_the_results_of_one_process(data: bytes) -> None:
    inline = run_all(data, tasks(), workers=1)
    pooled = run_all(data, tasks(), workers=2)
    assert [r.as_dict() for r in pooled] == [r.as_dict() for r in inline]
    assert [(r.scenario, r.seed) for r in pooled] == [("a", 0), ("a", 1), ("b", 0), ("b", 1)]


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@pytest.fixture(scope="module")
def ray_head(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """A one-node Ray cluster on loopback, started (and stopped) by this test."""
    pytest.importorskip("ray")
    ray_bin = Path(sys.executable).parent / "ray"
    if not ray_bin.exists():
        pytest.skip("no ray command next to this Python")
    port = _free_port()
    temp = Path("/tmp") / f"ray-twin-{os.getpid()}"  # short: Ray's socket paths are limited
    env = {**os.environ, "RAY_USAGE_STATS_ENABLED": "0"}
    head = subprocess.Popen(
        [
            str(ray_bin),
            "start",
            "--head",
            "--block",
            f"--port={port}",
            "--node-ip-address=127.0.0.1",
            "--num-cpus=2",
            "--include-dashboard=false",
            "--disable-usage-stats",
            f"--temp-dir={temp}",
        ],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        env=env,
        start_new_session=True,  # its own process group: stopped as one below
    )
    address = f"127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + 60
        while True:
            try:
                with socket.create_connection(("127.0.0.1", port), timeout=1):
                    break
            except OSError:
                if head.poll() is not None or time.monotonic() > deadline:
                    pytest.fail("the local Ray head did not start")
                time.sleep(0.2)
        yield address
    finally:
        os.killpg(head.pid, signal.SIGTERM)
        try:
            head.wait(timeout=5)
        except subprocess.TimeoutExpired:
            os.killpg(head.pid, signal.SIGKILL)
            head.wait()
        shutil.rmtree(temp, ignore_errors=True)


def test_a_ray_cluster_gives_the_same_results(data: bytes, ray_head: str) -> None:
    inline = run_all(data, tasks(), workers=1)
    on_ray = run_all(data, tasks(), ray_address=ray_head)
    assert [r.as_dict() for r in on_ray] == [r.as_dict() for r in inline]


def test_an_unreachable_ray_cluster_is_a_clear_error(data: bytes) -> None:
    pytest.importorskip("ray")
    with pytest.raises(ParallelError, match="cannot reach the Ray cluster"):
        run_all(data, tasks()[:1], ray_address=f"127.0.0.1:{_free_port()}")
