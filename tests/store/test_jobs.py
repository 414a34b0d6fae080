"""Jobs: sequence numbers, round trips, listing, bulk updates, recovery and bad input."""

from __future__ import annotations

import pytest

from fusesched.model.phases import JobPhase
from fusesched.store import (
    UNSET,
    DuplicateJob,
    JobChange,
    JobDetail,
    JobRow,
    JobState,
    Store,
    UnknownJob,
)
from fusesched.store.job_filters import JobFilters
from store.rows import job, task


def ids(rows: list[JobRow]) -> list[str]:
    return [r.id for r in rows]


# --------------------------------------------------------------------------- sequence numbers


def test_job_seq_starts_at_one_and_allocates_consecutive_blocks(store: Store) -> None:
    assert store.next_job_seq() == range(1, 2)
    assert store.next_job_seq(5) == range(2, 7)
    assert store.next_job_seq() == range(7, 8)


def test_job_seq_never_reuses_a_stored_seq(store: Store) -> None:
    store.add_jobs([job(40)])  # a seq not allocated by this store (e.g. imported)
    assert store.next_job_seq() == range(41, 42)


def test_unused_job_seqs_are_given_back_only_while_nobody_took_more(store: Store) -> None:
    assert store.next_job_seq(1000) == range(1, 1001)
    store.add_jobs([job(1), job(2)])
    assert store.return_job_seqs(3, 1000)  # the rest of the block
    assert store.next_job_seq() == range(3, 4)  # numbering goes on
    block = store.next_job_seq(10)  # 4..13
    assert store.next_job_seq() == range(14, 15)  # someone took more since
    assert not store.return_job_seqs(block.start, block.stop - 1)
    assert store.next_job_seq() == range(15, 16)
    assert not store.return_job_seqs(0, 5) and not store.return_job_seqs(9, 8)


def test_job_seq_rejects_empty_blocks(store: Store) -> None:
    with pytest.raises(ValueError, match="at least 1"):
        store.next_job_seq(0)


# --------------------------------------------------------------------------- round trips


def test_a_job_reads_back_equal_with_its_tasks(store: Store) -> None:
    row = job(
        1,
        name="train",
        tenant="ai",
        queue="gpu",
        type="ai-train",
        state=JobState.RUNNING,
        phase="running",
        reason="started",
        priority=7,
        start_time=1010.5,
        nodes=("g1", "g2"),
        request={"tasks": [{"count": 2, "resources": {"nvidia.com/gpu": "8"}}], "env": {"A": "1"}},
    )
    tasks = [
        task("1", 1, node="g2", state="Running", pid=11, devices=("GPU-a", "GPU-b")),
        task("1", 0, node="g1", state="Running", pid=10, log_path="/var/log/1.main.0"),
    ]
    store.add_jobs([row])
    store.add_tasks(tasks)
    assert store.get_job("1") == JobDetail(row, (tasks[1], tasks[0]))
    assert store.get_job("2") is None


def test_array_members_keep_their_parent(store: Store) -> None:
    parent = job(1)
    members = [job(1 + i, id=f"1_{i}", array_parent="1") for i in range(1, 4)]
    store.add_jobs([parent, *members])
    detail = store.get_job("1_2")
    assert detail is not None and detail.job.array_parent == "1"
    assert detail.job == members[1]


# --------------------------------------------------------------------------- listing


@pytest.fixture
def listed(store: Store) -> Store:
    """20 jobs: seq 1..20, users alternate alice/bob, queues cpu/gpu by thirds, states mixed."""
    states = [JobState.COMPLETED, JobState.FAILED, JobState.RUNNING, JobState.PENDING]
    store.add_jobs(
        job(
            s,
            user="alice" if s % 2 else "bob",
            queue="gpu" if s % 3 == 0 else "cpu",
            state=states[s % 4],
        )
        for s in range(1, 21)
    )
    return store


def test_listing_is_newest_first_and_limited(listed: Store) -> None:
    assert ids(listed.list_jobs(limit=3)) == ["20", "19", "18"]
    assert len(listed.list_jobs()) == 20


def test_listing_filters_by_user_state_and_queue(listed: Store) -> None:
    assert ids(listed.list_jobs(JobFilters(users=["alice"]), limit=4)) == ["19", "17", "15", "13"]
    assert ids(listed.list_jobs(JobFilters(states=["Running"]))) == ["18", "14", "10", "6", "2"]
    bobs = listed.list_jobs(
        JobFilters(users=["bob"], states=[JobState.PENDING, "Running"]), limit=3
    )
    assert ids(bobs) == ["18", "14", "10"]
    assert ids(
        listed.list_jobs(JobFilters(users=["alice"], states=["Pending", "Failed"]), limit=3)
    ) == [
        "19",
        "17",
        "15",
    ]
    assert ids(listed.list_jobs(JobFilters(queues=["gpu"], users=["alice"]))) == ["15", "9", "3"]
    assert listed.list_jobs(JobFilters(users=["carol"])) == []
    assert listed.list_jobs(JobFilters(states=[])) == []


def test_listing_pages_with_before_seq(listed: Store) -> None:
    pages: list[list[str]] = []
    before = None
    while page := listed.list_jobs(JobFilters(users=["bob"]), limit=4, before_seq=before):
        pages.append(ids(page))
        before = page[-1].seq
    assert pages == [["20", "18", "16", "14"], ["12", "10", "8", "6"], ["4", "2"]]


def test_listing_rejects_a_bad_limit_or_state(listed: Store) -> None:
    with pytest.raises(ValueError, match="limit"):
        listed.list_jobs(limit=0)
    with pytest.raises(ValueError, match="unknown job state 'Done'; expected one of Pending"):
        listed.list_jobs(JobFilters(states=["Done"]))


def test_counts_by_state_include_zeros(listed: Store) -> None:
    assert listed.count_jobs_by_state() == {
        JobState.PENDING: 5,
        JobState.RUNNING: 5,
        JobState.COMPLETED: 5,
        JobState.FAILED: 5,
        JobState.CANCELLED: 0,
    }


# --------------------------------------------------------------------------- bulk update


def test_bulk_update_changes_only_the_given_fields(store: Store) -> None:
    store.add_jobs([job(1), job(2), job(3, reason="waiting")])
    changed = store.update_jobs(
        [
            JobChange("1", state="Running", phase="running", start_time=5.0, nodes=("n1",)),
            JobChange("3", state=JobState.COMPLETED, phase="completed", end_time=9.0, exit_code=0),
        ]
    )
    assert changed == 2
    one, two, three = (store.get_job(i) for i in "123")
    assert one is not None and two is not None and three is not None
    assert (one.job.state, one.job.phase, one.job.start_time, one.job.nodes) == (
        JobState.RUNNING,
        "running",
        5.0,
        ("n1",),
    )
    assert one.job.end_time is None and one.job.reason == ""
    assert two.job == job(2)
    assert (three.job.state, three.job.exit_code, three.job.reason) == (
        JobState.COMPLETED,
        0,
        "waiting",
    )


def test_later_changes_of_a_job_win_and_none_clears(store: Store) -> None:
    store.add_jobs([job(1, state="Running", start_time=5.0, exit_code=3)])
    store.update_jobs(
        [
            JobChange("1", state="Failed", reason="node lost"),
            JobChange("1", state="Pending", phase="queued", start_time=None, exit_code=None),
        ]
    )
    detail = store.get_job("1")
    assert detail is not None
    assert (detail.job.state, detail.job.reason, detail.job.start_time, detail.job.exit_code) == (
        JobState.PENDING,
        "node lost",
        None,
        None,
    )


def test_updating_an_unknown_job_changes_nothing(store: Store) -> None:
    store.add_jobs([job(1)])
    with pytest.raises(UnknownJob, match="job not in the store: 9") as caught:
        store.update_jobs([JobChange("1", state="Running"), JobChange("9", state="Running")])
    assert caught.value.ids == ("9",)
    detail = store.get_job("1")
    assert detail is not None and detail.job.state is JobState.PENDING


def test_an_empty_change_of_a_stored_job_counts(store: Store) -> None:
    store.add_jobs([job(1)])
    assert store.update_jobs([JobChange("1")]) == 1
    assert store.update_jobs([]) == 0
    with pytest.raises(UnknownJob):
        store.update_jobs([JobChange("2")])


# --------------------------------------------------------------------------- recovery


def test_unfinished_jobs_come_oldest_first_with_their_tasks(store: Store) -> None:
    store.add_jobs(
        [
            job(1, state="Completed"),
            job(2, state="Running"),
            job(3, state="Pending"),
            job(4, state="Cancelled"),
            job(5, state="Running"),
        ]
    )
    store.add_tasks([task("5", 0, state="Running"), task("2", 1), task("2", 0), task("1", 0)])
    found = store.unfinished_jobs()
    assert [d.job.id for d in found] == ["2", "3", "5"]
    assert [t.task_id for t in found[0].tasks] == ["2.main.0", "2.main.1"]
    assert found[1].tasks == ()
    assert [t.task_id for t in found[2].tasks] == ["5.main.0"]


def test_the_state_of_every_core_phase() -> None:
    assert {p: JobState.of_phase(p).value for p in JobPhase} == {
        JobPhase.PENDING: "Pending",
        JobPhase.QUEUED: "Pending",
        JobPhase.PREEMPTED: "Pending",
        JobPhase.RUNNING: "Running",
        JobPhase.COMPLETED: "Completed",
        JobPhase.FAILED: "Failed",
        JobPhase.TIMEOUT: "Failed",
        JobPhase.CANCELLED: "Cancelled",
    }
    assert not JobState.RUNNING.finished and JobState.CANCELLED.finished


# --------------------------------------------------------------------------- bad input


def test_an_unknown_state_is_a_clear_value_error() -> None:
    expected = "unknown job state 'running'; expected one of Pending, Running, Completed"
    with pytest.raises(ValueError, match=expected):
        job(1, state="running")
    with pytest.raises(ValueError, match="unknown job state 'Done'"):
        JobChange("1", state="Done")  # type: ignore[arg-type]


def test_records_refuse_empty_ids_and_bad_seqs() -> None:
    with pytest.raises(ValueError, match="job id must not be empty"):
        job(1, id="")
    with pytest.raises(ValueError, match="seq must be positive"):
        job(0)


def test_a_stored_id_is_a_duplicate_and_nothing_of_the_batch_is_added(store: Store) -> None:
    store.add_jobs([job(1)])
    with pytest.raises(DuplicateJob, match="job already exists: 1") as caught:
        store.add_jobs([job(2), job(3, id="1")])
    assert caught.value.ids == ("1",)
    assert ids(store.list_jobs()) == ["1"]


def test_an_id_twice_in_one_batch_is_a_duplicate(store: Store) -> None:
    with pytest.raises(DuplicateJob, match="repeated in one batch: 7"):
        store.add_jobs([job(1, id="7"), job(2, id="7")])
    assert store.list_jobs() == []


def test_a_used_seq_is_a_duplicate(store: Store) -> None:
    store.add_jobs([job(1)])
    with pytest.raises(DuplicateJob, match="seq already used: other"):
        store.add_jobs([job(1, id="other")])
    with pytest.raises(DuplicateJob, match="seq used twice in one batch"):
        store.add_jobs([job(5, id="a"), job(5, id="b")])


def test_unset_is_the_default_of_every_change_field() -> None:
    change = JobChange("1")
    assert change.values() == {}
    assert change.state is UNSET


def test_optimize_refreshes_statistics_and_keeps_data(listed: Store) -> None:
    listed.optimize()
    listed.optimize()
    assert ids(listed.list_jobs(JobFilters(users=["alice"], states=["Failed"]), limit=2)) == [
        "17",
        "13",
    ]
