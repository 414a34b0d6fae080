"""Sweeps of scenarios × seeds: on every core (``concurrent.futures.ProcessPoolExecutor``) or
on a Ray cluster (``ray_address``).

Each worker gets the snapshot once (as bytes: a process pool's initializer, or Ray's object
store) and parses it once; tasks carry only the scenario, the seed and the options. Results
come back in task order, whoever ran them, so a sweep's output does not depend on how it
was spread.
"""

from __future__ import annotations

import hashlib
import logging
import os
import socket
from collections.abc import Sequence
from concurrent.futures import ProcessPoolExecutor
from dataclasses import asdict, dataclass, field
from typing import Any

from fusesched.twin.runner import RunOptions, TwinResult, run
from fusesched.twin.scenario import Scenario
from fusesched.twin.snapshot import Snapshot, loads


class ParallelError(RuntimeError):
    """A sweep that could not run (Ray missing or unreachable)."""


@dataclass(frozen=True)
class Task:
    scenario: Scenario
    seed: int
    options: RunOptions = field(default_factory=RunOptions)
    source: str = "scenario"


_loaded: tuple[str, Snapshot] | None = None


def _snapshot(data: bytes) -> Snapshot:
    """The snapshot of ``data``, parsed once per process."""
    global _loaded
    digest = hashlib.sha256(data).hexdigest()
    if _loaded is None or _loaded[0] != digest:
        _loaded = (digest, loads(data))
    return _loaded[1]


def _init(data: bytes) -> None:
    _snapshot(data)
    global _pool_data
    _pool_data = data


_pool_data: bytes = b""


def _run_task(
    scenario: dict[str, Any], seed: int, options: dict[str, Any], source: str
) -> dict[str, Any]:
    snap = _snapshot(_pool_data)
    result = run(snap, Scenario.model_validate(scenario), seed, RunOptions(**options), source)
    return result.as_dict()


def _ray_task(
    data: bytes, scenario: dict[str, Any], seed: int, options: dict[str, Any], source: str
) -> dict[str, Any]:
    snap = _snapshot(data)
    result = run(snap, Scenario.model_validate(scenario), seed, RunOptions(**options), source)
    return result.as_dict()


def _args(task: Task) -> tuple[dict[str, Any], int, dict[str, Any], str]:
    return task.scenario.model_dump(), task.seed, asdict(task.options), task.source


def default_workers() -> int:
    return max(1, len(os.sched_getaffinity(0)))


def run_all(
    snapshot: bytes,
    tasks: Sequence[Task],
    *,
    workers: int | None = None,
    ray_address: str | None = None,
) -> list[TwinResult]:
    """Run every task; ``snapshot`` is the snapshot file's bytes. ``workers``: processes
    (None: one per core; 1: in this process). With ``ray_address``, on that Ray cluster."""
    if not tasks:
        return []
    if ray_address is not None:
        return _run_ray(snapshot, tasks, ray_address)
    count = min(workers or default_workers(), len(tasks))
    if count <= 1:
        _init(snapshot)
        return [TwinResult.from_dict(_run_task(*_args(t))) for t in tasks]
    with ProcessPoolExecutor(count, initializer=_init, initargs=(snapshot,)) as pool:
        futures = [pool.submit(_run_task, *_args(t)) for t in tasks]
        return [TwinResult.from_dict(f.result()) for f in futures]


def _reachable(address: str) -> None:
    """Fail fast for a ``host:port`` nobody listens on (Ray itself retries for minutes)."""
    host, sep, port = address.removeprefix("ray://").rpartition(":")
    if not sep or not (port.isascii() and port.isdigit()):
        raise ParallelError(f"--ray: expected HOST:PORT, got {address!r}")
    try:
        with socket.create_connection((host or "127.0.0.1", int(port)), timeout=5):
            pass
    except OSError as exc:
        raise ParallelError(f"cannot reach the Ray cluster at {address}: {exc}") from None


def _run_ray(snapshot: bytes, tasks: Sequence[Task], address: str) -> list[TwinResult]:
    try:
        import ray
    except ImportError:
        raise ParallelError(
            "--ray needs the ray package (pip install ray==2.58.0, part of the dev extra)"
        ) from None
    started_here = not ray.is_initialized()
    if started_here:
        _reachable(address)
        try:
            ray.init(address=address, log_to_driver=False, logging_level=logging.ERROR)
        except (ConnectionError, RuntimeError, ValueError) as exc:
            raise ParallelError(f"cannot reach the Ray cluster at {address}: {exc}") from None
    try:
        ref = ray.put(snapshot)
        remote = ray.remote(_ray_task)
        futures = [remote.remote(ref, *_args(t)) for t in tasks]
        return [TwinResult.from_dict(r) for r in ray.get(futures)]
    finally:
        if started_here:
            ray.shutdown()
