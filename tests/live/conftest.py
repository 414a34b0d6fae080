"""A real controller with three real agents (distinct names and sizes) on this machine."""

from __future__ import annotations

import contextlib
import os
import shutil
import tempfile
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path
from typing import Any

import pytest

from fusesched.agent.config import AgentConfig
from fusesched.api.wire import DeviceInfo
from fusesched.cli.local import LocalCluster
from fusesched.sdk import Client

POSTGRES_URL = "postgresql+psycopg://postgres@127.0.0.1:5432/test"


def agent_configs(root: Path) -> list[AgentConfig]:
    def config(name: str, **extra: object) -> AgentConfig:
        tmp = root / "tmp" / name  # each node its own /tmp, as on separate machines
        tmp.mkdir(parents=True, exist_ok=True)
        tmp.chmod(0o1777)
        return AgentConfig(
            name=name,
            address="127.0.0.1",
            work_dir=root / "agents" / name,
            image_cache_dir=root / "images",
            tmp_dir=tmp,
            nvml=False,
            **extra,  # type: ignore[arg-type]
        )

    return [
        config("node-a", cpu=2, memory="2Gi", labels={"fusesched.io/pool": "cpu"}),
        config("node-b", cpu=2, memory="2Gi", labels={"fusesched.io/pool": "cpu"}),
        config(
            "node-c",
            cpu=4,
            memory="4Gi",
            labels={"fusesched.io/pool": "gpu"},
            fake_devices=[
                DeviceInfo(index=0, uuid="GPU-fake-0", model="H200"),
                DeviceInfo(index=1, uuid="GPU-fake-1", model="H200"),
            ],
        ),
    ]


@pytest.fixture
def scratch() -> Iterator[Path]:
    """A folder tasks can use: they run under unprivileged uids, and pytest's own temporary
    folders are private to root (mode 0700)."""
    folder = Path(tempfile.mkdtemp(prefix="fusesched-test-"))
    folder.chmod(0o1777)
    yield folder
    shutil.rmtree(folder, ignore_errors=True)


@contextlib.contextmanager
def local_cluster(
    data: Path,
    pick: Callable[[list[AgentConfig]], Sequence[AgentConfig]] = list,
    **options: Any,
) -> Iterator[LocalCluster]:
    """A running controller with the agents ``pick`` chooses of :func:`agent_configs` (all
    three by default), their work dirs in a folder the tasks' uids can reach; ``options``
    go to :class:`LocalCluster`."""
    shared = Path(tempfile.mkdtemp(prefix="fusesched-agents-"))
    shared.chmod(0o755)  # the agents' work dirs must be reachable by the tasks' uids
    cluster = LocalCluster(
        data, port=0, agents=list(pick(agent_configs(shared))), long_poll_s=0.5, **options
    )
    try:
        with cluster:
            yield cluster
    finally:
        shutil.rmtree(shared, ignore_errors=True)


def _cluster(tmp_path: Path, database_url: str | None) -> Iterator[LocalCluster]:
    with local_cluster(tmp_path / "data", database_url=database_url) as cluster:
        yield cluster


@pytest.fixture
def cluster(tmp_path: Path) -> Iterator[LocalCluster]:
    yield from _cluster(tmp_path, None)


@pytest.fixture
def client(cluster: LocalCluster) -> Client:
    return Client(cluster.url)


def fresh_postgres_url() -> str:
    """A new, empty database on the local PostgreSQL (it must run: CI starts it)."""
    import uuid

    import psycopg

    name = f"fusesched_live_{uuid.uuid4().hex[:10]}"
    try:
        with psycopg.connect("host=127.0.0.1 user=postgres dbname=postgres", autocommit=True) as c:
            c.execute(f'CREATE DATABASE "{name}"')
    except psycopg.OperationalError as exc:
        if os.environ.get("CI"):
            raise
        pytest.skip(f"PostgreSQL is not running at 127.0.0.1:5432 ({exc})")
    return f"postgresql+psycopg://postgres@127.0.0.1:5432/{name}"


def drop_postgres(url: str) -> None:
    import psycopg

    name = url.rsplit("/", 1)[1]
    with psycopg.connect("host=127.0.0.1 user=postgres dbname=postgres", autocommit=True) as c:
        c.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')


@pytest.fixture
def pg_cluster(tmp_path: Path) -> Iterator[LocalCluster]:
    url = fresh_postgres_url()
    try:
        yield from _cluster(tmp_path, url)
    finally:
        drop_postgres(url)
