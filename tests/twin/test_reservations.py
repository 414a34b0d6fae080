"""Advance reservations in the twin: a live controller's reservations are in its snapshot
and replayed through the core as live (its jobs inside the window, other jobs off the
reserved nodes); a scenario adds or removes one; snapshots from before still load."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from fastapi.testclient import TestClient
from tests.builders import Clock
from tests.controller.conftest import one_node_controller
from tests.twin.builders import T0, snapshot

from fusesched.api.app import create_app
from fusesched.controller.service import Controller
from fusesched.policies.registry import CoreConfig
from fusesched.store.store import Store
from fusesched.twin.build import build, dispatch_latency
from fusesched.twin.runner import RunOptions, TwinResult, run
from fusesched.twin.scenario import Scenario, ScenarioError, parse_scenario
from fusesched.twin.snapshot import (
    SnapReservation,
    Snapshot,
    load,
    loads,
    save,
    take_snapshot,
)

OPTIONS = RunOptions(energy=False, fragmentation=False, starts=True)


def job(user: str, walltime: float, cpus: int = 4, **extra: Any) -> dict[str, Any]:
    return {
        "user": user,
        "walltime_s": walltime,
        "groups": [{"resources": {"cpu": str(cpus)}, "argv": ["true"]}],
        **extra,
    }


@pytest.fixture
def live(tmp_path: Path) -> Iterator[tuple[Controller, TestClient, Clock]]:
    clock = Clock()
    clock.now = T0
    ctl = one_node_controller(tmp_path, clock)  # n0: 4 CPUs
    yield ctl, TestClient(create_app(ctl), raise_server_exceptions=False), clock
    ctl.persist.close()


def live_snapshot(tmp_path: Path, live: tuple[Controller, TestClient, Clock]) -> Snapshot:
    """A controller with reservation p on n0 (T0+600 to T0+1200, for alice) and three
    waiting or running jobs, snapshotted from its store."""
    ctl, client, clock = live
    body = {"name": "p", "nodes": ["n0"], "start": T0 + 600, "end": T0 + 1200}
    made = client.post("/v1/reservations", json={**body, "users": ["alice"]})
    assert made.status_code == 201, made.text
    ids = []
    for at, request in (
        (T0, job("bob", 1000)),  # would run into the window: kept off n0 until its end
        (T0 + 10, job("alice", 300, reservation="p")),  # inside the window
        (T0 + 20, job("bob", 100, cpus=1)),  # ends before the window opens: runs at once
    ):
        clock.now = at
        answer = client.post("/v1/jobs", json=request)
        assert answer.status_code == 201, answer.text
        ids.append(answer.json()["id"])
        ctl.run_cycle()
    ctl.persist.flush()
    with Store(f"sqlite:///{tmp_path / 'db.sqlite'}") as store:
        snap = take_snapshot(store, CoreConfig(), now=T0 + 30)
    assert [j.id for j in snap.jobs] == ids
    return snap


def starts(result: TwinResult) -> list[float]:
    return [result.starts[j] - T0 for j in sorted(result.starts, key=int)]


def test_a_live_reservation_is_in_the_snapshot_and_replayed_as_live(
    tmp_path: Path, live: tuple[Controller, TestClient, Clock]
) -> None:
    snap = live_snapshot(tmp_path, live)
    (held,) = snap.reservations
    assert (held.name, held.nodes, held.users, held.tenants) == ("p", ["n0"], ["alice"], [])
    assert (held.start, held.end, held.created_at) == (T0 + 600, T0 + 1200, T0)
    path = tmp_path / "snap.json.gz"
    save(snap, path)
    assert load(path) == snap
    result = run(snap, Scenario(dispatch_latency_s=0.0), 0, OPTIONS)
    # bob's long job waits for the window's end; alice's starts as it opens, on n0;
    # bob's short one runs at once (it ends before the window)
    assert starts(result) == [1200.0, 600.0, 20.0]
    assert result.reservations == 1 and result.overall["rejected"] == 0


def test_a_scenario_without_the_reservation_runs_its_jobs_as_ordinary_ones(
    tmp_path: Path, live: tuple[Controller, TestClient, Clock]
) -> None:
    snap = live_snapshot(tmp_path, live)
    scenario = parse_scenario({"reservations": {"remove": ["p"]}, "dispatch_latency_s": 0})
    inputs = build(snap, scenario, 0)
    assert inputs.reservations == [] and inputs.unreserved == 1
    result = run(snap, scenario, 0, OPTIONS)
    assert starts(result) == [0.0, 1000.0, 1300.0]  # first come, first served on n0
    assert result.unreserved == 1 and result.overall["rejected"] == 0


def test_a_scenario_reservation_delays_the_jobs_that_would_run_into_it() -> None:
    snap = snapshot(60)
    base = run(snap, Scenario(dispatch_latency_s=0.0), 0, OPTIONS)
    origin = min(j.submit for j in snap.jobs)  # the replay's 0
    # every node down for maintenance from 100 s to 700 s after the first submission, made
    # before the first (by default it is made at the snapshot's time: after all of these)
    window = {"start_s": 100, "duration_s": 600, "made_at_s": 0}
    add = {"name": "maint", "nodes": "cpu-[1-2],gpu-[1-2]", **window}
    scenario = parse_scenario({"reservations": {"add": [add]}, "dispatch_latency_s": 0})
    held = run(snap, scenario, 0, OPTIONS)
    assert held.reservations == 1
    walltime = {j.id: j.request["walltime_s"] for j in snap.jobs}
    later = 0
    for job_id, start in held.starts.items():
        t = start - origin
        # no start inside the window, nor one whose time limit runs into it
        assert t >= 700 or t + walltime[job_id] < 100, (job_id, t)
        later += start > base.starts[job_id]
    assert later > 10
    assert held.overall["avg_wait_s"] > base.overall["avg_wait_s"] + 60
    again = run(snap, scenario, 0, OPTIONS)  # the same input, the same output
    assert again.starts == held.starts and again.overall == held.overall


def test_a_dated_reservation_made_at_the_snapshot_time(
    tmp_path: Path, live: tuple[Controller, TestClient, Clock]
) -> None:
    snap = live_snapshot(tmp_path, live)
    # a maintenance window on n0 from T0+100 to T0+500, dated (UTC), made at the snapshot
    add = {"name": "m", "nodes": ["n0"], "start": "2023-11-14T22:15:00Z", "duration_s": 400}
    scenario = parse_scenario(
        {"reservations": {"add": [add]}, "dispatch_latency_s": 0}, "what-if.yaml"
    )
    (made,) = [b for b in build(snap, scenario, 0).reservations if b.reservation.name == "m"]
    assert (made.reservation.start, made.reservation.end, made.made_at) == (100, 500, 30)
    result = run(snap, scenario, 0, OPTIONS)
    assert starts(result) == [1200.0, 600.0, 20.0]  # (the short job started before it)


@pytest.mark.parametrize(
    ("reservations", "expected"),
    [
        (
            {"remove": ["nope"]},
            "reservations.remove.0: the snapshot has no reservation 'nope' (it has: none)",
        ),
        (
            {"add": [{"name": "x", "nodes": "gpu-[1-9]", "start_s": 0, "end_s": 9}]},
            "reservations.add.0.nodes: no node 'gpu-3' in the cluster",
        ),
        (
            {"add": [{"name": "x", "nodes": ["cpu-1"], "start_s": 9, "end_s": 1}]},
            "reservations.add.0: reservation x: the end (1) must come after the start (9)",
        ),
        (
            {
                "add": [
                    {"name": "x", "nodes": ["cpu-1"], "start_s": 0, "end_s": 9, "made_at_s": 0},
                    {"name": "y", "nodes": ["cpu-1"], "start_s": 5, "end_s": 20, "made_at_s": 1},
                ]
            },
            "reservations: reservations x and y hold cpu-1 in overlapping windows",
        ),
        (  # made at the snapshot's time (an hour after T0): it would hold nothing
            {"add": [{"name": "x", "nodes": ["cpu-1"], "start_s": 0, "end_s": 9}]},
            "reservations.add.0: it ends at 9 s after the first submission, before it is made",
        ),
        (
            {"add": [{"name": "x", "nodes": ["cpu-1"], "start_s": 0, "end_s": 9, "made_at_s": 9}]},
            "reservations.add.0: it ends at 9 s after the first submission, before it is made "
            "(9 s, made_at_s)",
        ),
    ],
)
def test_a_reservation_the_cluster_cannot_hold_is_a_clear_error(
    reservations: dict[str, Any], expected: str
) -> None:
    scenario = parse_scenario({"reservations": reservations}, "w.yaml")
    with pytest.raises(ScenarioError) as caught:
        build(snapshot(5), scenario, 0, "w.yaml")
    assert str(caught.value).startswith(f"w.yaml: {expected}")


def test_reservations_a_snapshot_cannot_hold_are_the_snapshots_error() -> None:
    window = {"nodes": ["cpu-1"], "start": T0 + 10, "end": T0 + 90, "created_at": T0}
    held = [SnapReservation(name=n, **window) for n in ("a", "b")]
    snap = snapshot(5).model_copy(update={"reservations": held})
    with pytest.raises(ScenarioError) as caught:
        build(snap, parse_scenario({}, "w.yaml"), 0, "w.yaml")  # (its dispatch latency first)
    assert str(caught.value) == (
        "snapshot: reservations: reservations a and b hold cpu-1 in overlapping windows"
    )


@pytest.mark.parametrize(
    ("add", "expected"),
    [
        ({"name": "x", "nodes": "a", "end_s": 9}, "exactly one of start (a date and time)"),
        ({"name": "x", "nodes": "a", "start_s": 0}, "exactly one of end, end_s or duration_s"),
        ({"name": "x", "nodes": "a", "start": "soon", "end_s": 1}, "not an ISO 8601 date"),
        ({"name": "x y", "nodes": "a", "start_s": 0, "end_s": 1}, "add.0.name"),
        ({"name": "x", "nodes": [], "start_s": 0, "end_s": 1}, "a reservation needs nodes"),
    ],
)
def test_a_malformed_reservation_names_the_field(add: dict[str, Any], expected: str) -> None:
    with pytest.raises(ScenarioError, match=r"w\.yaml: reservations") as caught:
        parse_scenario({"reservations": {"add": [add]}}, "w.yaml")
    assert expected in str(caught.value)


def test_a_snapshot_from_before_reservations_still_loads() -> None:
    snap = snapshot(30)
    old = json.loads(snap.model_dump_json())
    del old["reservations"]
    old["version"] = 1
    loaded = loads(json.dumps(old).encode(), "old.json")
    assert loaded.reservations == [] and loaded.jobs == snap.jobs
    assert run(loaded, Scenario(), 0, OPTIONS).starts == run(snap, Scenario(), 0, OPTIONS).starts


def test_a_broken_reservation_in_a_snapshot_is_a_clear_error() -> None:
    raw = json.loads(snapshot(3).model_dump_json())
    raw["reservations"] = [{"name": "r", "nodes": ["cpu-1"], "start": 10, "end": 5}]
    with pytest.raises(ValueError, match=r"s.json: reservations.0: .*must come after the start"):
        loads(json.dumps(raw).encode(), "s.json")


def test_twin_run_adds_and_removes_reservations_on_the_command_line(
    tmp_path: Path, live: tuple[Controller, TestClient, Clock]
) -> None:
    from tests.twin.test_cli import invoke

    path = tmp_path / "snap.json"
    save(live_snapshot(tmp_path, live), path)
    base = ["run", str(path), "--workers", "1", "--json"]
    code, output = invoke(*base, "--no-reservation", "p")
    assert code == 0, output
    observed, twin = json.loads(output)
    assert (observed["reservations"], twin["reservations"], twin["unreserved"]) == (1, 0, 1)
    # without p, first come first served on n0: starts at 0, 1000, 1300 s (waits 0, 990,
    # 1280); with a window on n0 from 1,150 to 1,250 s (made at the snapshot's time, 30 s),
    # alice's job (300 s) waits for its end and bob's short one (100 s) goes first at 1,000
    assert twin["overall"]["avg_wait_s"] == pytest.approx((990 + 1280) / 3)
    code, output = invoke(*base, "--reservation", "m:n0:1150:+100", "--no-reservation", "p")
    assert code == 0, output
    twin = json.loads(output)[1]
    assert twin["reservations"] == 1
    assert twin["overall"]["avg_wait_s"] == pytest.approx((1240 + 980) / 3)
    code, output = invoke("run", str(path), "--reservation", "m:n0:2000:+5")  # a table
    assert code == 0 and "reservations" in output and "rejected jobs" in output, output
    for args, expected in (
        (["--no-reservation", "nope"], "the snapshot has no reservation 'nope' (it has: p)"),
        (["--reservation", "m:n0:5"], "--reservation: reservation 'm:n0:5': expected NAME:"),
        (["--reservation", "m:n9:0:5"], "reservations.add.0.nodes: no node 'n9'"),
        (["--reservation", "p:n0:0:5"], "'p' is held already (remove it first"),
        # made at the snapshot's time (30 s): a window that has ended by then is refused
        (["--reservation", "m:n0:0:5"], "it ends at 5 s after the first submission, before"),
        (["--reservation", "m:n0:\u0660:5"], "START '\u0660' is not a number of seconds"),
    ):
        code, output = invoke("run", str(path), *args)
        assert code == 2, output
        assert expected in " ".join(output.split()), output


def test_jobs_of_a_reservation_gone_before_the_snapshot_do_not_make_the_dispatch_latency() -> None:
    # six of ten jobs were submitted into a reservation that ended before the snapshot and
    # waited 500 s for its window live; the replay starts them at once, as ordinary jobs
    raw = json.loads(snapshot(10).model_dump_json())
    for i, row in enumerate(raw["jobs"]):
        if i % 5 < 3:
            row["request"]["reservation"] = "gone"
            row["start"] += 500
            row["end"] += 500
    snap = loads(json.dumps(raw).encode(), "s.json")
    inputs = build(snap, Scenario(dispatch_latency_s=0.0), 0)
    assert inputs.unreserved == 6
    assert dispatch_latency(snap) == 0.0  # (the median of the four others' waits)
