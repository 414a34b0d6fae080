"""A log's end: agents mark it (an empty chunk at the log's length), and the log routes say
when a log is complete, so readers stop exactly at its end instead of waiting for quiet. A log
whose mark can never come (a task lost with its node, an agent older than marks or restarted,
a job that ended before a controller restart) reads as complete but unconfirmed; a mark that
is only late (a stalled controller, an agent that cannot deliver) is waited for (scripted
heartbeats)."""

from __future__ import annotations

import os
from pathlib import Path
from types import SimpleNamespace
from typing import Any

from fastapi.testclient import TestClient
from tests.builders import Clock
from tests.controller.conftest import ONE_NODE, one_node_controller

from fusesched.api.app import create_app
from fusesched.api.log_routes import MIN_READ, fair_shares
from fusesched.api.wire import Heartbeat, LogChunk, NodeInventory, TaskReport, TaskState
from fusesched.client_base import LOG_COMPLETE, LOG_CONFIRMED, NEXT_OFFSET
from fusesched.controller import failures, federation
from fusesched.controller.logs import SILENT_BEATS
from fusesched.controller.service import Controller


def start(ctl: Controller, client: TestClient, replicas: int = 1) -> tuple[str, list[str]]:
    """Submit a job of ``replicas`` tasks and have ``n0`` take them: (job id, task ids)."""
    group = {"resources": {"cpu": "1"}, "argv": ["true"], "replicas": replicas}
    job = client.post("/v1/jobs", json={"groups": [group]}).json()["id"]
    ctl.run_cycle()
    launches = ctl.heartbeat(Heartbeat(node="n0", running=[]), wait_s=0).launch
    tasks = [launch.task_id for launch in launches]
    running = [
        TaskReport(task_id=t, state=TaskState.RUNNING, pid=100 + i) for i, t in enumerate(tasks)
    ]
    ctl.heartbeat(Heartbeat(node="n0", reports=running), wait_s=0)
    return job, tasks


def beat(*chunks: LogChunk, ended: tuple[str, ...] = ()) -> Heartbeat:
    reports = [TaskReport(task_id=t, state=TaskState.EXITED, exit_code=0) for t in ended]
    return Heartbeat(node="n0", logs=list(chunks), reports=reports)


def idle() -> Heartbeat:
    """A beat of n0's agent that speaks of no task (a quick report of another's output)."""
    return Heartbeat(node="n0")


def chunk(task_id: str, offset: int, data: str) -> LogChunk:
    return LogChunk(task_id=task_id, offset=offset, data=data)


def read(client: TestClient, job: str, task: str | None = None) -> tuple[str, str, str]:
    """(text, X-Log-Complete, X-Log-Confirmed) of the log from 0."""
    params = {"task": task} if task else {}
    answer = client.get(f"/v1/jobs/{job}/logs", params=params)
    assert answer.status_code == 200, answer.text
    return answer.text, answer.headers[LOG_COMPLETE], answer.headers[LOG_CONFIRMED]


def test_a_log_is_complete_once_its_agent_marks_its_end(
    ctl: Controller, client: TestClient
) -> None:
    job, (task,) = start(ctl, client)
    ctl.heartbeat(beat(chunk(task, 0, "hello ")), wait_s=0)
    assert read(client, job, task) == ("hello ", "false", "false")  # it runs
    # the exit, its last output and the mark in one beat (as an agent sends them)
    ctl.heartbeat(beat(chunk(task, 6, "wörld"), chunk(task, 12, ""), ended=(task,)), wait_s=0)
    assert read(client, job, task) == ("hello wörld", "true", "true")
    assert read(client, job) == ("hello wörld", "false", "false")  # the job has not ended yet
    ctl.run_cycle()
    assert client.get(f"/v1/jobs/{job}").json()["state"] == "Completed"
    assert read(client, job) == ("hello wörld", "true", "true")
    again = client.get(f"/v1/jobs/{job}/logs", params={"offset": 12})
    assert (again.text, again.headers[NEXT_OFFSET], again.headers[LOG_COMPLETE]) == (
        "",
        "12",
        "true",
    )


def test_a_mark_ahead_of_the_output_waits_for_it(ctl: Controller, client: TestClient) -> None:
    """A mark says the log's length: until all of it is here, the log is not complete."""
    job, (task,) = start(ctl, client)
    ctl.heartbeat(beat(chunk(task, 0, "abc"), chunk(task, 6, ""), ended=(task,)), wait_s=0)
    assert read(client, job, task) == ("abc", "false", "false")
    ctl.heartbeat(beat(chunk(task, 3, "def")), wait_s=0)
    assert read(client, job, task) == ("abcdef", "true", "true")


def test_a_task_that_wrote_nothing_has_an_empty_complete_log(
    ctl: Controller, client: TestClient
) -> None:
    job, (task,) = start(ctl, client)
    assert read(client, job, task) == ("", "false", "false")  # known: no 404 while it runs
    ctl.heartbeat(beat(chunk(task, 0, ""), ended=(task,)), wait_s=0)
    assert read(client, job, task) == ("", "true", "true")
    assert client.get(f"/v1/jobs/{job}/logs", params={"task": f"{job}.main.9"}).status_code == 404


def test_without_a_mark_the_log_is_complete_once_its_agent_has_had_its_chance(
    ctl: Controller, client: TestClient, clock: Clock
) -> None:
    """An agent older than marks: its task's log is taken as complete, unconfirmed, once the
    agent has sent beats that no longer speak of the task (all of its output is sent). Not
    by the clock: while no beat comes (a stalled controller, an agent that cannot deliver
    for a while) the mark may still come, and the log stays open however long that lasts."""
    job, (task,) = start(ctl, client)
    ctl.heartbeat(beat(chunk(task, 0, "old agent\n"), ended=(task,)), wait_s=0)
    ctl.run_cycle()
    assert read(client, job, task) == ("old agent\n", "false", "false")
    clock.now += 3600.0  # an hour without a beat, nor a byte written: still open
    past = ctl.logs.path(task).stat().st_mtime - 3600.0
    os.utime(ctl.logs.path(task), (past, past))
    assert read(client, job, task) == ("old agent\n", "false", "false")
    ctl.heartbeat(beat(chunk(task, 10, "late\n")), wait_s=0)  # still sending: open
    for _ in range(SILENT_BEATS - 1):  # (a beat put together before the exit may come late)
        ctl.heartbeat(idle(), wait_s=0)
        assert read(client, job, task)[1:] == ("false", "false")
    ctl.heartbeat(idle(), wait_s=0)
    assert read(client, job, task) == ("old agent\nlate\n", "true", "false")
    assert read(client, job) == ("old agent\nlate\n", "true", "false")


def test_a_late_mark_is_waited_for_while_beats_still_bring_output(
    ctl: Controller, client: TestClient
) -> None:
    """A large last burst goes over several beats after the exit: each brings some of it, so
    none of them counts as the agent having forgotten the task; then the mark comes."""
    job, (task,) = start(ctl, client)
    ctl.heartbeat(beat(chunk(task, 0, "a" * 10), ended=(task,)), wait_s=0)
    for i in range(1, 2 * SILENT_BEATS + 1):
        ctl.heartbeat(idle(), wait_s=0)  # (another task's beat in between)
        ctl.heartbeat(beat(chunk(task, 10 * i, "a" * 10)), wait_s=0)
        assert read(client, job, task)[1] == "false"
    size = 10 * (2 * SILENT_BEATS + 1)
    ctl.heartbeat(beat(chunk(task, size, "")), wait_s=0)
    assert read(client, job, task) == ("a" * size, "true", "true")


def test_a_restarted_agent_forgets_the_mark_the_log_ends_unconfirmed(
    ctl: Controller, client: TestClient
) -> None:
    """The agent restarted between the task's end and its mark: the new one never sends it;
    its beats, which do not speak of the task, end the wait."""
    job, (task, other) = start(ctl, client, replicas=2)
    ctl.heartbeat(beat(chunk(task, 0, "before the restart\n"), ended=(task,)), wait_s=0)
    ctl.register(NodeInventory.model_validate(ONE_NODE))  # (the other task is lost with it)
    assert read(client, job, task)[1] == "false"
    for _ in range(SILENT_BEATS):
        ctl.heartbeat(Heartbeat(node="n0", running=[]), wait_s=0)
    assert read(client, job, task) == ("before the restart\n", "true", "false")
    assert read(client, job, other) == ("", "true", "false")  # lost: at once


def test_a_task_of_an_ended_job_still_being_stopped_waits_for_full_beats(
    ctl: Controller, client: TestClient
) -> None:
    """A task not known to have ended (a helper its job's end is stopping) keeps its log open
    while full beats list it as running, though quick ones do not speak of it."""
    job, (task,) = start(ctl, client)
    ctl.heartbeat(beat(chunk(task, 0, "x"), ended=(task,)), wait_s=0)
    ctl.run_cycle()
    helper = ctl.finished[task]
    helper.state = "running"  # (as a helper of the job, still being stopped)
    for _ in range(2 * SILENT_BEATS):
        ctl.heartbeat(idle(), wait_s=0)
        ctl.heartbeat(Heartbeat(node="n0", running=[task]), wait_s=0)
    assert read(client, job, task)[1] == "false"
    for _ in range(SILENT_BEATS):
        ctl.heartbeat(Heartbeat(node="n0", running=[]), wait_s=0)
    assert read(client, job, task) == ("x", "true", "false")


def test_a_task_lost_with_its_node_is_complete_at_once_unconfirmed(
    ctl: Controller, client: TestClient, clock: Clock
) -> None:
    job, (task,) = start(ctl, client)
    ctl.heartbeat(beat(chunk(task, 0, "half a li")), wait_s=0)
    with ctl.work:
        failures.node_lost(ctl, "n0", clock())
    assert read(client, job, task) == ("half a li", "true", "false")


def test_a_log_from_before_a_restart_reads_as_complete(tmp_path: Path, clock: Clock) -> None:
    first = one_node_controller(tmp_path, clock)
    api = TestClient(create_app(first))
    marked, (a,) = start(first, api)
    first.heartbeat(beat(chunk(a, 0, "marked\n"), chunk(a, 7, ""), ended=(a,)), wait_s=0)
    first.run_cycle()
    unmarked, (b,) = start(first, api)
    first.heartbeat(beat(chunk(b, 0, "unmarked\n"), ended=(b,)), wait_s=0)
    first.run_cycle()
    first.persist.close()

    again = one_node_controller(tmp_path, clock)  # the same store and log folder
    try:
        api = TestClient(create_app(again))
        assert read(api, marked) == ("marked\n", "true", "true")
        # its job ended and no agent can add to it any more, but none said where it ends
        assert read(api, unmarked, b) == ("unmarked\n", "true", "false")
    finally:
        again.persist.close()


def test_many_tasks_in_one_request(ctl: Controller, client: TestClient) -> None:
    job, tasks = start(ctl, client, replicas=3)
    t0, t1, t2 = tasks
    ctl.heartbeat(beat(chunk(t0, 0, "zero\n"), chunk(t1, 0, "one\n")), wait_s=0)
    ctl.heartbeat(beat(chunk(t0, 5, ""), ended=(t0,)), wait_s=0)
    answer = client.post(f"/v1/jobs/{job}/logs", json={"all": True})
    assert answer.status_code == 200, answer.text
    body = answer.json()
    assert body["job_id"] == job and body["state"] == "Running" and body["more"] is False
    got = {t["task_id"]: (t["text"], t["next_offset"], t["complete"]) for t in body["tasks"]}
    assert got == {t0: ("zero\n", 5, True), t1: ("one\n", 4, False), t2: ("", 0, False)}
    # from where each read stopped: only the new output
    ctl.heartbeat(beat(chunk(t1, 4, "uno\n"), chunk(t1, 8, ""), ended=(t1,)), wait_s=0)
    later = client.post(f"/v1/jobs/{job}/logs", json={"offsets": {t1: 4, t2: 0}}).json()
    assert [
        (t["task_id"], t["offset"], t["text"], t["complete"], t["confirmed"])
        for t in later["tasks"]
    ] == [
        (t1, 4, "uno\n", True, True),
        (t2, 0, "", False, False),
    ]


def test_many_tasks_share_max_bytes(ctl: Controller, client: TestClient) -> None:
    """An answer carries at most ``max_bytes`` of text, shared fairly: a task with little new
    output gets all of it, the others split the rest; asking again at once gets the rest."""
    job, (t0, t1, t2) = start(ctl, client, replicas=3)
    texts = {t0: "x" * 100_000, t1: "y\n", t2: "z" * 50_000}
    ctl.heartbeat(beat(*(chunk(t, 0, v) for t, v in texts.items())), wait_s=0)
    marks = (chunk(t, len(v), "") for t, v in texts.items())
    ctl.heartbeat(beat(*marks, ended=(t0, t1, t2)), wait_s=0)
    offsets = dict.fromkeys(texts, 0)
    got = dict.fromkeys(texts, "")
    rounds = 0
    while True:
        body = {"offsets": offsets, "max_bytes": 60_000}
        answer = client.post(f"/v1/jobs/{job}/logs", json=body).json()
        rounds += 1
        assert sum(len(t["text"]) for t in answer["tasks"]) <= 60_000
        if rounds == 1:
            shares = {t["task_id"]: len(t["text"]) for t in answer["tasks"]}
            assert shares == {t0: 29_999, t1: 2, t2: 29_999}
        for t in answer["tasks"]:
            got[t["task_id"]] += t["text"]
            offsets[t["task_id"]] = t["next_offset"]
            if t["complete"]:
                del offsets[t["task_id"]]
        if not answer["more"]:
            break
    assert got == texts and offsets == {} and rounds == 3


def test_fair_shares() -> None:
    assert fair_shares([10, 20], 100) == [10, 20]
    assert fair_shares([100, 1, 100], 51) == [25, 1, 25]
    assert sum(fair_shares([5_000] * 256, 4 << 20)) == 256 * 5_000
    assert sum(fair_shares([50_000] * 256, 4 << 20)) <= 4 << 20
    # however small the budget, each task with output gets on by a character
    assert fair_shares([0, 9, 9], 1) == [0, MIN_READ, MIN_READ]


def test_a_tiny_max_bytes_still_gets_on(ctl: Controller, client: TestClient) -> None:
    job, (task,) = start(ctl, client)
    ctl.heartbeat(beat(chunk(task, 0, "wörld"), chunk(task, 6, ""), ended=(task,)), wait_s=0)
    offset, text = 0, ""
    for _ in range(6):
        body = {"offsets": {task: offset}, "max_bytes": 1}
        (got,) = client.post(f"/v1/jobs/{job}/logs", json=body).json()["tasks"]
        text, offset = text + got["text"], got["next_offset"]
        if got["complete"]:
            break
    assert (text, offset) == ("wörld", 6)


def test_bad_requests_for_many_tasks(ctl: Controller, client: TestClient) -> None:
    job, (task,) = start(ctl, client)
    other, _ = start(ctl, client)
    cases = {
        f"{other}.main.0": 400,  # another job's task
        "../../etc": 400,
        f"{job}.main/../0": 400,  # not a name a log can have
    }
    for name, status in cases.items():
        answer = client.post(f"/v1/jobs/{job}/logs", json={"offsets": {name: 0}})
        assert answer.status_code == status, (name, answer.text)
        assert "detail" in answer.json()
    for body in ({"offsets": {task: -1}}, {"max_bytes": 0}, {"tasks": [task]}):
        assert client.post(f"/v1/jobs/{job}/logs", json=body).status_code == 422, body
    assert client.post("/v1/jobs/999/logs", json={}).status_code == 404


def test_a_task_stopped_before_any_agent_had_it_is_complete_at_once(
    ctl: Controller, client: TestClient
) -> None:
    group = {"resources": {"cpu": "1"}, "argv": ["true"]}
    job = client.post("/v1/jobs", json={"groups": [group]}).json()["id"]
    ctl.run_cycle()  # placed: its launch waits for n0's next beat
    (task,) = ctl.tasks
    assert read(client, job, task) == ("", "false", "false")
    assert client.post(f"/v1/jobs/{job}/cancel").status_code == 202
    ctl.run_cycle()
    ctl.run_cycle()
    assert client.get(f"/v1/jobs/{job}").json()["state"] == "Cancelled"
    assert read(client, job, task) == ("", "true", "true")  # nothing to wait for
    assert read(client, job) == ("", "true", "true")  # (no warning that its end may be missing)


def test_the_jobs_output_is_its_first_tasks_even_before_that_one_writes(
    ctl: Controller, client: TestClient
) -> None:
    """The job's output is its first task's: another task's output is never shown in its
    place while the first has written nothing (it would vanish once the first's log is made,
    by its output or its end mark)."""
    job, (t0, t1) = start(ctl, client, replicas=2)
    ctl.heartbeat(beat(chunk(t1, 0, "second\n")), wait_s=0)
    assert read(client, job) == ("", "false", "false")
    ctl.heartbeat(beat(chunk(t0, 0, ""), chunk(t1, 7, ""), ended=(t0, t1)), wait_s=0)
    ctl.run_cycle()
    assert read(client, job) == ("", "true", "true")
    assert read(client, job, t1) == ("second\n", "true", "true")


def requeued(ctl: Controller, client: TestClient, job: str, task: str) -> str:
    """Requeue the running job; its task is killed (its agent says so, with no mark yet) and
    its next run starts: that run's task."""
    assert client.post(f"/v1/jobs/{job}/requeue", json={}).json()["requeued"] == [job]
    report = TaskReport(task_id=task, state=TaskState.EXITED, exit_code=-15)
    ctl.heartbeat(Heartbeat(node="n0", reports=[report], running=[]), wait_s=0)
    ctl.run_cycle()
    ctl.run_cycle()
    (launch,) = ctl.heartbeat(Heartbeat(node="n0", running=[]), wait_s=0).launch
    ctl.heartbeat(beat(), wait_s=0)
    again = TaskReport(task_id=launch.task_id, state=TaskState.RUNNING, pid=200)
    ctl.heartbeat(Heartbeat(node="n0", reports=[again]), wait_s=0)
    return launch.task_id


def test_a_requeued_jobs_runs_follow_one_another_whole(ctl: Controller, client: TestClient) -> None:
    """The job's output is its runs' one after another; a run's last output may come after
    the next run has begun to write (its agent still sending it): the next run's output is
    shown only once the run before it is complete, so the late bytes land where readers'
    offsets expect them. The job's output is complete at the job's end, not at a run's."""
    job, (first,) = start(ctl, client)
    ctl.heartbeat(beat(chunk(first, 0, "run 0\n")), wait_s=0)
    second = requeued(ctl, client, job, first)
    ctl.heartbeat(beat(chunk(first, 6, "stopp")), wait_s=0)  # (its agent still sends it)
    ctl.heartbeat(beat(chunk(second, 0, "run 1\n")), wait_s=0)
    answer = client.get(f"/v1/jobs/{job}/logs")
    assert (answer.text, answer.headers[NEXT_OFFSET]) == ("run 0\nstopp", "11")
    ctl.heartbeat(beat(chunk(first, 11, "ed\n"), chunk(first, 14, "")), wait_s=0)
    later = client.get(f"/v1/jobs/{job}/logs", params={"offset": 11})
    assert (later.text, later.headers[LOG_COMPLETE]) == ("ed\nrun 1\n", "false")
    ctl.heartbeat(beat(chunk(second, 6, ""), ended=(second,)), wait_s=0)
    ctl.run_cycle()
    assert read(client, job) == ("run 0\nstopped\nrun 1\n", "true", "true")


def test_a_run_this_controller_no_longer_knows_does_not_hold_back_the_next(
    ctl: Controller, client: TestClient
) -> None:
    """A run's task the controller forgot (a restart since: no agent can add to its log any
    more) reads as complete, unconfirmed, once the job's next run is under way."""
    job, (first,) = start(ctl, client)
    ctl.heartbeat(beat(chunk(first, 0, "run 0\n")), wait_s=0)
    second = requeued(ctl, client, job, first)
    ctl.heartbeat(beat(chunk(second, 0, "run 1\n")), wait_s=0)
    del ctl.finished[first]  # (as after a controller restart)
    assert read(client, job, first) == ("run 0\n", "true", "false")
    assert read(client, job) == ("run 0\nrun 1\n", "false", "false")


def test_odd_bodies_and_names_are_refused_not_failed(ctl: Controller, client: TestClient) -> None:
    job, (task,) = start(ctl, client)
    url = f"/v1/jobs/{job}/logs"
    bodies: list[Any] = [
        {"offsets": {task: "a"}},
        {"offsets": {task: 1.5}},
        {"offsets": {task: 1 << 63}},
        {"offsets": [task]},
        {"max_bytes": -1},
        {"max_bytes": 1 << 40},
        {"all": "maybe"},
        [],
        "text",
    ]
    for body in bodies:
        assert client.post(url, json=body).status_code == 422, body
    assert (
        client.post(url, content=b"{", headers={"content-type": "application/json"}).status_code
        == 422
    )
    for name in (f"{job}.main.\u00b2", f"{job}.main.\u0663", f"{job}-r\u00b2.main.0", "é"):
        answer = client.post(url, json={"offsets": {name: 0}})
        assert answer.status_code == 400, (name, answer.text)
    for name in (f"{job}.main." + "9" * 5000, f"{job}-r" + "1" * 5000 + ".main.0"):
        assert client.post(url, json={"offsets": {name: 0}}).status_code == 400, name[:20]
    # a huge offset reads nothing, and says so plainly
    (far,) = client.post(url, json={"offsets": {task: 1 << 62}}).json()["tasks"]
    assert (far["text"], far["next_offset"]) == ("", 1 << 62)
    assert client.get(url, params={"task": "\u00e9", "offset": 1 << 62}).status_code == 404
    assert client.get(f"/v1/jobs/{job}\u00b2/logs").status_code == 404


def test_an_external_pools_empty_copy_is_no_end_mark(ctl: Controller) -> None:
    """A pool's copy of the cluster's output files is not an agent's chunk: an empty one
    makes the log (listed, empty) but marks no end."""
    task: Any = SimpleNamespace(launch=SimpleNamespace(task_id="77.main.0"))
    federation._write_logs(ctl, task, {"stdout": b""})
    assert ctl.logs.tasks("77") == ["77.main.0"] and ctl.logs.end("77.main.0") is None
    federation._write_logs(ctl, task, {"stdout": b"out\n", "stderr": b"err\n"})
    assert ctl.logs.read("77.main.0") == ("out\nerr\n", 8)
    assert ctl.logs.end("77.main.0") is None
