"""The twin keeps dependencies on jobs in the snapshot, on whole arrays it has every member
of, and a singleton (which names none)."""

from __future__ import annotations

import pytest
from tests.twin.builders import snapshot

from fusesched.model.job import JobSpec
from fusesched.twin.build import build, job_spec
from fusesched.twin.runner import RunOptions, run
from fusesched.twin.scenario import parse_scenario
from fusesched.twin.snapshot import SnapshotError


def test_singletons_are_kept_and_unknown_targets_dropped() -> None:
    snap = snapshot(3)
    first, second, third = snap.jobs
    deps = {
        second.id: [{"kind": "singleton"}, {"kind": "afterany", "job_id": first.id}],
        third.id: [{"kind": "afterok", "job_id": "99999"}],  # not in the snapshot
    }
    jobs = [
        j.model_copy(update={"request": {**j.request, "name": "n", "dependencies": deps[j.id]}})
        if j.id in deps
        else j
        for j in snap.jobs
    ]
    inputs = build(snap.model_copy(update={"jobs": jobs}), parse_scenario({}), 0)
    specs = {j.spec.id: j.spec for j in inputs.jobs}
    assert [(d.kind.value, d.job_id) for d in specs[second.id].dependencies] == [
        ("singleton", ""),
        ("afterany", first.id),
    ]
    assert specs[third.id].dependencies == ()


def test_a_dependency_on_a_whole_array_replays() -> None:
    """An array's members replay as the jobs they are; a job that depends on the whole array
    (``afterok:<array>``) starts after the last member ended. One on an array that the
    replay lacks a member of is dropped, as one on a job outside the snapshot."""
    snap = snapshot(4)
    base = snap.jobs[0]
    arr = {**base.request, "array": {"start": 0, "stop": 1}}
    members = [
        base.model_copy(
            update={"id": f"50_{i}", "seq": 50 + i, "request": arr, "array_parent": "50"}
        )
        for i in range(2)
    ]
    members[1] = members[1].model_copy(update={"end": members[1].start + 300})  # runs longer
    reducer = snap.jobs[1].model_copy(
        update={
            "submit": base.submit + 1,
            "request": {
                **snap.jobs[1].request,
                "dependencies": [{"kind": "afterok", "job_id": "50"}],
            },
        }
    )
    partial = snap.jobs[2].model_copy(
        update={
            "request": {
                **snap.jobs[2].request,
                "dependencies": [{"kind": "afterok", "job_id": "60"}],
            }
        }
    )
    lone = members[0].model_copy(update={"id": "60_0", "seq": 60, "array_parent": "60"})
    jobs = [*members, reducer, partial, lone]
    snap = snap.model_copy(update={"jobs": jobs})
    inputs = build(snap, parse_scenario({}), 0)
    specs = {j.spec.id: j.spec for j in inputs.jobs}
    assert [(d.kind.value, d.job_id) for d in specs[reducer.id].dependencies] == [("afterok", "50")]
    assert specs[partial.id].dependencies == ()  # array 60 has a member the replay lacks
    starts = run(snap, parse_scenario({}), options=RunOptions(starts=True)).starts
    assert starts[reducer.id] >= starts["50_1"] + 300


def test_array_members_are_made_alone(monkeypatch: pytest.MonkeyPatch) -> None:
    """Each member in the snapshot is made from its array's request by its index, not by
    expanding the whole array for each member (the square of its size)."""
    base = snapshot(1).jobs[0]
    arr = {**base.request, "array": {"start": 0, "stop": 5, "step": 5}}
    members = [
        base.model_copy(update={"id": f"50_{i}", "request": arr, "array_parent": "50"})
        for i in (0, 5, 3)
    ]
    monkeypatch.setattr(JobSpec, "expand_array", lambda spec: pytest.fail("expanded"))
    specs = [job_spec(m) for m in members[:2]]
    assert [(s.id, s.array_index, s.array_parent) for s in specs] == [
        ("50_0", 0, "50"),
        ("50_5", 5, "50"),
    ]
    with pytest.raises(SnapshotError, match="job 50_3: not a member of array 50"):
        job_spec(members[2])
