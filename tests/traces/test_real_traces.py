"""Every real SWF trace in ../shared loads and replays through the general core."""

from __future__ import annotations

from pathlib import Path

import pytest

from fusesched.policies.registry import CoreConfig
from fusesched.sim.engine import Simulation
from fusesched.sim.metrics import summarize
from fusesched.sim.workload import swf_workload
from fusesched.traces.swf import load_swf

SHARED = Path(__file__).resolve().parents[2].parent / "shared"
TRACES = sorted(
    [*SHARED.glob("traces/pwa-swf/*.swf.gz"), *SHARED.glob("traces/lublin-swf/*.swf")],
    key=lambda p: p.name,
)

pytestmark = pytest.mark.skipif(not TRACES, reason="../shared (real traces) is absent")


@pytest.mark.parametrize("path", TRACES, ids=[p.name for p in TRACES])
def test_trace_loads_and_replays(path: Path) -> None:
    trace = load_swf(path)
    assert len(trace) > 1000
    assert trace.header.max_procs is not None and trace.header.max_procs > 0
    workload = swf_workload(trace, limit=400)
    assert workload.total_cpus == trace.header.max_procs
    result = Simulation(workload.nodes, workload.jobs, CoreConfig(backfill="easy")).run()
    for outcome in result.outcomes:  # every job either ran or was rejected with a reason
        assert outcome.rejected or outcome.end >= outcome.start >= outcome.submit
    metrics = summarize(result.outcomes, result.total_cpus)
    assert metrics.jobs + metrics.rejected == len(workload.jobs)
    assert 0.0 < metrics.utilization <= 1.0
