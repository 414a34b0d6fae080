"""The energy benches' pure pieces (bench/energy_sim.py, bench/energy_survey.py) on tiny inputs."""

from __future__ import annotations

import sys
from dataclasses import replace
from pathlib import Path

import pytest

from fusesched.sim.power import PowerReport

BENCH = Path(__file__).resolve().parents[2] / "bench"
sys.path.insert(0, str(BENCH))

import energy_sim as es  # noqa: E402
import energy_survey as survey  # noqa: E402

DAY = 86400


def _outcome(policy: str, kwh: float, wait_s: float) -> es.Outcome:
    report = PowerReport(policy, 0.0, 30 * DAY, kwh, {}, {"idle": 0.0}, 0, 0, 0)
    return es.Outcome("t", policy, report, 10, wait_s, wait_s, 0.0, [])


def _rows(waits: tuple[float, float, float, float, float]) -> list[dict[str, object]]:
    kwh = (100.0, 80.0, 75.0, 70.0, 85.0)
    outs = [_outcome(p, k, w) for p, k, w in zip(es.POLICIES, kwh, waits, strict=True)]
    return [es.row(o, outs[0]) for o in outs]


def test_extra_wait_is_relative_and_infinite_when_nobody_waited_always_on() -> None:
    rows = _rows((100.0, 104.0, 103.0, 110.0, 101.0))
    assert [round(float(r["more_wait"]), 3) for r in rows] == [0.0, 0.04, 0.03, 0.1, 0.01]
    assert [round(float(r["saved"]), 2) for r in rows] == [0.0, 0.2, 0.25, 0.3, 0.15]
    goal = es.verdict(rows)
    assert all(goal["forecast"].values())  # 25 % saved, +3 % wait, beats idle-timeout on both
    assert goal["predictive"]["wait_under_5pct"] is False
    # surge: little extra wait, but it saves less than 20 % and more energy than idle-timeout
    assert goal["surge"] == {
        "saves_20pct": False,
        "wait_under_5pct": True,
        "beats_idle_timeout_energy": False,
        "beats_idle_timeout_wait": True,
    }
    # always-on without any wait: a policy that makes jobs wait cannot pass "< 5 % more"
    rows = _rows((0.0, 0.0, 60.0, 0.0, 0.0))
    assert rows[2]["more_wait"] is None and rows[3]["more_wait"] == 0.0
    goal = es.verdict(rows)
    assert goal["forecast"]["wait_under_5pct"] is False
    assert goal["predictive"]["wait_under_5pct"] is True
    assert es.more_text(None).startswith("+∞") and es.more_text(0.031) == "+3.1%"


def _swf(path: Path, days: int, cpus: int = 2) -> Path:
    """One 1-CPU job submitted at noon every day, running half a day."""
    lines = ["; Version: 2.2", f"; MaxNodes: {cpus}", f"; MaxProcs: {cpus}"]
    for k in range(days):
        submit = k * DAY + DAY // 2
        lines.append(f"{k + 1} {submit} 0 43200 1 -1 -1 1 50000 -1 1 1 1 1 1 1 -1 -1")
    path.write_text("\n".join(lines) + "\n")
    return path


def test_survey_window_rule_and_offered_load(tmp_path: Path) -> None:
    long = _swf(tmp_path / "long.swf", 100)
    # submits span 99 days: 30 days from day 49
    assert survey.window_of(long) == (49.0, 79.0)
    case = es.swf_case(long, survey.window_of(long), survey.WARMUP_DAYS)
    # 30 jobs × 0.5 CPU-day over 30 days × 2 CPUs
    assert survey.offered_load(case) == pytest.approx(0.25)
    short = _swf(tmp_path / "short.swf", 10)
    assert survey.window_of(short) == (survey.WARMUP_DAYS, 9.0)  # whole span after the warm-up
    # 50 days: the middle 30 would run past the end, so the whole span is measured too
    assert survey.window_of(_swf(tmp_path / "mid.swf", 51)) == (survey.WARMUP_DAYS, 50.0)


def test_survey_table_names_the_policies_that_meet_the_goal() -> None:
    rows = _rows((100.0, 104.0, 103.0, 110.0, 101.0))
    entry = {
        "trace": "T",
        "nodes": 4,
        "jobs": 10,
        "offered_load": 0.3,
        "ceiling": 0.5,
        "policies": rows,
        "goal": es.verdict(rows),
    }
    text = survey.table([entry])
    assert "| T | 4 | 10 | 0.30 | 50.0% |" in text and text.rstrip().endswith("| forecast |")


def test_philly_in_helios_virtual_clusters(tmp_path: Path) -> None:
    (tmp_path / "philly_vc.csv").write_text("vc,node num\nva,2\nvb,1\n")
    (tmp_path / "philly.csv").write_text(
        "timestamp,duration,num_gpus,gpu_time,cluster\n"
        "2017-10-01 00:00:00,600,1,600,va\n"
        "2017-10-02 00:00:00,600,16,9600,va\n"  # two whole nodes of its VC
        "2017-10-02 06:00:00,60,1,60,vz\n"  # a VC the file does not size: left out
        "2017-10-03 00:00:00,60,2,120,vb\n"
    )
    case = es.philly_vc_case(tmp_path, (1.0, 3.0), 1.0)
    assert case.name == "Philly-VC" and len(case.nodes) == 3
    assert sorted(n.labels["fusesched.io/pool"] for n in case.nodes) == ["va", "va", "vb"]
    pools = [j.spec.placement.node_selector["fusesched.io/pool"] for j in case.jobs]
    assert pools == ["va", "va", "vb"]  # each job only in its own VC
    assert [sum(g.replicas for g in j.spec.task_groups) for j in case.jobs] == [1, 2, 1]
    assert case.meter == (DAY, 3 * DAY)


def test_zero_wait_bound_keeps_awake_what_the_next_boot_time_needs() -> None:
    from fusesched.model.node import NodeSpec
    from fusesched.model.resources import Resources

    nodes = tuple(NodeSpec(f"n{i}", Resources.parse({"cpu": 4}), {}) for i in range(4))
    case = es.Case("t", "swf", nodes, (), (0.0, 660.0), "")
    base = _outcome("always-on", 1.0, 0.0)
    # two nodes busy at t = 300 only; a cpu-node boots in 300 s, so from t = 0 to 360 both
    # must be powered or booting; the other node-time of the window (4 × 660 − 2 × 360 =
    # 1,920 node-s) can be suspended
    busy = [(k * 60.0, (2 if k == 5 else 0,)) for k in range(11)]
    bound = es.zero_wait_bound(case, replace(base, pool_busy=busy))
    assert bound == pytest.approx(1920 * (110 - 8) / 3.6e6)
    # only the metering window counts: from t = 120 on, 4 × 540 − 2 × 240 = 1,680 node-s
    later = replace(case, meter=(120.0, 660.0))
    assert es.zero_wait_bound(later, replace(base, pool_busy=busy)) == pytest.approx(
        1680 * (110 - 8) / 3.6e6
    )
    assert es.zero_wait_bound(case, base) == 0.0  # nothing recorded
    with pytest.raises(ValueError, match="from always-on"):
        es.zero_wait_bound(case, replace(base, policy="surge", pool_busy=busy))
