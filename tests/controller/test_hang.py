"""Hang detection (hung vs quiet-but-healthy) and restart decisions."""

from __future__ import annotations

import math
from collections.abc import Callable

import pytest
from hypothesis import given
from hypothesis import strategies as st

from fusesched.agent.fake_sensors import FakeSensors
from fusesched.agent.sample_window import SampleWindow
from fusesched.agent.sensors import TaskWatch, collect
from fusesched.controller.hang import (
    DEFAULT_HANG_POLICIES,
    Action,
    ActionKind,
    Failure,
    FailureKind,
    HangPolicy,
    RestartMode,
    RestartPolicy,
    detect_hang,
    next_action,
)
from fusesched.model.job import JobType

TRAIN = DEFAULT_HANG_POLICIES[JobType.AI_TRAIN]  # 30 min window, 10 min start-up grace
HPC = DEFAULT_HANG_POLICIES[JobType.HPC]
Step = Callable[[FakeSensors, int, float], None]


def run(step: Step, *, minutes: int = 60, gpus: int = 2, every_s: float = 60.0) -> SampleWindow:
    """Sample a task every ``every_s`` for ``minutes``, calling ``step`` before each sample."""
    fake = FakeSensors(gpus=gpus)
    watch = TaskWatch("j.0.0", gpu_indices=tuple(range(gpus)))
    window = SampleWindow("j.0.0")
    for i in range(int(minutes * 60 / every_s) + 1):
        now = i * every_s
        step(fake, i, now)
        tasks, _ = collect(fake, [watch], now)
        window.push(tasks[0])
    return window


def stuck_at(util: float) -> Step:
    def step(fake: FakeSensors, i: int, now: float) -> None:
        for g in fake.gpus:
            fake.gpu(g, util=util, memory=40 * 2**30)
        fake.advance("j.0.0", cpu=30.0)  # NCCL's proxy thread spins: CPU advances

    return step


def training(i: int) -> float:
    return 60.0 + 35.0 * ((i * 7) % 5) / 4  # utilisation that moves between steps


def healthy_quiet_training(fake: FakeSensors, i: int, now: float) -> None:
    for g in fake.gpus:
        fake.gpu(g, util=training(i), memory=40 * 2**30 + (i % 3) * 2**28)


def with_log(fake: FakeSensors, i: int, now: float) -> None:
    stuck_at(100.0)(fake, i, now)
    if i % 10 == 0:
        fake.advance("j.0.0", log=80)  # a progress line every ten minutes


def with_io(fake: FakeSensors, i: int, now: float) -> None:
    stuck_at(100.0)(fake, i, now)
    fake.advance("j.0.0", io=2**20)  # reading the data set


def with_checkpoints(fake: FakeSensors, i: int, now: float) -> None:
    stuck_at(100.0)(fake, i, now)
    if i % 20 == 0:
        fake.checkpoint("j.0.0", now)


def old_checkpoint(fake: FakeSensors, i: int, now: float) -> None:
    stuck_at(0.0)(fake, i, now)
    fake.checkpoint("j.0.0", -3 * 3600.0)


def fresh_unchanged_checkpoint(fake: FakeSensors, i: int, now: float) -> None:
    stuck_at(0.0)(fake, i, now)
    fake.checkpoint("j.0.0", 0.0)  # written at start, younger than checkpoint_age_s


def cpu_busy(fake: FakeSensors, i: int, now: float) -> None:
    fake.advance("j.0.0", cpu=60.0)  # compute-bound, prints nothing


def cpu_stuck(fake: FakeSensors, i: int, now: float) -> None:
    fake.advance("j.0.0", cpu=0.01)  # blocked in a receive that never comes


def gpu_lost(fake: FakeSensors, i: int, now: float) -> None:
    stuck_at(0.0)(fake, i, now)
    if i == 50:
        fake.lose_gpu(1)


def ended(fake: FakeSensors, i: int, now: float) -> None:
    stuck_at(0.0)(fake, i, now)
    if i == 60:
        fake.end("j.0.0")


CASES: list[tuple[str, Step, int, HangPolicy, bool, str]] = [
    # name, behaviour, GPUs, policy, hung?, a word of the reason
    ("NCCL stuck at 100 %", stuck_at(100.0), 2, TRAIN, True, "gpu_util quiet"),
    ("stuck at 0 %", stuck_at(0.0), 2, TRAIN, True, "hung: no progress for 30 min"),
    ("checkpoint 3 h old", old_checkpoint, 2, TRAIN, True, "checkpoint quiet"),
    ("quiet training, GPU busy", healthy_quiet_training, 2, TRAIN, False, "gpu_util active"),
    ("logs a line now and then", with_log, 2, TRAIN, False, "log active"),
    ("reads its data", with_io, 2, TRAIN, False, "io active"),
    ("writes checkpoints", with_checkpoints, 2, TRAIN, False, "checkpoint active"),
    ("checkpoint young", fresh_unchanged_checkpoint, 2, TRAIN, False, "checkpoint active"),
    ("CPU job computing silently", cpu_busy, 0, HPC, False, "cpu active"),
    ("CPU job blocked", cpu_stuck, 0, HPC, True, "cpu quiet"),
    ("a GPU fell off", gpu_lost, 2, TRAIN, False, "hardware"),
    ("process gone", ended, 2, TRAIN, False, "no process left"),
    ("inference idle", stuck_at(0.0), 2, DEFAULT_HANG_POLICIES[JobType.AI_INFER], False, "off"),
]


@pytest.mark.parametrize(("name", "step", "gpus", "policy", "hung", "word"), CASES)
def test_hang_table(
    name: str, step: Step, gpus: int, policy: HangPolicy, hung: bool, word: str
) -> None:
    minutes = 90 if policy is HPC else 60
    verdict = detect_hang(run(step, gpus=gpus, minutes=minutes), policy)
    assert verdict.hung is hung, verdict.reason
    assert word in verdict.reason


def test_no_verdict_without_enough_history() -> None:
    early = detect_hang(run(stuck_at(100.0), minutes=5), TRAIN)
    assert not early.hung and "start-up grace" in early.reason
    short = detect_hang(run(stuck_at(100.0), minutes=20), HangPolicy(startup_s=0))
    assert not short.hung and "do not cover" in short.reason
    assert not detect_hang(SampleWindow("x"), TRAIN).hung


def test_min_signals() -> None:
    strict = HangPolicy(window_s=600, startup_s=0, min_signals=5)
    verdict = detect_hang(run(cpu_stuck, gpus=0, minutes=15), strict)
    assert not verdict.hung and "3 signals apply, 5 must agree" in verdict.reason
    with pytest.raises(ValueError):
        HangPolicy(min_signals=0)


def test_signals_are_reported() -> None:
    verdict = detect_hang(run(stuck_at(100.0)), TRAIN)
    assert {s.name for s in verdict.signals} == {"io", "log", "gpu_util", "gpu_memory"}
    assert all(s.quiet for s in verdict.signals)


# --- restart decisions -----------------------------------------------------------------------

REQUEUE = RestartPolicy(max_restarts=3, backoff_s=30, backoff_factor=2, max_backoff_s=100)


def test_backoff_and_budget() -> None:
    hang = Failure(FailureKind.HANG, "n1", "hung")
    actions = [next_action(hang, k, REQUEUE) for k in range(4)]
    assert [a.kind for a in actions] == [ActionKind.REQUEUE] * 3 + [ActionKind.FAIL]
    assert [a.delay_s for a in actions[:3]] == [30, 60, 100]
    assert [a.attempt for a in actions[:3]] == [1, 2, 3]
    assert actions[0].exclude_nodes == ("n1",)
    assert "budget of 3 restarts exhausted" in actions[3].reason


def test_in_place_unless_the_hardware_broke() -> None:
    policy = RestartPolicy(RestartMode.RESTART_IN_PLACE)
    assert next_action(Failure(FailureKind.HANG, "n1"), 0, policy).kind is (
        ActionKind.RESTART_IN_PLACE
    )
    gpu = next_action(Failure(FailureKind.GPU, "n2", "XID 79"), 0, policy)
    assert gpu == Action(ActionKind.REQUEUE, 30.0, ("n2",), "XID 79: requeued", 1)


def test_notify_and_application_failures() -> None:
    notify = RestartPolicy(RestartMode.NOTIFY)
    assert next_action(Failure(FailureKind.HANG), 0, notify).kind is ActionKind.NOTIFY
    assert next_action(Failure(FailureKind.NODE), 0, notify).kind is ActionKind.FAIL
    assert next_action(Failure(FailureKind.EXIT), 0, REQUEUE).kind is ActionKind.FAIL
    retry = RestartPolicy(retry_application_failures=True)
    exit_action = next_action(Failure(FailureKind.EXIT, "n1"), 0, retry)
    assert exit_action.kind is ActionKind.REQUEUE and exit_action.exclude_nodes == ()
    for final in (FailureKind.OOM, FailureKind.WALLTIME, FailureKind.CANCELLED):
        assert next_action(Failure(final), 0, retry).kind is ActionKind.FAIL
    with pytest.raises(ValueError):
        next_action(Failure(FailureKind.HANG), -1, REQUEUE)


@given(st.floats(0, 1e4), st.floats(1, 10), st.floats(0, 1e5), st.integers(0, 10_000))
def test_backoff_is_monotone_and_capped(base: float, factor: float, cap: float, n: int) -> None:
    policy = RestartPolicy(backoff_s=base, backoff_factor=factor, max_backoff_s=cap)
    assert 0 <= policy.backoff(n) <= policy.backoff(n + 1) <= cap or math.isclose(
        policy.backoff(n), policy.backoff(n + 1)
    )
