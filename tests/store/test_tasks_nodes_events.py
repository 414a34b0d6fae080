"""Tasks, nodes and events."""

from __future__ import annotations

from typing import Any

import pytest

from fusesched.model.node import NodeState
from fusesched.store import (
    DuplicateTask,
    EventRecord,
    JobChange,
    JobState,
    Store,
    TaskChange,
    UnknownJob,
    UnknownNode,
    UnknownTask,
)
from store.rows import event, job, node, task

# --------------------------------------------------------------------------- tasks


def test_tasks_round_trip_in_group_and_index_order(store: Store) -> None:
    store.add_jobs([job(1)])
    rows = [task("1", 10, "worker"), task("1", 2, "worker"), task("1", 0, "launcher")]
    assert store.add_tasks(rows) == 3
    assert store.tasks_for_job("1") == [rows[2], rows[1], rows[0]]
    assert store.tasks_for_job("2") == []


def test_task_updates_apply_in_bulk(store: Store) -> None:
    store.add_jobs([job(1)])
    store.add_tasks([task("1", i) for i in range(3)])
    changes = [
        TaskChange(f"1.main.{i}", state="Running", node=f"n{i}", pid=100 + i, start_time=2.0)
        for i in range(3)
    ]
    changes.append(TaskChange("1.main.2", state="Failed", exit_code=-9, end_time=3.0))
    assert store.update_tasks(changes) == 3
    got = {t.task_id: t for t in store.tasks_for_job("1")}
    assert (got["1.main.0"].state, got["1.main.0"].node, got["1.main.0"].pid) == (
        JobState.RUNNING,
        "n0",
        100,
    )
    assert (got["1.main.2"].state, got["1.main.2"].exit_code, got["1.main.2"].pid) == (
        JobState.FAILED,
        -9,
        102,
    )


def test_tasks_on_a_node_by_state(store: Store) -> None:
    store.add_jobs([job(1), job(2)])
    store.add_tasks(
        [
            task("1", 0, node="a", state="Running"),
            task("1", 1, node="b", state="Running"),
            task("2", 0, node="a", state="Completed"),
            task("2", 1, node="a", state="Pending"),
        ]
    )
    assert [t.task_id for t in store.tasks_on_node("a")] == ["1.main.0", "2.main.0", "2.main.1"]
    running = store.tasks_on_node("a", [JobState.RUNNING, "Pending"])
    assert [t.task_id for t in running] == ["1.main.0", "2.main.1"]
    assert store.tasks_on_node("c") == []
    with pytest.raises(ValueError, match="unknown job state 'lost'"):
        store.tasks_on_node("a", ["lost"])


def test_bad_tasks_are_refused_whole(store: Store) -> None:
    store.add_jobs([job(1)])
    store.add_tasks([task("1", 0)])
    with pytest.raises(DuplicateTask, match=r"task already exists: 1\.main\.0"):
        store.add_tasks([task("1", 1), task("1", 0)])
    with pytest.raises(DuplicateTask, match="repeated in one batch"):
        store.add_tasks([task("1", 5), task("1", 5)])
    with pytest.raises(UnknownJob, match="job not in the store: 9"):
        store.add_tasks([task("1", 2), task("9", 0)])
    with pytest.raises(UnknownTask, match=r"task not in the store: 1\.main\.7"):
        store.update_tasks([TaskChange("1.main.0", state="Running"), TaskChange("1.main.7")])
    assert [(t.task_id, t.state) for t in store.tasks_for_job("1")] == [
        ("1.main.0", JobState.PENDING)
    ]


# --------------------------------------------------------------------------- nodes


def test_nodes_register_reregister_and_list_by_name(store: Store) -> None:
    store.upsert_node(node("b"))
    store.upsert_node(node("a", state="down"))
    again = node("b", address="10.0.0.2:7070", registered_at=99.0, capacity={"cpu": "32"})
    store.upsert_node(again)
    assert store.list_nodes() == [node("a", state=NodeState.DOWN), again]
    assert store.get_node("b") == again
    assert store.get_node("z") is None


def test_node_state_and_heartbeats(store: Store) -> None:
    store.upsert_node(node("a"))
    store.upsert_node(node("b"))
    store.set_node_state("a", NodeState.DRAINING)
    store.touch_node("a", 120.0)
    store.touch_nodes({"a": 130.0, "b": 131.0})
    a, b = store.list_nodes()
    assert (a.state, a.last_heartbeat, b.state, b.last_heartbeat) == (
        NodeState.DRAINING,
        130.0,
        NodeState.UP,
        131.0,
    )


def test_unknown_nodes_and_states_are_refused(store: Store) -> None:
    store.upsert_node(node("a"))
    with pytest.raises(UnknownNode, match="node not in the store: z"):
        store.set_node_state("z", "down")
    with pytest.raises(UnknownNode, match="node not in the store: z"):
        store.touch_nodes({"a": 5.0, "z": 5.0})
    assert store.list_nodes()[0].last_heartbeat is None
    with pytest.raises(ValueError, match="unknown node state 'gone'; expected one of up"):
        store.set_node_state("a", "gone")
    with pytest.raises(ValueError, match="unknown node state"):
        node("b", state="Up")


# --------------------------------------------------------------------------- events


def test_events_are_kept_per_job_in_insertion_order(store: Store) -> None:
    rows = [
        event("JobSubmitted", "1", time=1.0, queue="cpu"),
        event("NodeAdded", None, time=1.5),
        event("JobStarted", "1", time=2.0, nodes=["a", "b"]),
        event("JobSubmitted", "2", time=2.5),
        event("JobExited", "1", time=1.9, exit_code=0),  # a late report keeps its place
    ]
    assert store.add_events(rows) == 5
    assert store.add_events([]) == 0
    found = store.events_for_job("1")
    assert [r.event for r in found] == [rows[0], rows[2], rows[4]]
    assert all(isinstance(r, EventRecord) for r in found)
    assert found[0].id < found[1].id < found[2].id
    assert store.events_for_job("3") == []


# --------------------------------------------------------------------------- several kinds at once


def test_changes_of_every_kind_go_in_one_transaction(store: Store) -> None:
    store.add_jobs([job(1), job(2)])
    store.add_tasks([task("1", 0)])
    store.write_changes(
        new_tasks=[task("2", 0, state="Running", node="a")],
        job_changes=[JobChange("2", state=JobState.RUNNING), JobChange("1", reason="x")],
        task_changes=[TaskChange("1.main.0", state="Completed", exit_code=0, end_time=5.0)],
        new_events=[event("JobStarted", "2")],
    )
    assert [t.state for t in store.tasks_for_job("2")] == [JobState.RUNNING]
    (done,) = store.tasks_for_job("1")
    assert (done.state, done.exit_code) == (JobState.COMPLETED, 0)
    detail = store.get_job("2")
    assert detail is not None and detail.job.state is JobState.RUNNING
    assert [e.event.kind for e in store.events_for_job("2")] == ["JobStarted"]
    store.write_changes()  # nothing to write: no transaction at all


@pytest.mark.parametrize(
    ("bad", "error", "message"),
    [
        ({"new_tasks": [task("2", 1), task("1", 0)]}, DuplicateTask, r"1\.main\.0"),
        ({"new_tasks": [task("9", 0)]}, UnknownJob, "9"),
        ({"job_changes": [JobChange("9", reason="x")]}, UnknownJob, "9"),
        ({"task_changes": [TaskChange("1.main.7")]}, UnknownTask, r"1\.main\.7"),
    ],
)
def test_one_bad_change_writes_nothing(
    store: Store, bad: dict[str, Any], error: type[Exception], message: str
) -> None:
    store.add_jobs([job(1), job(2)])
    store.add_tasks([task("1", 0)])
    changes: dict[str, Any] = {
        "new_tasks": [task("2", 0)],
        "job_changes": [JobChange("2", state=JobState.RUNNING)],
        "new_events": [event("JobStarted", "2")],
    }
    with pytest.raises(error, match=message):
        store.write_changes(**(changes | bad))
    assert store.tasks_for_job("2") == []
    detail = store.get_job("2")
    assert detail is not None and detail.job.state is JobState.PENDING
    assert store.events_for_job("2") == []
