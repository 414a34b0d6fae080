"""Node health: the health-check program (success, failure, timeout) and GPU faults."""

from __future__ import annotations

import sys
import time

import pytest

from fusesched.agent.fake_sensors import FakeSensors
from fusesched.agent.health import (
    XIDS,
    CheckResult,
    HealthCheckProgram,
    HealthMonitor,
    explain_xid,
    gpu_health,
    node_health,
)
from fusesched.agent.sensors import GpuSample


def test_program_success() -> None:
    result = HealthCheckProgram(["sh", "-c", "echo all good"]).run(7.0)
    assert result == CheckResult(True, "all good", 0, result.duration_s, 7.0)


def test_program_failure_gives_its_output_as_reason() -> None:
    result = HealthCheckProgram(["sh", "-c", "echo '/scratch is full' >&2; exit 3"]).run()
    assert not result.healthy and result.exit_code == 3 and result.reason == "/scratch is full"
    silent = HealthCheckProgram(["sh", "-c", "exit 1"]).run()
    assert silent.reason == "health check exited with 1"


def test_program_timeout_kills_the_whole_group() -> None:
    program = HealthCheckProgram(["sh", "-c", "echo checking; sleep 30 & sleep 30"], timeout_s=0.3)
    start = time.monotonic()
    result = program.run()
    assert time.monotonic() - start < 5  # the background sleep did not keep the pipe open
    assert not result.healthy and result.exit_code is None
    assert result.reason.startswith("health check timed out after 0.3 s") and "checking" in (
        result.reason
    )


def test_program_that_cannot_start() -> None:
    result = HealthCheckProgram(["/nonexistent/healthcheck"]).run()
    assert not result.healthy and "cannot start" in result.reason


def test_long_output_is_truncated() -> None:
    code = "print('x' * 5000); raise SystemExit(2)"
    result = HealthCheckProgram([sys.executable, "-c", code]).run()
    assert len(result.reason) == 500 and result.reason.endswith("…")


def test_runs_periodically() -> None:
    now = [0.0]
    program = HealthCheckProgram(["true"], interval_s=60, clock=lambda: now[0])
    first = program.maybe_run(0.0)
    assert first is not None and first.time == 0.0
    assert program.maybe_run(30.0) is first  # not due: the last result
    assert not program.due(59.0) and program.due(60.0)
    later = program.maybe_run(61.0)
    assert later is not None and later.time == 61.0


def test_bad_arguments() -> None:
    with pytest.raises(ValueError):
        HealthCheckProgram([])
    with pytest.raises(ValueError):
        HealthCheckProgram(["true"], timeout_s=0)


def test_gpu_faults_make_the_node_unhealthy() -> None:
    fake = FakeSensors(gpus=4)
    fake.lose_gpu(1)
    fake.xid(0, 79)
    fake.xid(2, 13)  # an application's fault: a warning only
    fake.ecc(3, 2)
    health = node_health(fake.sample_gpus(0.0))
    assert not health.healthy
    assert any("GPU 1" in r and "lost" in r for r in health.reasons)
    assert any("XID 79: GPU has fallen off the bus" in r for r in health.reasons)
    assert any("2 uncorrectable ECC errors" in r for r in health.reasons)
    assert health.warnings == ("GPU 2 (GPU-fake-2): XID 13: " + XIDS[13].meaning,)


def test_healthy_node_and_thresholds() -> None:
    gpus = [GpuSample(0, ecc_uncorrected=1), GpuSample(1, xid_errors=(48,))]
    reasons, _ = gpu_health(gpus, ecc_threshold=1)
    assert reasons == ["GPU 1: XID 48: double-bit ECC error: uncorrectable memory error"]
    assert node_health([GpuSample(0)]).healthy
    assert "not in the table" in explain_xid(9999)
    failed = CheckResult(False, "ib0 down")
    assert node_health([], failed).reasons == ("ib0 down",)


def test_monitor_keeps_an_xid_until_cleared() -> None:
    fake = FakeSensors(gpus=1)
    monitor = HealthMonitor(HealthCheckProgram(["true"]))
    assert monitor.update(fake.sample_gpus(0.0), 0.0).healthy
    fake.xid(0, 95)
    assert not monitor.update(fake.sample_gpus(1.0), 1.0).healthy
    still = monitor.update(fake.sample_gpus(2.0), 2.0)  # the event came once; still unhealthy
    assert not still.healthy and "XID 95" in still.reasons[0]
    monitor.clear()
    assert monitor.update(fake.sample_gpus(3.0), 3.0).healthy
