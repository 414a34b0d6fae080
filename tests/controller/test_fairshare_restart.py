"""Fair share survives a controller restart: the restarted controller rebuilds each account's
decayed usage from the runs the store shows ended (controller/past_usage.py), and the jobs
it adopts are charged from their start as before, so its usage and factors are those of a
controller that never restarted. Two controllers run the same jobs on the same clock, each
on its own store; one of them is restarted while a GPU job runs. The agents are played by
hand. On SQLite and on PostgreSQL."""

from __future__ import annotations

import math
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml
from fastapi.testclient import TestClient
from sqlalchemy import update
from tests.builders import Clock, two_tenant_tenancy
from tests.controller.test_restart_always import exits
from tests.controller.test_restart_always import launched as launched_on
from tests.controller.test_running_limit import beat
from tests.store.conftest import pg_server, url  # noqa: F401 (fixtures: SQLite, PostgreSQL)

from fusesched.api.app import create_app
from fusesched.api.wire import DeviceInfo, NodeInventory, TaskLaunch
from fusesched.controller.logs import LogStore
from fusesched.controller.persist import Persistence
from fusesched.controller.reconfigure import read_tenancy_file, reconfigure
from fusesched.controller.records import ControllerConfig
from fusesched.controller.service import Controller
from fusesched.model.phases import JobPhase
from fusesched.policies.registry import CoreConfig
from fusesched.store.schema import jobs
from fusesched.submit.request import JobRequest

H = 3600.0
TENANCY = two_tenant_tenancy({"cpu": 64, "nvidia.com/gpu": 8})
NODE = NodeInventory(
    name="n0",
    resources={"cpu": "16", "memory": "64Gi", "nvidia.com/gpu": "4"},
    devices=[DeviceInfo(index=i, uuid=f"GPU-{i}", model="H100") for i in range(4)],
    cpu_ids=list(range(16)),
)


def tenancy_file(logs: Path, half_life_s: float, **scheduling: float) -> Path:
    """The tenancy file of the controller whose logs are ``logs`` (beside them), saying
    ``half_life_s`` and ``scheduling``."""
    path = logs.parent / f"{logs.name}-tenancy.yaml"
    body = {"half_life_s": half_life_s, "recalc_s": 1.0, **scheduling}
    path.write_text(yaml.safe_dump({**TENANCY, "scheduling": body}))
    return path


def controller(db: str, logs: Path, clock: Clock, half_life_s: float = 2 * H) -> Controller:
    path = tenancy_file(logs, half_life_s)
    core = CoreConfig(placement="best-fit", tenancy=read_tenancy_file(path))
    config = ControllerConfig(core=core, tenancy_file=path)
    return Controller(Persistence(db), LogStore(logs), config, clock=clock)


def submit(ctl: Controller, tenant: str, queue: str, user: str, **resources: str) -> str:
    request = JobRequest.model_validate(
        {
            "tenant": tenant,
            "queue": queue,
            "user": user,
            "groups": [{"resources": resources, "argv": ["run"]}],
        }
    )
    (job,) = ctl.submit([request])
    return job


class Run:
    """The same jobs, run on one controller (whose ``ctl`` a restart replaces)."""

    def __init__(self, db: str, logs: Path, clock: Clock, half_life_s: float = 2 * H) -> None:
        self.db, self.logs, self.clock, self.half_life_s = db, logs, clock, half_life_s
        self.ctl = controller(db, logs, clock, half_life_s)
        self.ctl.register(NODE)
        self.ctl.run_cycle()
        self.tasks: dict[str, TaskLaunch] = {}  # name -> its launch

    def submit_and_start(self, jobs: dict[str, tuple[str, str, str, dict[str, str]]]) -> None:
        ids = {submit(self.ctl, *job[:3], **job[3]): name for name, job in jobs.items()}
        launched = launched_on(self.ctl, self.running())
        assert sorted(t.job_id for t in launched) == sorted(ids)
        self.tasks.update((ids[t.job_id], t) for t in launched)

    def running(self) -> list[str]:
        return [t.task_id for t in self.tasks.values()]

    def end(self, name: str) -> None:
        task = self.tasks.pop(name)
        exits(self.ctl, task.task_id, 0, self.running())
        self.ctl.run_cycle()

    def restart(self) -> None:
        self.ctl.persist.close()
        self.ctl = controller(self.db, self.logs, self.clock, self.half_life_s)
        # the agent gives back the launches of the tasks it still runs (their GPUs too)
        self.ctl.register(NODE.model_copy(update={"running": list(self.tasks.values())}))
        beat(self.ctl, self.running())
        self.ctl.run_cycle()
        for task in self.tasks.values():  # adopted
            assert self.ctl.core.jobs[task.job_id].phase is JobPhase.RUNNING

    def shares(self) -> list[dict[str, Any]]:
        self.ctl.run_cycle()  # (running jobs charged up to now)
        answer = TestClient(create_app(self.ctl)).get("/v1/fairshare")
        assert answer.status_code == 200, answer.text
        rows: list[dict[str, Any]] = answer.json()
        return rows

    def usage(self) -> dict[tuple[str, ...], float]:
        gate = self.ctl.core.tenants
        assert gate is not None
        return gate.tracker.snapshot(self.clock.now)


def same(a: Run, b: Run) -> None:
    """``a`` and ``b`` show the same fair share: usage within float error, same factors."""
    shown_a, shown_b = a.shares(), b.shares()
    assert [r["account"] for r in shown_a] == [r["account"] for r in shown_b]
    for ra, rb in zip(shown_a, shown_b, strict=True):
        assert ra["usage"] == pytest.approx(rb["usage"], abs=2e-3), ra["account"]
        assert (ra["position"], ra["factor"]) == (rb["position"], rb["factor"]), ra["account"]
    usage_a, usage_b = a.usage(), b.usage()
    assert usage_a.keys() == usage_b.keys()
    for account, value in usage_a.items():
        assert value == pytest.approx(usage_b[account], rel=1e-9), account


@pytest.fixture
def runs(url: str, tmp_path: Path) -> Iterator[tuple[Run, Run, Clock]]:  # noqa: F811
    """A controller that is never restarted (on SQLite) and one that will be (on ``url``)."""
    clock = Clock()
    kept = Run(f"sqlite:///{tmp_path / 'kept.sqlite'}", tmp_path / "kept-logs", clock)
    restarted = Run(url, tmp_path / "logs", clock)
    yield kept, restarted, clock
    kept.ctl.persist.close()
    restarted.ctl.persist.close()


def both(kept: Run, restarted: Run, step: str, *args: Any) -> None:
    for run in (kept, restarted):
        getattr(run, step)(*args)


def test_usage_and_factors_after_a_restart_are_those_of_a_controller_never_restarted(
    runs: tuple[Run, Run, Clock],
) -> None:
    kept, restarted, clock = runs
    gpu = {"cpu": "2", "nvidia.com/gpu": "2"}
    first = {
        "alice-gpu": ("ml", "train", "alice", gpu),
        "bob-cpu": ("ml", "train", "bob", {"cpu": "2"}),
        "carol-cpu": ("phys", "sim", "carol", {"cpu": "8", "memory": "1Gi"}),
    }
    both(kept, restarted, "submit_and_start", first)
    clock.now += 1 * H
    both(kept, restarted, "end", "bob-cpu")
    clock.now += 2 * H
    both(kept, restarted, "end", "alice-gpu")
    clock.now += 0.5 * H
    both(kept, restarted, "end", "carol-cpu")
    clock.now += 0.5 * H
    later = {"carol-gpu": ("phys", "sim", "carol", {"cpu": "1", "nvidia.com/gpu": "1"})}
    both(kept, restarted, "submit_and_start", later)
    clock.now += 1 * H
    same(kept, restarted)
    usage = restarted.usage()
    restarted.restart()  # carol's GPU job still runs
    same(kept, restarted)
    assert restarted.usage() == pytest.approx(usage, rel=1e-9)  # (not reset)
    clock.now += 1.5 * H
    both(kept, restarted, "end", "carol-gpu")
    same(kept, restarted)
    # no job ran for alice or bob since: their usage only decayed (2 h half-life)
    assert restarted.usage()[("lab", "ml")] == pytest.approx(
        usage[("lab", "ml")] * 0.5 ** (1.5 * H / (2 * H)), rel=1e-9
    )


def test_a_restart_keeps_usage_without_decay(url: str, tmp_path: Path) -> None:  # noqa: F811
    """With ``half_life_s`` infinite every ended run counts in full, however old."""
    clock = Clock()
    run = Run(url, tmp_path / "logs", clock, half_life_s=math.inf)
    try:
        run.submit_and_start({"old": ("ml", "train", "alice", {"cpu": "4"})})
        clock.now += 1 * H
        run.end("old")
        clock.now += 10_000 * 86400.0  # decades later
        run.restart()
        assert run.usage()[("lab", "ml", "train", "alice")] == pytest.approx(4 * H, rel=1e-12)
    finally:
        run.ctl.persist.close()


def test_runs_too_old_to_matter_are_not_read(url: str, tmp_path: Path) -> None:  # noqa: F811
    """A run that ended more than 20 half-lives before the restart weighs under 2^-20 of
    what it did (a job of 1,000 GPU-hours then counts less than a core-minute now): it is
    not read. One that ended just within that does count."""
    clock = Clock()
    run = Run(url, tmp_path / "logs", clock, half_life_s=1 * H)
    try:
        run.submit_and_start({"old": ("ml", "train", "alice", {"cpu": "4"})})
        clock.now += 1 * H
        run.end("old")
        run.submit_and_start({"recent": ("ml", "train", "bob", {"cpu": "4"})})
        clock.now += 1 * H
        run.end("recent")
        clock.now += 19.5 * H  # alice's ended 20.5 half-lives ago, bob's 19.5
        run.restart()
        usage = run.usage()
        assert ("lab", "ml", "train", "alice") not in usage
        assert usage[("lab", "ml", "train", "bob")] > 0
    finally:
        run.ctl.persist.close()


def test_the_standings_are_back_before_the_first_cycle(url: str, tmp_path: Path) -> None:  # noqa: F811
    """The past usage is read from the store as the controller starts: the standings are
    right before its first cycle."""
    clock = Clock()
    run = Run(url, tmp_path / "logs", clock)
    try:
        run.submit_and_start({"a": ("ml", "train", "alice", {"cpu": "4"})})
        clock.now += 1 * H
        run.end("a")
        before = run.usage()
        run.ctl.persist.close()
        run.ctl = controller(url, tmp_path / "logs", clock)
        assert run.usage() == pytest.approx(before, rel=1e-9)
    finally:
        run.ctl.persist.close()


def test_a_reconfiguration_after_a_restart_carries_the_usage_recalled(
    url: str,  # noqa: F811
    tmp_path: Path,
) -> None:
    """``fusesched reconfigure`` with another half-life and GPU weight keeps each account's
    usage as it stands (then decays it with the new half-life), after a restart too."""
    clock = Clock()
    run = Run(url, tmp_path / "logs", clock)
    try:
        run.submit_and_start({"a": ("ml", "train", "alice", {"cpu": "2", "nvidia.com/gpu": "1"})})
        clock.now += 1 * H
        run.end("a")
        clock.now += 1 * H
        before = run.usage()
        run.restart()
        tenancy_file(tmp_path / "logs", 4 * H, gpu_weight=5.0)
        assert reconfigure(run.ctl).changes  # (the file now says 4 h and 5)
        assert run.usage() == pytest.approx(before, rel=1e-9)
        clock.now += 4 * H
        halved = {a: v / 2 for a, v in before.items()}
        assert run.usage() == pytest.approx(halved, rel=1e-9)
    finally:
        run.ctl.persist.close()


def test_a_job_row_whose_request_cannot_be_read_does_not_stop_the_start(
    url: str,  # noqa: F811
    tmp_path: Path,
) -> None:
    """A finished job whose stored request is malformed (written by hand, or by another
    version) is charged nothing; the controller starts and recalls the other runs."""
    clock = Clock()
    run = Run(url, tmp_path / "logs", clock)
    try:
        run.submit_and_start(
            {
                "a": ("ml", "train", "alice", {"cpu": "4"}),
                "b": ("ml", "train", "bob", {"cpu": "4"}),
            }
        )
        clock.now += 1 * H
        run.end("a")
        bob = run.tasks["b"].job_id
        run.end("b")
        malformed = {"groups": [{"replicas": "two", "resources": "cpu=4"}]}
        with run.ctl.persist.store._engine.begin() as conn:
            conn.execute(update(jobs).where(jobs.c.id == bob).values(request=malformed))
        before = run.usage()
        run.restart()
        usage = run.usage()
        alice = ("lab", "ml", "train", "alice")
        assert usage[alice] == pytest.approx(before[alice], rel=1e-9)
        assert ("lab", "ml", "train", "bob") not in usage
    finally:
        run.ctl.persist.close()


def test_a_job_row_with_an_infinite_start_does_not_stop_the_start(
    url: str,  # noqa: F811
    tmp_path: Path,
) -> None:
    """Without decay a run stored as started at ``-inf`` would weigh without bound: it
    counts nothing, and the controller starts and recalls the other runs."""
    clock = Clock()
    run = Run(url, tmp_path / "logs", clock, half_life_s=math.inf)
    try:
        run.submit_and_start(
            {
                "a": ("ml", "train", "alice", {"cpu": "4"}),
                "b": ("ml", "train", "bob", {"cpu": "4"}),
            }
        )
        clock.now += 1 * H
        run.end("a")
        bob = run.tasks["b"].job_id
        run.end("b")
        with run.ctl.persist.store._engine.begin() as conn:
            conn.execute(update(jobs).where(jobs.c.id == bob).values(start_time=-math.inf))
        run.restart()
        usage = run.usage()
        assert usage[("lab", "ml", "train", "alice")] == pytest.approx(4 * H, rel=1e-12)
        assert ("lab", "ml", "train", "bob") not in usage
    finally:
        run.ctl.persist.close()
