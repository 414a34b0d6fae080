"""``Store.list_jobs``'s list filters (squeue's ``-u a,b -p x,y -j 5,6_2 -n NAME -t TO``) on
SQLite and PostgreSQL: any-of matching, newest first, ``limit`` counting matches, paging with
``before_seq``, and values that are text to compare, never SQL."""

from __future__ import annotations

import pytest

from fusesched.store import JobRow, JobState, Store
from fusesched.store.job_filters import JobFilters
from store.rows import job


def ids(rows: list[JobRow]) -> list[str]:
    return [r.id for r in rows]


@pytest.fixture
def listed(store: Store) -> Store:
    """Seq 1..12: users bob/carol/alice in turn (seq 1: bob), queues gpu (odd) and cpu,
    tenants a (1..8) and b; 5 and 9 timed out (state Failed, phase timeout), 6 failed;
    10..12 are array 10's members 10_1..10_3."""
    users = ["alice", "bob", "carol"]
    rows = []
    for s in range(1, 13):
        fields: dict[str, object] = {
            "user": users[s % 3],
            "queue": "gpu" if s % 2 else "cpu",
            "tenant": "a" if s <= 8 else "b",
            "name": "train" if s % 4 == 0 else f"job{s}",
        }
        if s in (5, 9):
            fields.update(state=JobState.FAILED, phase="timeout")
        if s == 6:
            fields.update(state=JobState.FAILED, phase="failed")
        if s >= 10:
            fields.update(id=f"10_{s - 9}", array_parent="10")
        rows.append(job(s, **fields))
    store.add_jobs(rows)
    return store


def test_several_users_queues_and_names_match_any(listed: Store) -> None:
    assert ids(listed.list_jobs(JobFilters(users=["alice", "carol"]))) == [
        "10_3",
        "10_2",
        "9",
        "8",
        "6",
        "5",
        "3",
        "2",
    ]
    assert ids(listed.list_jobs(JobFilters(users=["bob"], queues=["gpu", "cpu"]))) == [
        "10_1",
        "7",
        "4",
        "1",
    ]
    assert ids(listed.list_jobs(JobFilters(names=["train", "job7"]))) == ["10_3", "8", "7", "4"]
    assert listed.list_jobs(JobFilters(users=[])) == listed.list_jobs(JobFilters(names=[])) == []


def test_ids_name_jobs_and_whole_arrays(listed: Store) -> None:
    assert ids(listed.list_jobs(JobFilters(ids=["3", "10_2", "99"]))) == ["10_2", "3"]
    assert ids(listed.list_jobs(JobFilters(ids=["10"]))) == ["10_3", "10_2", "10_1"]
    assert ids(listed.list_jobs(JobFilters(ids=["10", "1"], tenant="a"))) == [
        "1"
    ]  # 10 is tenant b's
    assert ids(listed.list_jobs(JobFilters(ids=["10"], users=["carol"]))) == ["10_2"]


def test_states_and_phases_match_either(listed: Store) -> None:
    assert ids(listed.list_jobs(JobFilters(phases=["timeout"]))) == ["9", "5"]
    assert ids(listed.list_jobs(JobFilters(states=["Failed"]))) == ["9", "6", "5"]
    assert ids(listed.list_jobs(JobFilters(states=[], phases=["failed"]))) == ["6"]
    assert ids(listed.list_jobs(JobFilters(states=["Failed"], phases=["queued"]), limit=3)) == [
        "10_3",
        "10_2",
        "10_1",
    ]
    assert (
        ids(listed.list_jobs(JobFilters(phases=["timeout"], tenant="a", users=["alice", "bob"])))
        == []
    )
    assert ids(listed.list_jobs(JobFilters(phases=["timeout"], tenant="b"))) == ["9"]


def test_limit_and_paging_count_only_matches(listed: Store) -> None:
    pages: list[list[str]] = []
    before = None
    while page := listed.list_jobs(
        JobFilters(users=["alice", "bob"], queues=["gpu"]), limit=2, before_seq=before
    ):
        pages.append(ids(page))
        before = page[-1].seq
    assert pages == [["9", "7"], ["3", "1"]]


@pytest.mark.parametrize(
    "value",
    ["alice' OR '1'='1", "x); DROP TABLE jobs; --", "%", "_", "Ünïcødé 名前", "a\\b"],
)
def test_values_are_compared_as_text(listed: Store, value: str) -> None:
    assert listed.list_jobs(JobFilters(users=[value])) == []
    assert listed.list_jobs(JobFilters(names=[value], queues=[value])) == []
    assert listed.list_jobs(JobFilters(ids=[value])) == []
    assert len(listed.list_jobs(limit=100)) == 12  # (the table is still there)


def test_also_adds_those_jobs_to_the_state_filter_and_pages_as_it(listed: Store) -> None:
    """``also``: the jobs the controller shows COMPLETING (squeue's ``-t F,CG``), whatever
    their stored state; the other filters, ``limit`` and ``before_seq`` hold for them too."""
    failed = {"states": ["Failed"]}
    assert ids(listed.list_jobs(JobFilters(**failed, also={"3", "1"}))) == ["9", "6", "5", "3", "1"]
    assert ids(listed.list_jobs(JobFilters(phases=["timeout"], also={"6"}))) == ["9", "6", "5"]
    assert ids(listed.list_jobs(JobFilters(also={"3", "1", "99"}))) == ["3", "1"]  # (-t CG alone)
    assert listed.list_jobs(JobFilters(also=set())) == []  # (-t CG while none is completing)
    assert ids(listed.list_jobs(JobFilters(**failed, also=set()))) == ["9", "6", "5"]
    page = listed.list_jobs(JobFilters(**failed, also={"3", "1"}), limit=2)
    assert ids(page) == ["9", "6"]
    rest = listed.list_jobs(JobFilters(**failed, also={"3", "1"}), limit=2, before_seq=page[-1].seq)
    assert ids(rest) == ["5", "3"]
    assert ids(listed.list_jobs(JobFilters(users=["bob"], also={"3", "1", "4"}))) == ["4", "1"]
    assert ids(listed.list_jobs(JobFilters(tenant="b", also={"3", "10_1"}))) == ["10_1"]
    assert ids(listed.list_jobs(JobFilters(users=["bob"], since=0.0, also={"3", "4", "7"}))) == [
        "7",
        "4",
    ]
    assert ids(listed.list_jobs(JobFilters(ids=["10"], also={"10_2"}))) == ["10_2"]
