"""Advance reservations in the simulator: the engine hands them to the core when they are
made, so every start keeps off reserved nodes in a window (checked start by start), a
reservation's jobs run inside it, the same input gives the same schedule, and bad ones are
refused before the run."""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path

import pytest
from typer.testing import CliRunner

from builders import job, nodes
from fusesched.cli.main import app
from fusesched.cli.simulate import run_reserved
from fusesched.model.events import RejectJob, StartJob
from fusesched.model.reservation import Reservation
from fusesched.policies.registry import CoreConfig
from fusesched.sim.engine import SimJob, SimResult, Simulation
from fusesched.sim.power import PowerSetup, PowerSim
from fusesched.sim.reservations import SimReservation, parse_reservation
from fusesched.sim.workload import synthetic_workload

WORKLOAD = synthetic_workload(jobs=400, nodes=16, seed=5)  # nodes n00000 … n00015
MAINT = Reservation("maint", tuple(f"n{i:05d}" for i in range(8)), 20_000.0, 50_000.0)


def starts_on_reserved(result: SimResult, res: Reservation) -> list[tuple[str, float]]:
    """(job, start) of every start on one of ``res``'s nodes; fails on one that breaks the
    rule (inside the window, or running into it by its time limit)."""
    start_of = {o.job_id: o.start for o in result.outcomes}
    walltime = {j.spec.id: j.spec.walltime_s for j in WORKLOAD.jobs}
    found = []
    for decision in result.log:
        if not isinstance(decision, StartJob):
            continue
        used = {name for g in decision.groups for name in g.nodes}
        if used.isdisjoint(res.nodes):
            continue
        t, limit = start_of[decision.job_id], walltime[decision.job_id]
        assert limit is not None
        assert t + limit < res.start or t >= res.end, (decision.job_id, t, limit)
        found.append((decision.job_id, t))
    return found


@pytest.mark.parametrize("backfill", ["none", "easy", "conservative"])
def test_every_start_keeps_off_the_reserved_nodes_in_the_window(backfill: str) -> None:
    config = CoreConfig(backfill=backfill)
    plain = Simulation(WORKLOAD.nodes, WORKLOAD.jobs, config, keep_log=True).run()
    booked = [SimReservation(MAINT)]
    held = Simulation(WORKLOAD.nodes, WORKLOAD.jobs, config, keep_log=True, reservations=booked)
    result = held.run()
    assert all(o.start == o.start and not o.rejected for o in result.outcomes)
    on_reserved = starts_on_reserved(result, MAINT)  # (asserts the rule for each)
    assert any(t < MAINT.start for _, t in on_reserved)  # short jobs before the window
    assert any(t >= MAINT.end for _, t in on_reserved)  # and any job after it
    # without the reservation some jobs do run there in the window
    with pytest.raises(AssertionError):
        starts_on_reserved(plain, MAINT)
    wait = sum(o.start - o.submit for o in result.outcomes)
    assert wait > sum(o.start - o.submit for o in plain.outcomes)
    again = Simulation(WORKLOAD.nodes, WORKLOAD.jobs, config, keep_log=True, reservations=booked)
    assert again.run().log == result.log  # the same input, the same schedule


def test_a_reservations_jobs_run_inside_it_and_late_ones_are_rejected() -> None:
    cluster = nodes(2, cpu=4)  # n0, n1
    res = Reservation("ml", ("n1",), 100.0, 400.0, users=("alice",))
    jobs = [
        SimJob(job("a").tasks(1, cpu=4).walltime(200).user("alice").at(0).build(), 150.0),
        SimJob(job("b").tasks(1, cpu=4).walltime(200).user("bob").at(0).build(), 150.0),
        SimJob(job("c").tasks(1, cpu=4).walltime(1000).user("bob").at(1).build(), 50.0),
        SimJob(job("d").tasks(1, cpu=4).walltime(50).user("alice").at(390).build(), 50.0),
    ]
    for k in (0, 3):  # submitted into the reservation
        spec = dataclasses.replace(jobs[k].spec, reservation="ml")
        jobs[k] = SimJob(spec, jobs[k].runtime)
    # d arrives at 390 (a ran on n1 until 250; the window ends at 400): it gets n1
    sim = Simulation(cluster, jobs, CoreConfig(), keep_log=True, reservations=[SimReservation(res)])
    result = sim.run()
    by_id = {o.job_id: o for o in result.outcomes}
    on = {d.job_id: d.groups[0].nodes for d in result.log if isinstance(d, StartJob)}
    assert (by_id["a"].start, on["a"]) == (100.0, ("n1",))  # not before the window opens
    assert (by_id["b"].start, on["b"]) == (0.0, ("n0",))
    assert (by_id["c"].start, on["c"]) == (150.0, ("n0",))  # kept off n1: it waits for n0
    assert (by_id["d"].start, on["d"]) == (390.0, ("n1",))
    # without the reservation given, jobs naming it are rejected at once
    plain = Simulation(cluster, jobs, CoreConfig(), keep_log=True).run()
    rejected = {d.job_id for d in plain.log if isinstance(d, RejectJob)}
    assert rejected == {"a", "d"}


def test_a_window_after_the_last_job_changes_nothing_not_even_the_energy() -> None:
    far = Reservation("later", ("n00000",), 1e8, 2e8)
    setup = PowerSetup(policy="always-on")
    runs = []
    for booked in ([], [SimReservation(far)]):
        sim = Simulation(
            WORKLOAD.nodes, WORKLOAD.jobs, CoreConfig(), power=PowerSim(setup), reservations=booked
        )
        runs.append(sim.run())
    plain, held = runs
    assert [(o.start, o.end) for o in plain.outcomes] == [(o.start, o.end) for o in held.outcomes]
    assert plain.power is not None and held.power is not None
    assert held.power.energy_kwh == plain.power.energy_kwh  # (no idle metering until 2e8)


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("m:n[1-2]:10:+20", Reservation("m", ("n1", "n2"), 10.0, 30.0)),
        (
            "m:n1,n3:0:5:users=a,b:tenants=t",
            Reservation("m", ("n1", "n3"), 0, 5, ("a", "b"), ("t",)),
        ),
    ],
)
def test_the_command_line_form(text: str, expected: Reservation) -> None:
    assert parse_reservation(text) == expected


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("m:n1:10", "expected NAME:NODES:START:END"),
        ("m:n[1-:0:5", "nodes:"),
        ("m:n1:soon:5", "START 'soon' is not a number of seconds"),
        ("m:n1:0:inf", "END 'inf' is not a number of seconds"),
        ("m:n1:0:1e400", "END must be a finite number"),
        ("m:n1:5:1", "the end (1) must come after the start (5)"),
        ("m:n1:0:5:people=a", "'people=a' is not users=A,B or tenants=T"),
        ("bad name:n1:0:5", "reservation name 'bad name'"),
        # numbers in ASCII digits only: float() would take these
        ("m:n1:\u0661\u0660:20", "START '\u0661\u0660' is not a number of seconds"),
        ("m:n1:1_0:20", "START '1_0' is not a number of seconds"),
        ("m:n1: 10:20", "START ' 10' is not a number of seconds"),
        ("m:n1:0:\uff15", "END '\uff15' is not a number of seconds"),
        ("m:n1:0:++5", "the duration '+5' is not a number of seconds"),
        ("m:n1:0:5:users=a:users=b", "users is given twice"),  # (not the last one silently)
    ],
)
def test_a_bad_command_line_form_says_what_is_wrong(text: str, expected: str) -> None:
    with pytest.raises(ValueError) as caught:
        parse_reservation(text)
    assert expected in str(caught.value)


@pytest.mark.parametrize(
    ("booked", "expected"),
    [
        ([Reservation("m", ("x9",), 0, 5)], "reservation m: no node x9 in the simulated cluster"),
        (
            [Reservation("a", ("n00001",), 0, 50), Reservation("b", ("n00001",), 40, 90)],
            "reservations a and b hold n00001 in overlapping windows",
        ),
        ([Reservation("a", ("n00001",), 0, 5)] * 2, "reservation a is given twice"),
        # made at 0, it would hold nothing (live: refused, its end has passed)
        (
            [Reservation("a", ("n00001",), -10, -5)],
            r"reservation a: it ends at -5 s, not after it is made \(0 s\)",
        ),
    ],
)
def test_what_the_core_would_refuse_is_refused_before_the_run(
    booked: list[Reservation], expected: str
) -> None:
    with pytest.raises(ValueError, match=expected):
        Simulation(
            WORKLOAD.nodes,
            WORKLOAD.jobs,
            CoreConfig(),
            reservations=[SimReservation(r) for r in booked],
        )


# ------------------------------------------------------------------------ fusesched simulate


def test_simulate_runs_each_policy_without_and_with_the_reservations(tmp_path: Path) -> None:
    out = tmp_path / "out.json"
    args = ["simulate", "synthetic", "-p", "fcfs,sjf", "--json", str(out)]
    args += ["--reservation", "maint:n[00000-00031]:20000:+40000", "--plot", str(tmp_path / "p")]
    result = CliRunner().invoke(app, args, env={"COLUMNS": "200"})
    assert result.exit_code == 0, result.output
    assert "delayed jobs" in result.output and "maint" in result.output
    runs = json.loads(out.read_text())["results"]
    assert [(r["policy"], "reservations" in r) for r in runs] == [
        ("fcfs", False),
        ("fcfs", True),
        ("sjf", False),
        ("sjf", True),
    ]
    for plain, held in (runs[0:2], runs[2:4]):
        assert held["reservations"] == [
            {"name": "maint", "nodes": 32, "start": 20000.0, "end": 60000.0}
        ]
        assert held["delayed_jobs"] > 0 and held["delay_s"] > 0
        change = held["metrics"]["avg_wait_s"] - plain["metrics"]["avg_wait_s"]
        assert held["wait_change_s"] == pytest.approx(change) and change > 0
    assert (tmp_path / "p.png").read_bytes()[:4] == b"\x89PNG"


@pytest.mark.parametrize(
    ("args", "expected"),
    [
        (["--reservation", "m:x[1-2]:0:10"], "no node x1, x2 in the simulated cluster"),
        (["--reservation", "m:n00001:10"], "expected NAME:NODES:START:END"),
        (["--reservation", "m:n00001:0:9", "--reservation", "m:n00002:0:9"], "m is given twice"),
        (["--protocol", "rlscheduler", "--reservation", "m:n1:0:9"], "does not use --reservation"),
        (["--reservation", "m:n00001:\u0661:9"], "START '\u0661' is not a number of seconds"),
        (["--reservation", "m:n00001:-9:0"], "it ends at 0 s, not after it is made (0 s)"),
    ],
)
def test_simulate_refuses_a_bad_reservation(args: list[str], expected: str) -> None:
    result = CliRunner().invoke(app, ["simulate", "synthetic", *args])
    assert result.exit_code == 2, result.output
    assert expected in " ".join(result.output.split())
    assert "Traceback" not in result.output


def test_each_run_of_a_pair_has_the_seconds_it_took() -> None:
    workload = synthetic_workload(jobs=200, nodes=16, seed=3)
    plain, held = run_reserved(workload, "fcfs", "easy", "first-fit", 0, [MAINT])
    # (each timed on its own, not half of the pair's time each)
    assert plain.extra["seconds"] > 0 and held.extra["seconds"] > 0
    assert "reservations" not in plain.extra and held.extra["reservations"][0]["name"] == "maint"
