"""A dependency on some members of an array, in Slurm's range syntax (``afterok:12_[1-2]``,
``12_[1,3]``): read as a dependency on each of those members, the waiting job starts once
they are done, whatever the array's other members do."""

from __future__ import annotations

from fastapi.testclient import TestClient
from tests.controller.test_array_dependencies import QUARTER, array, shown
from tests.controller.test_dependency_kinds import exit_task, launched, submit

from fusesched.controller.service import Controller
from fusesched.submit.syntax import parse_dependencies


def slurm(text: str) -> list[dict[str, str]]:
    """``-d text`` as the API request's dependencies."""
    return [d.model_dump(mode="json") for d in parse_dependencies(text)]


def test_afterok_on_a_range_waits_for_those_members(ctl: Controller, client: TestClient) -> None:
    arr, members = array(client, stop=3)  # four one-CPU members fill n0
    reducer = submit(client, QUARTER, dependencies=slurm(f"afterok:{arr}_[1-2]"))
    tasks = launched(ctl)
    assert set(tasks) == set(members)
    assert ctl.core.jobs[reducer].waiting_on == {members[1], members[2]}
    exit_task(ctl, tasks[members[1]])
    exit_task(ctl, tasks[members[0]])
    assert launched(ctl) == {}  # room for it, but member 2 runs on
    exit_task(ctl, tasks[members[2]])
    assert list(launched(ctl)) == [reducer]  # member 3 still runs: not waited for


def test_a_list_in_the_range_and_a_failing_member(ctl: Controller, client: TestClient) -> None:
    arr, members = array(client, stop=3)
    reducer = submit(client, QUARTER, dependencies=slurm(f"afterok:{arr}_[0,2-3]"))
    tasks = launched(ctl)
    exit_task(ctl, tasks[members[1]], 1)  # not in the range: no matter
    assert shown(client, reducer)[0] == "Pending"
    exit_task(ctl, tasks[members[3]], 2)
    assert shown(client, reducer) == ("Cancelled", f"dependency {members[3]} ended failed")


def test_a_range_past_the_array_is_refused(client: TestClient) -> None:
    arr, _ = array(client, stop=1)
    answer = client.post(
        "/v1/jobs", json={"groups": [QUARTER], "dependencies": slurm(f"afterok:{arr}_[1-2]")}
    )
    assert answer.status_code == 400
    assert answer.json() == {"detail": f"dependency on unknown job '{arr}_2'"}
