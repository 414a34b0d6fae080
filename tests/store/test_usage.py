"""Accounting (``fusesched.store.usage``) on hand-made jobs, on SQLite and PostgreSQL."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

import pytest

from fusesched.policies.fairshare import GPU_BILLING_WEIGHT, billing_units
from fusesched.store import JobRow, NodeRow, Store
from fusesched.store.usage import (
    DEFAULT_POWER,
    PowerModel,
    UsageForbidden,
    UsageQueryError,
    Watts,
    parse_by,
    parse_time,
    usage_report,
    usage_scope,
)
from fusesched.submit.request import JobRequest

H = 3600.0


def request(*groups: tuple[int, dict[str, str]]) -> dict[str, Any]:
    """A request as the controller stores it (``model_dump`` of a ``JobRequest``)."""
    parsed = JobRequest.model_validate(
        {
            "groups": [
                {"name": f"g{i}", "replicas": n, "resources": res, "argv": ["run", '"resources"']}
                for i, (n, res) in enumerate(groups)
            ]
        }
    )
    return parsed.model_dump(mode="json", exclude_none=True)


_seq = iter(range(1, 10_000))


def job(
    user: str,
    tenant: str,
    start: float | None,
    end: float | None,
    req: dict[str, Any],
    *,
    queue: str = "default",
    state: str = "Completed",
    nodes: tuple[str, ...] = ("cpu-1",),
) -> JobRow:
    seq = next(_seq)
    return JobRow(
        id=str(seq),
        seq=seq,
        user=user,
        state=state,
        phase=state.lower(),
        submit_time=0.0,
        request=req,
        tenant=tenant,
        queue=queue,
        start_time=start,
        end_time=end,
        nodes=nodes if start is not None else (),
    )


@pytest.fixture
def filled(store: Store) -> Store:
    store.upsert_node(NodeRow("cpu-1", "10.0.0.1", 0.0))
    store.upsert_node(NodeRow("h100-1", "10.0.0.2", 0.0, labels={"fusesched.io/gpu-model": "H100"}))
    store.upsert_node(NodeRow("a100-1", "10.0.0.3", 0.0, devices=({"index": 0, "model": "A100"},)))
    cpu2 = request((1, {"cpu": "2"}))
    store.add_jobs(
        [
            # alice (physics): 2 cores for 1 h inside the window, 1 h of 2 across its start
            job("alice", "physics", 1 * H, 2 * H, cpu2, queue="short"),
            job("alice", "physics", -1 * H, 1 * H, cpu2, queue="long"),
            # carol (physics): 4 × 500m across the window's end, on an H100 node with 1 GPU each
            job(
                "carol",
                "physics",
                9 * H,
                12 * H,
                request((4, {"cpu": "500m", "nvidia.com/gpu": "1"})),
                nodes=("h100-1",),
            ),
            # bob (biology): still running since 8 h on an A100 node, half a GPU and a MIG slice
            job(
                "bob",
                "biology",
                8 * H,
                None,
                request(
                    (1, {"cpu": "1", "fusesched.io/gpu-milli": "500"}),
                    (1, {"cpu": "1", "nvidia.com/mig-1g.10gb": "7"}),
                ),
                state="Running",
                nodes=("a100-1",),
            ),
            # never counted: outside the window, never started, lost without an end time
            job("bob", "biology", 11 * H, 12 * H, cpu2),
            job("bob", "biology", None, None, cpu2, state="Cancelled"),
            job("bob", "biology", 2 * H, None, cpu2, state="Failed"),
            # a GPU on a node not registered: model unknown
            job("dan", "biology", 0.0, 1 * H, request((1, {"gpu": "1"})), nodes=("gone",)),
        ]
    )
    return store


def test_window_clipping_and_grouping(filled: Store) -> None:
    report = usage_report(filled, 0.0, 10 * H, ("tenant", "user"), now=9.5 * H)
    rows = {r.key: r for r in report.rows}
    assert list(rows) == [
        ("biology", "bob"),
        ("biology", "dan"),
        ("physics", "alice"),
        (
            "physics",
            "carol",
        ),
    ]
    alice = rows[("physics", "alice")]
    assert (alice.jobs, alice.cpu_hours, alice.gpu_hours) == (2, pytest.approx(4.0), {})
    carol = rows[("physics", "carol")]  # 9 h .. 10 h (the window's end), 2 cores, 4 GPUs
    assert carol.jobs == 1
    assert carol.cpu_hours == pytest.approx(2.0)
    assert carol.gpu_hours == {"H100": pytest.approx(4.0)}
    bob = rows[("biology", "bob")]  # running 8 h .. now (9.5 h): 2 cores, 0.5 + 1 GPU
    assert bob.jobs == 1
    assert bob.cpu_hours == pytest.approx(3.0)
    assert bob.gpu_hours == {"A100": pytest.approx(1.5 * 1.5)}
    assert rows[("biology", "dan")].gpu_hours == {"unknown": pytest.approx(1.0)}
    total = report.total
    assert total.jobs == 5
    assert total.cpu_hours == pytest.approx(4.0 + 2.0 + 3.0 + 0.0)
    assert total.gpu_hours == {
        "A100": pytest.approx(2.25),
        "H100": pytest.approx(4.0),
        "unknown": pytest.approx(1.0),
    }
    assert report.gpu_models == ["A100", "H100", "unknown"]
    assert total.energy_kwh_est == pytest.approx(sum(r.energy_kwh_est for r in report.rows))


def test_running_job_counts_until_the_window_end(filled: Store) -> None:
    report = usage_report(filled, 0.0, 9 * H, ("user",), user="bob", now=20 * H)
    (bob,) = report.rows
    assert bob.cpu_hours == pytest.approx(2.0)  # 8 h .. 9 h
    assert report.user == "bob"


def test_group_by_queue_and_filters(filled: Store) -> None:
    report = usage_report(filled, 0.0, 10 * H, ("queue",), tenant="physics", now=10 * H)
    assert [(r.key, r.jobs) for r in report.rows] == [
        (("default",), 1),
        (("long",), 1),
        (("short",), 1),
    ]
    assert usage_report(filled, 0.0, 10 * H, (), tenant="nobody").rows == ()
    everything = usage_report(filled, 0.0, 10 * H, (), now=9.5 * H)
    assert [r.key for r in everything.rows] == [()]
    assert everything.rows[0].jobs == 5


def test_a_request_written_in_another_order_is_read(store: Store) -> None:
    req = {"groups": [{"resources": {"cpu": "3", "nvidia.com/gpu": "1"}, "replicas": 2}]}
    store.add_jobs([job("eve", "t", 0.0, H, req)])
    (row,) = usage_report(store, 0.0, H, ("user",)).rows
    assert (row.cpu_hours, row.gpu_hours) == (pytest.approx(6.0), {"unknown": 2.0})


def test_an_empty_window_and_bad_input(filled: Store) -> None:
    assert usage_report(filled, 5 * H, 5 * H).total.jobs == 0
    with pytest.raises(UsageQueryError, match="before it starts"):
        usage_report(filled, 2 * H, 1 * H)
    with pytest.raises(UsageQueryError, match="cannot group usage by 'account'"):
        usage_report(filled, 0.0, H, ("account",))


def test_billing_is_the_fair_share_charge(filled: Store) -> None:
    report = usage_report(filled, 0.0, 10 * H, ("user",), user="carol")
    (carol,) = report.rows
    assert carol.billing == pytest.approx(2.0 + GPU_BILLING_WEIGHT * 4.0)
    assert billing_units(1.5, 2.0, gpu_weight=3.0) == pytest.approx(7.5)


def test_power_model() -> None:
    model = PowerModel(cpu_core=Watts(0, 10), gpu={"X": Watts(100, 300)}, load=0.5)
    # 10 core-hours at 5 W, 2 X-hours at 200 W, 1 unknown GPU-hour at the default's 225 W
    assert model.kwh(10.0, {"X": 2.0, "unknown": 1.0}) == pytest.approx((50 + 400 + 225) / 1000)
    assert DEFAULT_POWER.kwh(0.0, {}) == 0.0
    with pytest.raises(ValueError, match="load"):
        PowerModel(load=1.5)


def test_parse_by() -> None:
    assert parse_by("tenant, user") == ("tenant", "user")
    assert parse_by(["queue"]) == ("queue",)
    assert parse_by("") == ()
    with pytest.raises(UsageQueryError, match="repeated"):
        parse_by("user,user")


def test_parse_time() -> None:
    now = 1_800_000_000.0
    assert parse_time("now", now) == now
    assert parse_time("-7d", now) == now - 7 * 86400
    assert parse_time("-12h", now) == now - 12 * 3600
    assert parse_time("-1.5w", now) == now - 1.5 * 7 * 86400
    assert parse_time("1700000000", now) == 1_700_000_000.0
    assert parse_time("2026-11-01", now) == datetime(2026, 11, 1, tzinfo=UTC).timestamp()
    assert (
        parse_time("2026-11-01T08:30", now) == datetime(2026, 11, 1, 8, 30, tzinfo=UTC).timestamp()
    )
    assert (
        parse_time("2026-11-01T08:30+01:00", now)
        == datetime(2026, 11, 1, 7, 30, tzinfo=UTC).timestamp()
    )
    for bad in ("yesterday", "2026-13-01", "-7y", "nan", ""):
        with pytest.raises(UsageQueryError, match="not a time"):
            parse_time(bad, now)


def test_usage_scope_by_role() -> None:
    assert usage_scope("cluster-admin", "root", "ops", None, None) == (None, None)
    assert usage_scope("cluster-admin", "root", "ops", "physics", "alice") == ("physics", "alice")
    assert usage_scope("tenant-admin", "pat", "physics", None, None) == ("physics", None)
    assert usage_scope("tenant-admin", "pat", "physics", "physics", "carol") == (
        "physics",
        "carol",
    )
    assert usage_scope("user", "alice", "physics", None, None) == ("physics", "alice")
    assert usage_scope("user", "alice", "physics", "physics", "alice") == ("physics", "alice")
    with pytest.raises(UsageForbidden, match="tenant 'biology'"):
        usage_scope("tenant-admin", "pat", "physics", "biology", None)
    with pytest.raises(UsageForbidden, match="user 'carol'"):
        usage_scope("user", "alice", "physics", None, "carol")
    with pytest.raises(UsageForbidden, match="tenant 'biology'"):
        usage_scope("user", "alice", "physics", "biology", None)
    with pytest.raises(UsageForbidden):
        usage_scope("agent", "", "", None, None)
