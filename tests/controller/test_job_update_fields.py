"""``POST /v1/jobs/{id}/update`` with a job's new name, comment, partition (queue),
dependencies and begin time (Slurm's ``scontrol update JobId=… Name=… Comment=…
Partition=… Dependency=… StartTime=…``; controller/updates.py): what a waiting job takes,
what a running one takes (name and comment) and refuses, the checks a submission would
get, arrays, authorisation, and the store that a restarted controller recovers from."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from fastapi.testclient import TestClient
from tests.builders import Clock
from tests.controller.conftest import one_node_controller
from tests.controller.test_cancel_filters import people_with_bob_and_uma
from tests.controller.test_job_actions_review import tenancy_controller
from tests.controller.test_job_holds import finish, launched, submit, view

from fusesched.api.app import create_app
from fusesched.controller.service import Controller
from fusesched.model.job import Dependency, DependencyKind
from fusesched.model.phases import JobPhase


def update(client: TestClient, job_id: str, **body: Any) -> Any:
    return client.post(f"/v1/jobs/{job_id}/update", json=body)


def running_and_waiting(ctl: Controller, client: TestClient) -> tuple[str, str, str]:
    """A whole-node job that runs (its id and its task's), and one that waits behind it."""
    running = submit(client, name="first")["id"]
    task = launched(ctl)[running]
    waiting = submit(client, name="second", comment="old")["id"]
    ctl.run_cycle()
    return running, task, waiting


def test_a_waiting_jobs_name_comment_and_partition_change(
    ctl: Controller, client: TestClient
) -> None:
    _, _, job = running_and_waiting(ctl, client)
    body = {"name": "renamed", "comment": "see ticket 7", "queue": "debug"}
    assert update(client, job, **body).json() == {"updated": [job]}
    shown = view(client, job)
    assert (shown["name"], shown["comment"], shown["queue"]) == ("renamed", "see ticket 7", "debug")
    spec = ctl.core.jobs[job].spec
    assert (spec.name, spec.queue) == ("renamed", "debug")
    listed = client.get("/v1/jobs", params={"name": "renamed"}).json()  # (the row's column)
    assert [j["id"] for j in listed] == [job]
    [event] = [
        e.event for e in ctl.persist.store.events_for_job(job) if e.event.kind == "JobUpdated"
    ]
    assert event.data == {"name": "renamed", "comment": "see ticket 7", "queue": "debug"}
    assert update(client, job, name="", comment="").status_code == 200  # cleared, as Slurm's
    assert (view(client, job)["name"], view(client, job)["comment"]) == ("", "")


def test_a_running_job_changes_its_name_and_comment_only(
    ctl: Controller, client: TestClient
) -> None:
    job, _, _ = running_and_waiting(ctl, client)
    assert update(client, job, name="still-running", comment="c").json() == {"updated": [job]}
    assert view(client, job)["name"] == ctl.core.jobs[job].spec.name == "still-running"
    assert update(client, job, queue="default").status_code == 200  # its own: no change
    for body in ({"queue": "other"}, {"dependencies": []}, {"begin_time": 5000.0}):
        answer = update(client, job, **body)
        assert answer.status_code == 409, answer.text
        assert "is running: its" in answer.text and "cannot change" in answer.text
    assert ctl.core.jobs[job].phase is JobPhase.RUNNING


def test_new_dependencies_hold_a_waiting_job_and_an_empty_list_clears_them(
    ctl: Controller, client: TestClient
) -> None:
    _, task, job = running_and_waiting(ctl, client)
    third = submit(client)["id"]
    ctl.run_cycle()
    deps = [{"kind": "afterok", "job_id": third}]
    assert update(client, job, dependencies=deps).json() == {"updated": [job]}
    rec = ctl.core.jobs[job]
    assert (rec.phase, rec.waiting_on) == (JobPhase.PENDING, {third})
    assert view(client, job)["dependencies"] == deps
    finish(ctl, task)
    assert list(launched(ctl)) == [third]  # the job that waits for it does not start
    assert view(client, job)["reason"] == f"Dependency: job {third}"
    assert update(client, job, dependencies=[]).json() == {"updated": [job]}
    assert ctl.core.jobs[job].phase is JobPhase.QUEUED and ctl.jobs[job].spec.dependencies == ()
    stored = ctl.persist.store.get_job(job)
    assert stored is not None and stored.job.request["dependencies"] == []


@pytest.mark.parametrize(
    ("deps", "says"),
    [
        ([{"kind": "afterok", "job_id": "999"}], "dependency on unknown job '999'"),
        ([{"kind": "afterok", "job_id": "SELF"}], "cannot depend on itself"),
        ([{"kind": "afternotok", "job_id": "DONE"}], "completed: afternotok can never be met"),
        ([{"kind": "singleton"}], "a singleton dependency needs a job name"),
    ],
)
def test_dependencies_a_submission_would_be_refused_are_a_409(
    ctl: Controller, client: TestClient, deps: list[dict[str, str]], says: str
) -> None:
    done = submit(client)["id"]
    finish(ctl, launched(ctl)[done])
    submit(client)
    launched(ctl)
    job = submit(client)["id"]
    ctl.run_cycle()
    named = [{k: v.replace("SELF", job).replace("DONE", done) for k, v in d.items()} for d in deps]
    answer = update(client, job, dependencies=named, priority=-3)
    assert answer.status_code == 409 and says in answer.text, answer.text
    assert ctl.jobs[job].spec.dependencies == () and ctl.jobs[job].spec.priority == 0
    assert ctl.core.jobs[job].phase is JobPhase.QUEUED


def test_a_dependency_circle_is_refused(ctl: Controller, client: TestClient) -> None:
    submit(client)
    launched(ctl)
    first = submit(client)["id"]
    second = submit(client, dependencies=[{"kind": "afterany", "job_id": first}])["id"]
    ctl.run_cycle()
    answer = update(client, first, dependencies=[{"kind": "afterany", "job_id": second}])
    assert answer.status_code == 409 and "circular dependency" in answer.text


def test_a_dependency_on_a_job_submitted_since_the_last_cycle_waits_for_it(
    ctl: Controller, client: TestClient
) -> None:
    _, _, job = running_and_waiting(ctl, client)
    fresh = submit(client)["id"]  # not in the core until the next cycle
    deps = [{"kind": "afterok", "job_id": fresh}]
    assert update(client, job, dependencies=deps).json() == {"updated": [job]}
    ctl.run_cycle()
    assert ctl.core.jobs[job].waiting_on == {fresh}
    circle = submit(client, dependencies=[{"kind": "afterany", "job_id": job}])["id"]
    answer = update(client, fresh, dependencies=[{"kind": "afterany", "job_id": circle}])
    assert answer.status_code == 409 and "circular dependency" in answer.text, answer.text


def test_a_begin_time_keeps_a_job_back_and_now_lets_it_go(
    ctl: Controller, client: TestClient, clock: Clock
) -> None:
    job = submit(client)["id"]
    assert update(client, job, begin_time=clock.now + 3600).json() == {"updated": [job]}
    assert launched(ctl) == {}
    assert view(client, job)["reason"].startswith("begin time ")
    assert view(client, job)["begin_time"] == clock.now + 3600  # (scontrol's EligibleTime)
    assert update(client, job, begin_time=clock.now).json() == {"updated": [job]}
    assert view(client, job)["begin_time"] == clock.now
    assert list(launched(ctl)) == [job]


def test_a_begin_time_past_the_deadline_is_refused(ctl: Controller, client: TestClient) -> None:
    submit(client)
    launched(ctl)
    job = submit(client, walltime_s=60, deadline=5000)["id"]
    answer = update(client, job, begin_time=4990.0)
    assert answer.status_code == 409 and "the begin time and the deadline" in answer.text


@pytest.mark.parametrize(
    ("body", "says"),
    [
        ({"name": "a\nb"}, "one line"),
        ({"comment": "x" * 1025}, "at most 1024"),
        ({"comment": "\u001b[31m"}, "control character"),
        ({"queue": ""}, "at least 1 character"),
        ({"dependencies": [{"kind": "afterok"}]}, "needs job_id"),
        ({"dependencies": [{"kind": "after?", "job_id": "1"}]}, "kind"),
        ({"begin_time": -1}, "greater than or equal to 0"),
    ],
)
def test_bad_values_are_a_422(
    ctl: Controller, client: TestClient, body: dict[str, Any], says: str
) -> None:
    job = submit(client)["id"]
    answer = update(client, job, **body)
    assert answer.status_code == 422 and says in answer.text, answer.text


def test_an_array_changes_every_waiting_member_and_names_running_ones_too(
    ctl: Controller, client: TestClient
) -> None:
    made = submit(client, array={"start": 0, "stop": 2})
    parent, members = made["id"], made["ids"]
    launched(ctl)  # member 0 runs, the others wait
    assert update(client, parent, name="arr").json() == {"updated": members}
    assert [ctl.jobs[m].spec.name for m in members] == ["arr"] * 3
    assert update(client, parent, queue="debug").json() == {"updated": members[1:]}
    assert [ctl.jobs[m].spec.queue for m in members] == ["default", "debug", "debug"]


def test_a_partition_the_tenancy_does_not_know_is_refused(tmp_path: Path, clock: Clock) -> None:
    ctl = tenancy_controller(tmp_path, clock)
    try:
        client = TestClient(create_app(ctl), raise_server_exceptions=False)
        submit(client, tenant="ml", queue="train")
        launched(ctl)
        job = submit(client, tenant="ml", queue="train")["id"]
        ctl.run_cycle()
        answer = update(client, job, queue="nope", name="x")
        assert answer.status_code == 409 and "unknown queue 'nope'" in answer.text
        assert ctl.jobs[job].spec.name == "" and ctl.jobs[job].spec.queue == "train"
    finally:
        ctl.persist.close()


def test_a_user_changes_only_their_own_jobs(ctl: Controller) -> None:
    people = people_with_bob_and_uma(ctl)
    mine = people.submit("alice")["id"]
    bobs = people.submit("bob")["id"]
    path = f"/v1/jobs/{bobs}/update"
    assert people.post("alice", path, {"name": "mine now"}).status_code == 403
    assert people.post("uma", path, {"name": "x"}).status_code == 404  # (another tenant's)
    assert people.post("bob", path, {"name": "bobs", "queue": "debug"}).status_code == 200
    assert people.post("tina", f"/v1/jobs/{mine}/update", {"comment": "by t's admin"}).json() == {
        "updated": [mine]
    }
    assert people.job(bobs)["name"] == "bobs" and people.job(mine)["comment"] == "by t's admin"


def test_the_changes_outlive_a_controller_restart(tmp_path: Path, clock: Clock) -> None:
    ctl = one_node_controller(tmp_path, clock)
    client = TestClient(create_app(ctl), raise_server_exceptions=False)
    first = submit(client)["id"]
    launched(ctl)
    job = submit(client)["id"]
    ctl.run_cycle()
    body = {
        "name": "kept",
        "comment": "kept too",
        "queue": "debug",
        "dependencies": [{"kind": "afterany", "job_id": first}],
        "begin_time": clock.now + 60,
    }
    assert update(client, job, **body).json() == {"updated": [job]}
    ctl.persist.close()
    again = one_node_controller(tmp_path, clock)  # recovered with the new values
    try:
        spec = again.jobs[job].spec
        assert (spec.name, spec.queue, spec.begin_time) == ("kept", "debug", clock.now + 60)
        assert spec.dependencies == (Dependency(DependencyKind.AFTER_ANY, first),)
        assert again.jobs[job].request.comment == "kept too"
    finally:
        again.persist.close()


def test_updates_made_since_the_last_cycle_reach_the_core_in_their_order(
    ctl: Controller, client: TestClient
) -> None:
    _, _, job = running_and_waiting(ctl, client)
    fresh = submit(client)["id"]  # not in the core until the next cycle: the change waits
    deps = [{"kind": "afterok", "job_id": fresh}]
    assert update(client, job, dependencies=deps, priority=-5).status_code == 200
    assert update(client, job, dependencies=[], priority=-9).status_code == 200
    ctl.run_cycle()
    rec = ctl.core.jobs[job]
    assert (rec.waiting_on, rec.spec.dependencies, rec.spec.priority) == (set(), (), -9)
    assert rec.phase is JobPhase.QUEUED and ctl.jobs[job].spec.priority == -9
