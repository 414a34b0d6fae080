"""A waiting ``singleton`` stands for the earlier jobs of its name and user in the core
(core/intake.py ``namesakes``): the later singletons wait on it alone. One that ends without
running (cancelled, rejected) while it still waits hands them back: the later singletons
wait on them themselves, so that no two jobs of the name run at once (Slurm's singleton)."""

from __future__ import annotations

from dataclasses import replace

from tests.builders import cancel, exited, job, node, run_script, submit

from fusesched.model.job import Dependency, DependencyKind, JobSpec
from fusesched.model.phases import JobPhase

THREE = [node(f"n{k}").cpu(4).build() for k in range(3)]
SINGLETON = (Dependency(DependencyKind.SINGLETON),)


def named(job_id: str, at: float, *deps: Dependency) -> JobSpec:
    spec = job(job_id).tasks(1, cpu=4).walltime(50).user("ann").at(at).build()
    return replace(spec, name="x", dependencies=deps)


def test_a_cancelled_singleton_leaves_the_later_ones_behind_what_it_stood_for() -> None:
    run = run_script(
        THREE,
        [
            (0, submit(named("x1", 0))),
            (1, submit(named("r", 1, *SINGLETON))),
            (2, submit(named("s", 2, *SINGLETON))),
        ],
    )
    assert run.core.jobs["s"].waiting_on == {"r"}  # (r stands for x1)
    run.step(3, cancel("r"))
    assert run.phase("s") is JobPhase.PENDING and run.core.jobs["s"].waiting_on == {"x1"}
    run.step(50, exited("x1"))
    assert run.start_times()["s"] == 50


def test_a_rejected_singleton_hands_back_what_it_stood_for() -> None:
    unknown = Dependency(DependencyKind.AFTER_OK, "nope")
    run = run_script(
        THREE, [(0, submit(named("x1", 0))), (1, submit(named("r", 1, *SINGLETON, unknown)))]
    )
    assert "r" in run.rejected()
    run.step(2, submit(named("s", 2, *SINGLETON)))  # (x1 is no longer behind r)
    assert run.core.jobs["s"].waiting_on == {"x1"} and run.phase("s") is JobPhase.PENDING
