"""bench/energy_sim.py's placement option (--placement, --with-placement) and its packing bound."""

from __future__ import annotations

import sys
from dataclasses import replace
from pathlib import Path

import pytest

from fusesched.model.job import JobSpec, TaskGroup
from fusesched.model.resources import Resources
from fusesched.power.saving import SavingConfig
from fusesched.sim.engine import SimJob
from fusesched.sim.power import PowerReport

BENCH = Path(__file__).resolve().parents[2] / "bench"
sys.path.insert(0, str(BENCH))

import energy_sim as es  # noqa: E402

GPU_IDLE_OFF_W = 500 + 8 * 70 - 30  # a gpu-node's idle power less its suspended power


def _job(name: str, gpus: int, submit: float, runtime: float, tasks: int = 1) -> SimJob:
    group = TaskGroup("main", tasks, Resources.parse({"cpu": 1, "nvidia.com/gpu": gpus}))
    spec = JobSpec(name, (group,), walltime_s=runtime, submit_time=submit)
    return SimJob(spec, runtime)


def _always_on(spans: dict[str, tuple[float, float]]) -> es.Outcome:
    report = PowerReport("always-on", 0.0, 1000.0, 1.0, {}, {"idle": 0.0}, 0, 0, 0)
    return es.Outcome("t", "always-on", report, 3, 0.0, 0.0, 0.0, [], spans=spans)


def test_packing_bound_keeps_powered_only_what_the_running_jobs_fill() -> None:
    jobs = (_job("a", 4, 0, 500), _job("b", 4, 100, 500), _job("c", 8, 200, 100))
    case = es.Case("t", "gpu", es.gpu_nodes(3, 8), jobs, (0.0, 1000.0), "")
    base = _always_on({"a": (0.0, 500.0), "b": (100.0, 600.0), "c": (200.0, 300.0)})
    # half a node, one, two (200-300 s), one, half, none: 700 node-s needed of 3 × 1,000
    assert es.packing_bound(case, base) == pytest.approx(2300 * GPU_IDLE_OFF_W / 3.6e6)
    # only the metering window counts: from 150 s on, 550 node-s needed of 3 × 850
    later = replace(case, meter=(150.0, 1000.0))
    assert es.packing_bound(later, base) == pytest.approx(2000 * GPU_IDLE_OFF_W / 3.6e6)
    with pytest.raises(ValueError, match="from always-on"):
        es.packing_bound(case, replace(base, policy="surge + best-fit"))
    # a run of another placement is still always-on
    assert es.packing_bound(case, replace(base, policy="always-on + best-fit")) > 0


def test_the_placement_reaches_the_core_and_best_fit_packs() -> None:
    # a whole-node job ends at 50 s and leaves g0000 empty while g0001 runs 4 of 8 GPUs; the
    # 2-GPU job of 100 s: first-fit takes the empty g0000 (two nodes busy), best-fit g0001
    jobs = (_job("whole", 8, 0, 50), _job("half", 4, 0, 5000), _job("small", 2, 100, 1000))
    case = es.Case("t", "gpu", es.gpu_nodes(2, 8), jobs, (0.0, 5000.0), "")
    busiest = {}
    for placement in ("first-fit", "best-fit"):
        out = es.run_policy(case, "always-on", SavingConfig(), 0.5, placement=placement)
        assert out.placement == placement and set(out.spans) == {"whole", "half", "small"}
        busiest[placement] = max(sum(b) for t, b in out.pool_busy if 120 <= t <= 1000)
    assert busiest == {"first-fit": 2, "best-fit": 1}


def test_verdict_of_the_other_placement_against_either_idle_timeout() -> None:
    def r(policy: str, kwh: float, saved: float, wait: float, more: float) -> dict[str, object]:
        return {
            "policy": policy,
            "kwh": kwh,
            "saved": saved,
            "wait_mean_s": wait,
            "more_wait": more,
        }

    rows = [r("idle-timeout", 70.0, 0.30, 200.0, 0.9)]
    rows += [r(p, 90.0, 0.1, 300.0, 0.5) for p in es.CANDIDATES]
    rows += [r("idle-timeout + best-fit", 66.0, 0.34, 190.0, 0.8)]
    rows += [r(f"{p} + best-fit", 68.0, 0.32, 104.0, 0.04) for p in es.CANDIDATES]
    plain = es.verdict(rows, " + best-fit")
    assert set(plain) == {f"{p} + best-fit" for p in es.CANDIDATES}
    assert all(plain["surge + best-fit"].values())  # beats first-fit idle-timeout on both
    same = es.verdict(rows, " + best-fit", "idle-timeout + best-fit")
    assert same["surge + best-fit"]["beats_idle_timeout_energy"] is False  # 68 > 66 kWh
    assert same["surge + best-fit"]["beats_idle_timeout_wait"] is True


@pytest.mark.parametrize(
    "args",
    [
        ["--placement", "nowhere-fit"],
        ["--with-placement", "first-fit"],  # the same as the default --placement
        ["--placement", "best-fit", "--with-placement", "best-fit"],
    ],
)
def test_a_bad_placement_is_a_usage_error(args: list[str], tmp_path: Path) -> None:
    with pytest.raises(SystemExit) as exit_:
        es.main([*args, "--skip", "swf", "gpu", "vc", "--out", str(tmp_path), "--no-plots"])
    assert exit_.value.code == 2
