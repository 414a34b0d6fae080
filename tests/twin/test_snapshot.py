"""Snapshots: from a store, to a file and back, unchanged; clear errors for bad files."""

from __future__ import annotations

import gzip
import json
from pathlib import Path

import pytest
from tests.twin.builders import TENANCY, snapshot

from fusesched.policies.registry import CoreConfig
from fusesched.store.records import JobRow, JobState, NodeRow
from fusesched.store.store import Store
from fusesched.twin.build import build, dispatch_latency
from fusesched.twin.runner import RunOptions, run
from fusesched.twin.scenario import Scenario
from fusesched.twin.snapshot import SnapshotError, load, save, take_snapshot

REQUEST = {"name": "r", "walltime_s": 60, "groups": [{"resources": {"cpu": "1"}, "argv": ["x"]}]}
ARRAY = {**REQUEST, "array": {"start": 0, "stop": 1}}


def filled_store(tmp_path: Path) -> Store:
    store = Store(f"sqlite:///{tmp_path / 'fusesched.db'}")
    store.upsert_node(
        NodeRow(
            "node-b",
            "127.0.0.1",
            2.0,
            capacity={"cpu": "4", "memory": "8Gi", "nvidia.com/gpu": "1"},
            labels={"fusesched.io/pool": "gpu"},
            devices=({"kind": "nvidia.com/gpu", "index": 0, "uuid": "GPU-0", "model": "H200"},),
        )
    )
    store.upsert_node(NodeRow("node-a", "127.0.0.1", 1.0, capacity={"cpu": "2"}))
    store.upsert_node(NodeRow("pool:x", "", 0.5, capacity={"cpu": "2"}))  # an external pool's
    rows = [
        JobRow(
            "1",
            1,
            "ann",
            JobState.COMPLETED,
            "completed",
            10.0,
            REQUEST,
            queue="q",
            start_time=11.0,
            end_time=15.5,
            exit_code=0,
        ),
        JobRow(
            "2_0",
            2,
            "bob",
            JobState.FAILED,
            "failed",
            12.0,
            ARRAY,
            array_parent="2",
            start_time=12.0,
            end_time=13.0,
            exit_code=3,
        ),
        JobRow(
            "2_1",
            3,
            "bob",
            JobState.RUNNING,
            "running",
            12.0,
            ARRAY,
            array_parent="2",
            start_time=14.0,
        ),
        JobRow("4", 4, "cyd", JobState.CANCELLED, "cancelled", 13.0, REQUEST, end_time=14.0),
        JobRow("5", 5, "cyd", JobState.PENDING, "queued", 16.0, REQUEST),
    ]
    store.add_jobs(rows)
    return store


def test_a_store_snapshot_survives_the_round_trip(tmp_path: Path) -> None:
    with filled_store(tmp_path) as store:
        snap = take_snapshot(
            store, CoreConfig(backfill="conservative"), tenancy=TENANCY, power={"x": 1}, now=99.0
        )
    assert [n.name for n in snap.nodes] == ["node-a", "node-b"]  # registration order
    assert [j.id for j in snap.jobs] == ["1", "2_0", "2_1", "4", "5"]
    assert snap.jobs[0].runtime == 4.5
    for name in ("s.json", "s.json.gz"):
        path = tmp_path / name
        save(snap, path)
        assert load(path) == snap
    raw = gzip.decompress((tmp_path / "s.json.gz").read_bytes())
    assert json.loads(raw)["format"] == "fusesched-twin-snapshot"
    assert json.loads(raw)["version"] == 2
    save(snap, tmp_path / "again.json.gz")  # the same snapshot, the same bytes
    assert (tmp_path / "again.json.gz").read_bytes() == (tmp_path / "s.json.gz").read_bytes()
    assert snap.core_config().backfill == "conservative"
    assert snap.core_config().tenancy is not None


def test_the_twin_replays_what_the_store_holds(tmp_path: Path) -> None:
    with filled_store(tmp_path) as store:
        snap = take_snapshot(store, CoreConfig())
    inputs = build(snap, Scenario(dispatch_latency_s=0.0), 0)
    runs = {j.spec.id: (j.spec.submit_time, j.runtime, j.exit_code) for j in inputs.jobs}
    assert runs == {
        "1": (0.0, 4.5, 0),  # measured run time; times from the first submission
        "2_0": (2.0, 1.0, 3),  # an array member, from its parent's request
        "2_1": (2.0, 60.0, 0),  # still running: its walltime stands in
        "5": (6.0, 60.0, 0),
    }
    assert inputs.skipped == 1  # cancelled before it started
    assert (inputs.measured, inputs.estimated) == (2, 2)
    assert inputs.nodes[1].devices[0].model == "H200"


def test_the_dispatch_latency_is_measured_from_the_history(tmp_path: Path) -> None:
    with filled_store(tmp_path) as store:
        snap = take_snapshot(store, CoreConfig())
    # job 1 started 1 s after its submission on an empty cluster: that is the latency
    assert dispatch_latency(snap) == 1.0
    inputs = build(snap, Scenario(), 0)
    assert inputs.latency == 1.0
    assert inputs.jobs[0].spec.submit_time == 1.0  # the core sees it 1 s after submission
    result = run(snap, Scenario(), 0, RunOptions(energy=False, starts=True))
    assert result.starts["1"] == 11.0  # as live
    assert result.overall["avg_wait_s"] >= 1.0  # waits count from the submission


@pytest.mark.parametrize(
    ("content", "expected"),
    [
        (b"not json", "not a JSON snapshot"),
        (b"{}", "not a fusesched twin snapshot"),
        (b'{"format": "fusesched-twin-snapshot", "version": 99}', "snapshot version 99"),
        (b'{"format": "fusesched-twin-snapshot", "version": 1}', "nodes: Field required"),
        (b"\x1f\x8b broken", "broken gzip data"),
    ],
)
def test_bad_snapshot_files_are_clear_errors(tmp_path: Path, content: bytes, expected: str) -> None:
    path = tmp_path / "bad.json"
    path.write_bytes(content)
    with pytest.raises(SnapshotError) as info:
        load(path)
    assert str(path) in str(info.value) and expected in str(info.value)


def test_a_missing_snapshot_is_a_clear_error(tmp_path: Path) -> None:
    with pytest.raises(SnapshotError, match="cannot read the snapshot"):
        load(tmp_path / "none.json")


def test_bad_policies_in_a_snapshot_are_clear_errors() -> None:
    snap = snapshot(3).model_copy(update={"tenancy": {"organisations": 5}})
    with pytest.raises(SnapshotError, match="snapshot policies"):
        snap.core_config()
