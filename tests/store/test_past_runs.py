"""``ended_runs`` (store/past_runs.py): the runs a restarted controller's fair share is given
back, read from the job rows, on SQLite and PostgreSQL."""

from __future__ import annotations

import math
from typing import Any

import pytest
from tests.store.rows import job

from fusesched.model.events import EndedRuns
from fusesched.model.resources import Resources
from fusesched.store import JobState, Store
from fusesched.store.past_runs import ended_runs
from fusesched.store.usage_shapes import job_total
from fusesched.submit.request import JobRequest

H = 3600.0


def request(*groups: dict[str, Any]) -> dict[str, Any]:
    """A request as the controller stores it (``model_dump`` of a ``JobRequest``)."""
    body = {"groups": [{"name": f"g{i}", "argv": ["run"], **g} for i, g in enumerate(groups)]}
    return JobRequest.model_validate(body).model_dump(mode="json", exclude_none=True)


CPU2 = request({"resources": {"cpu": "2"}})


def ran(seq: int, start: float | None, end: float | None, **fields: Any) -> Any:
    """A job row that ran from ``start`` to ``end`` (Completed on node n1, by default)."""
    values: dict[str, Any] = {
        "state": JobState.COMPLETED,
        "phase": "completed",
        "tenant": "ml",
        "queue": "train",
        "request": CPU2,
        "start_time": start,
        "end_time": end,
        "nodes": ("n1",),
        **fields,
    }
    return job(seq, **values)


def found(store: Store, since: float = -math.inf) -> dict[tuple[str, str, str], list[Any]]:
    """(tenant, queue, user) -> [(total, sorted spans)] of what ``ended_runs`` reads, by
    the totals' text."""
    out: dict[tuple[str, str, str], list[Any]] = {}
    for runs in ended_runs(store, since):
        assert isinstance(runs, EndedRuns)
        out.setdefault((runs.tenant, runs.queue, runs.user), []).append(
            (runs.total, sorted(runs.spans))
        )
    return {key: sorted(found, key=lambda r: str(r[0])) for key, found in out.items()}


def test_only_runs_that_ended_after_starting_on_nodes(store: Store) -> None:
    store.add_jobs(
        [
            ran(1, 0.0, H),  # counted
            ran(2, 0.0, 2 * H, state=JobState.FAILED, phase="failed"),  # counted
            ran(3, 0.5 * H, H, state=JobState.CANCELLED, phase="cancelled"),  # counted
            ran(4, 0.0, None, state=JobState.RUNNING, phase="running"),  # the core adopts it
            # requeued after a run that ended at 2 h, running again: the core charges it
            ran(5, 3 * H, 2 * H, state=JobState.RUNNING, phase="running"),
            ran(6, 0.0, None, state=JobState.PENDING, phase="queued", nodes=()),  # requeued
            # requeued, then cancelled while it waited: its start is an earlier run's
            ran(7, 0.0, 5 * H, state=JobState.CANCELLED, phase="cancelled", nodes=()),
            ran(8, None, H, state=JobState.CANCELLED, phase="cancelled", nodes=()),  # never ran
            ran(9, 0.0, None, state=JobState.FAILED, phase="failed"),  # no end time
        ]
    )
    assert found(store) == {
        ("ml", "train", "alice"): [
            (Resources.parse({"cpu": "2"}), [(0.0, H), (0.0, 2 * H), (0.5 * H, H)])
        ]
    }


def test_runs_that_ended_before_since_are_not_read(store: Store) -> None:
    store.add_jobs([ran(1, 0.0, H), ran(2, 0.0, 2 * H), ran(3, 2 * H, 3 * H)])
    assert found(store, 2 * H) == {
        ("ml", "train", "alice"): [(Resources.parse({"cpu": "2"}), [(0.0, 2 * H), (2 * H, 3 * H)])]
    }
    assert found(store, 3.5 * H) == {}


def test_grouped_by_account_and_what_the_jobs_held(store: Store) -> None:
    gpu = request({"resources": {"cpu": "1", "nvidia.com/gpu": "2"}})
    store.add_jobs(
        [
            ran(1, 0.0, H),
            ran(2, H, 2 * H, request=gpu),
            ran(3, 2 * H, 3 * H),
            ran(4, 0.0, H, user="bob"),
            ran(5, 0.0, H, tenant="phys", queue="sim", user="bob"),
        ]
    )
    assert found(store) == {
        ("ml", "train", "alice"): [
            (Resources.parse({"cpu": "1", "nvidia.com/gpu": "2"}), [(H, 2 * H)]),
            (Resources.parse({"cpu": "2"}), [(0.0, H), (2 * H, 3 * H)]),
        ],
        ("ml", "train", "bob"): [(Resources.parse({"cpu": "2"}), [(0.0, H)])],
        ("phys", "sim", "bob"): [(Resources.parse({"cpu": "2"}), [(0.0, H)])],
    }


@pytest.mark.parametrize(
    "groups",
    [
        [{"resources": {"cpu": "500m", "memory": "2Gi"}}],
        [{"replicas": 4, "resources": {"cpu": "8", "nvidia.com/gpu": "2"}}],
        [{"resources": {"cpu": "1", "gpu": "1"}}],  # (the short name)
        [{"resources": {"cpu": "1", "fusesched.io/gpu-milli": "250"}}],
        [{"resources": {"cpu": "2", "nvidia.com/mig-3g.40gb": "1"}}],
        [
            {"replicas": 1, "resources": {"cpu": "2"}},
            {"replicas": 3, "resources": {"cpu": "4", "nvidia.com/gpu": "1"}},
        ],
    ],
)
def test_what_a_job_held_is_its_specs_total(store: Store, groups: list[dict[str, Any]]) -> None:
    """The resources read back are those the core charged the job for: its spec's total."""
    stored = request(*groups)
    store.add_jobs([ran(1, 0.0, H, request=stored)])
    ((runs,),) = found(store).values()
    total, _ = runs
    assert total == JobRequest.model_validate(stored).to_job_spec("1", 0.0).total


@pytest.mark.parametrize(
    "stored",
    [
        {"groups": [{"replicas": "two", "resources": {"cpu": "2"}}]},
        {"groups": [{"replicas": 1, "resources": "cpu=2"}]},
        {"groups": [{"replicas": 1, "resources": ["cpu", "2"]}]},
        {"groups": [{"replicas": -3, "resources": {"cpu": "2"}}]},
        {"groups": [{"replicas": 10**400, "resources": {"cpu": "2"}}]},  # (overflows a float)
        {"groups": [{"replicas": "²", "resources": {"cpu": "2"}}]},  # (a digit, not decimal)
        {"groups": [{"replicas": "9" * 5000, "resources": {"cpu": "2"}}]},  # (int() refuses)
        {"groups": [{"replicas": 1, "resources": {"cpu": "lots"}}]},
        {"groups": [5, [1, 2, 3]]},
        {"groups": "g0"},
        {"groups": {"g0": {"resources": {"cpu": "2"}}}},  # groups not a list
    ],
)
def test_a_malformed_request_counts_nothing(store: Store, stored: Any) -> None:
    """A row whose stored request cannot be read (written by hand, by an older version)
    holds nothing for fair share: it neither stops the others being read nor raises (a
    controller reads these as it starts)."""
    store.add_jobs([ran(1, 0.0, H), ran(2, 0.0, H, user="mallory", request=stored)])
    runs = found(store)
    assert runs[("ml", "train", "alice")] == [(Resources.parse({"cpu": "2"}), [(0.0, H)])]
    assert [total for total, _ in runs[("ml", "train", "mallory")]] == [Resources()]


@pytest.mark.parametrize("replicas", [2, 2.0, "2"])
def test_a_replica_count_is_read_as_the_request_model_reads_it(store: Store, replicas: Any) -> None:
    stored = {"groups": [{"resources": {"cpu": "2"}, "replicas": replicas, "argv": ["run"]}]}
    store.add_jobs([ran(1, 0.0, H, request=stored)])
    ((runs,),) = found(store).values()
    assert runs[0] == JobRequest.model_validate(stored).to_job_spec("1", 0.0).total
    assert runs[0] == Resources.parse({"cpu": "4"})


def test_a_replica_count_of_more_digits_than_int_reads_counts_nothing() -> None:
    """(Written by hand into SQLite: a JSON number Python's ``int`` refuses to read.)"""
    text = '{"groups": [{"name": "g", "replicas": ' + "9" * 5000 + ', "resources": {"cpu": "2"}}]}'
    assert job_total(text) == Resources()
