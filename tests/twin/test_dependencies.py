"""The twin keeps dependencies on jobs in the snapshot, and a singleton (which names none)."""

from __future__ import annotations

from tests.twin.builders import snapshot

from fusesched.twin.build import build
from fusesched.twin.scenario import parse_scenario


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
