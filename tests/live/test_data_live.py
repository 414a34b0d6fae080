"""Datasets end to end: three real agents, each with a small node-local dataset cache.

(a) a job declaring a dataset runs on the node whose cache holds it; (b) with no cached copy the
data is staged and the job reads it at ``$FUSESCHED_DATA_<NAME>``; (c) datasets passing through
a small cache are evicted so that it stays within its capacity; (d) a job waiting for its
reserved node finds its data already staged there when it starts.
"""

from __future__ import annotations

import json
import shutil
import tempfile
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from fusesched.agent.config import AgentConfig, DataCacheConfig
from fusesched.agent.datasets import META_NAME, DatasetCache
from fusesched.api.wire import DatasetWire
from fusesched.cli.local import LocalCluster
from fusesched.policies.registry import CoreConfig
from fusesched.sdk import Client

CAPACITY = 1000  # bytes per node: two of the 400-byte datasets, not three
NODE_LABEL = "test.fusesched.io/node"
# prints the dataset's content, then where the task found it
READ = 'cat "$FUSESCHED_DATA_{name}"; echo "@$FUSESCHED_DATA_{name}"'


@dataclass
class DataCluster:
    cluster: LocalCluster
    client: Client
    shared: Path  # the "shared storage" the datasets come from
    caches: dict[str, Path]  # node -> its cache folder


def source(folder: Path, name: str, content: str) -> dict[str, Any]:
    path = folder / f"{name}.txt"
    path.write_text(content)
    path.chmod(0o644)
    return {"name": name, "source": str(path), "size": len(content)}


@pytest.fixture(scope="module")
def data_cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[DataCluster]:
    root = Path(tempfile.mkdtemp(prefix="fusesched-data-"))
    root.chmod(0o755)  # the agents' folders and caches must be reachable by the tasks' uids
    shared = root / "shared"
    shared.mkdir(mode=0o755)
    caches = {name: root / "cache" / name for name in ("node-a", "node-b", "node-c")}
    # node-c's cache already holds "warm" (from an earlier agent run): the agent finds it
    warm = source(shared, "warm", "warm bytes\n")
    cache = DatasetCache(caches["node-c"], CAPACITY)
    cache.release(cache.acquire(DatasetWire(name="warm", source=warm["source"])))

    def agent(name: str, cpu: int, stager: str = "copy") -> AgentConfig:
        return AgentConfig(
            name=name,
            address="127.0.0.1",
            cpu=cpu,
            memory="2Gi",
            work_dir=root / "agents" / name,
            image_cache_dir=root / "images",
            nvml=False,
            labels={NODE_LABEL: name},
            data_cache=DataCacheConfig(dir=caches[name], capacity=CAPACITY, stager=stager),
        )

    rsync = "rsync" if shutil.which("rsync") else "copy"
    # best-fit packs small jobs onto the small nodes: only data locality sends one to node-c
    agents = [agent("node-a", 2), agent("node-b", 2, rsync), agent("node-c", 4)]
    core = CoreConfig(placement="best-fit")  # default data locality weight, no waiting
    data_dir = tmp_path_factory.mktemp("data-live")
    cluster = LocalCluster(data_dir, port=0, agents=agents, core=core, long_poll_s=0.5)
    try:
        with cluster:
            yield DataCluster(cluster, Client(cluster.url), shared, caches)
    finally:
        shutil.rmtree(root, ignore_errors=True)


def job(name: str, datasets: list[dict[str, Any]], **extra: Any) -> dict[str, Any]:
    script = "; ".join(READ.format(name=d["name"].upper()) for d in datasets)
    group = {"resources": {"cpu": "250m", "memory": "64Mi"}, "argv": ["sh", "-c", script]}
    return {"name": name, "walltime_s": 60, "datasets": datasets, "groups": [group], **extra}


def run(dc: DataCluster, request: dict[str, Any]) -> tuple[dict[str, Any], str]:
    job_id = dc.client.submit(request)
    done = dc.client.wait(job_id, timeout=20)
    return done, dc.client.logs(job_id)


def cache_bytes(folder: Path) -> int:
    """Bytes of the datasets a cache folder holds (copies under way or being deleted, which
    are hidden, and metadata files are not counted)."""
    total = 0
    for item in folder.iterdir():
        if item.name.startswith("."):
            continue
        for path in item.rglob("*") if item.is_dir() else [item]:
            if path.is_file() and path.name != META_NAME:
                total += path.stat().st_size
    return total


def cached(folder: Path) -> list[str]:
    return sorted(p.name for p in folder.iterdir() if (p / META_NAME).is_file())


def wait_for(what: str, condition: Callable[[], bool], timeout: float = 10.0) -> None:
    deadline = time.monotonic() + timeout
    while not condition():
        assert time.monotonic() < deadline, f"timed out waiting until {what}"
        time.sleep(0.05)


def known(dc: DataCluster, node: str) -> frozenset[str] | None:
    """What the controller heard (from heartbeats) that the node's cache holds, as the API
    shows it (GET /v1/nodes)."""
    (view,) = [n for n in dc.client.nodes() if n["name"] == node]
    return None if view["datasets"] is None else frozenset(view["datasets"])


def test_a_job_runs_where_its_dataset_is_cached(data_cluster: DataCluster) -> None:
    dc = data_cluster
    warm = {"name": "warm", "source": str(dc.shared / "warm.txt"), "size": 11}
    # the agent found the copy left in its cache folder and said so in its heartbeats
    wait_for("node-c reports its cache", lambda: known(dc, "node-c") == {"warm"})
    done, output = run(dc, job("near-data", [warm]))
    assert done["state"] == "Completed", (done, output)
    assert done["nodes"] == ["node-c"], done
    assert output == f"warm bytes\n@{dc.caches['node-c'] / 'warm' / 'warm.txt'}\n"


def test_a_dataset_is_staged_and_read_at_its_stable_path(data_cluster: DataCluster) -> None:
    dc = data_cluster
    fresh = source(dc.shared, "fresh", "staged for the job\n")
    done, output = run(dc, job("staged", [fresh]))
    assert done["state"] == "Completed", (done, output)
    (node,) = done["nodes"]
    copy = dc.caches[node] / "fresh" / "fresh.txt"
    assert output == f"staged for the job\n@{copy}\n"  # read from the node's cache
    assert json.loads((copy.parent / META_NAME).read_text())["source"] == fresh["source"]
    # a missing source fails the job with a clear reason, not a traceback
    gone = {"name": "gone", "source": f"file://{dc.shared}/gone.txt"}
    done, _ = run(dc, job("missing", [gone]))
    assert done["state"] == "Failed", done
    assert done["reason"] == f"dataset gone: source file://{dc.shared}/gone.txt not found", done


def test_eviction_keeps_the_cache_within_capacity(data_cluster: DataCluster) -> None:
    dc = data_cluster
    folder = dc.caches["node-b"]
    on_b = {"placement": {"node_selector": {NODE_LABEL: "node-b"}}}
    names = [f"part{i}" for i in range(4)]
    for i, name in enumerate(names):
        data = source(dc.shared, name, f"{i}" * 399 + "\n")  # 400 bytes each
        done, output = run(dc, job(f"evict-{i}", [data], **on_b))
        assert done["state"] == "Completed", (done, output)
        assert output.startswith(f"{i}" * 399) and f"@{folder / name}" in output
        assert cache_bytes(folder) <= CAPACITY
        assert cached(folder)[-1] == name  # the newest is always kept
    assert cached(folder) == names[-2:]  # the least recently used went first
    wait_for("node-b reports the evictions", lambda: known(dc, "node-b") == set(names[-2:]))


def test_data_is_staged_ahead_onto_the_reserved_node(data_cluster: DataCluster) -> None:
    dc = data_cluster
    gate = dc.shared / "gate"
    on_a = {"placement": {"node_selector": {NODE_LABEL: "node-a"}}}
    blocker = dc.client.submit(
        {
            "name": "blocker",
            "walltime_s": 30,
            "groups": [
                {
                    "resources": {"cpu": 2, "memory": "64Mi"},
                    "argv": ["sh", "-c", f"while [ ! -e {gate} ]; do sleep 0.05; done"],
                }
            ],
        }
        | on_a
    )
    wait_for("the blocker runs", lambda: dc.client.show(blocker)["state"] == "Running")
    ahead = source(dc.shared, "ahead", "copied while waiting\n")
    waiting = dc.client.submit(job("waits", [ahead], **on_a))
    # node-a is full: the job waits with a reservation there, and its data is staged meanwhile
    wait_for("the data is staged ahead", lambda: "ahead" in cached(dc.caches["node-a"]))
    assert dc.client.show(waiting)["state"] == "Pending"
    gate.touch()
    done = dc.client.wait(waiting, timeout=20)
    assert done["state"] == "Completed" and done["nodes"] == ["node-a"], done
    copy = dc.caches["node-a"] / "ahead" / "ahead.txt"
    assert dc.client.logs(waiting) == f"copied while waiting\n@{copy}\n"
