"""Chaos (bench/chaos.py, short): under a stream of submissions the controller and the agents,
all real processes, are SIGKILLed and started again several times; at the end every accepted
job is known to the controller exactly once and has ended, and no two runs of a job lived at
the same time.

What counts as ended: Completed, or Failed because the job's restart budget ran out (every job
here may be restarted 5 times, 1 s apart; a job whose tasks are lost with their agent more often
than that fails by its own policy, which is the promise kept, not broken). Any other failure,
a cancel, a job the controller does not know, a duplicate or an overlap fails the test.
A job whose task ended while its agent was dead is run again (its exit was never reported):
at-least-once, counted but allowed, as long as the two runs did not overlap.

The PostgreSQL variant (leader and standby, the chaos kills whichever leads) is skipped when
PostgreSQL is not running at 127.0.0.1:5432.
"""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

from .conftest import drop_postgres, fresh_postgres_url

BENCH = Path(__file__).resolve().parents[2] / "bench"
sys.path.insert(0, str(BENCH))

import chaos  # noqa: E402

# The chaos lasts until two controllers and two agents were SIGKILLed (and started again) and
# 15 submissions were accepted, not a fixed time. Seed 270's first four choices: the leading
# controller twice, then two agents (0.5-1.1 s dead each). (Seed 52 kills a controller about
# a second after an agent's restart: it found a gang whose task the restarted agent lost,
# requeued by a controller killed before it carried the requeue out, then failed "exit -1"
# by the next one; fixed in controller/adoption.py, tests/controller/test_lost_before_restart.py.)
SHORT: dict[str, Any] = {
    "duration": 4.0,
    "min_kills": (2, 2),
    "min_accepted": 15,
    "submit_gap": (0.15, 0.45),
    "chaos_gap": (0.5, 2.0),
    "controller_share": 0.5,
    "plain_share": 0.0,  # every job: 5 restarts, 1 s backoff (the default waits 30 s)
    "long_s": (3.0, 5.0),  # the long jobs (15 %): outlive an agent killed and started again
    "cpu": 5,  # 15 task slots: submissions do not queue up behind the controller's outages
    "drain_s": 150.0,
}
SEED = 270


def check(report: dict[str, Any]) -> None:
    print()
    print(chaos.table(report))
    print("\n".join(report["events"]))
    assert chaos.problems(report) == [], chaos.problems(report)
    assert report["accepted"] >= 15, report
    assert report["controller_kills"] >= 2 and report["agent_kills"] >= 2, report["events"]
    # every submission is accounted for: accepted (or uncertain and found) jobs all ended
    known = report["accepted"] + report["uncertain_accepted"]
    assert report["accounted"] == known, report
    assert report["completed"] + report["failed"] == known, report


def test_chaos_sqlite() -> None:
    check(chaos.run(chaos.Options(seed=SEED, **SHORT)))


def test_chaos_standby_postgres() -> None:
    url = fresh_postgres_url()
    try:
        check(chaos.run(chaos.Options(seed=SEED, db=url, standby=True, **SHORT)))
    finally:
        drop_postgres(url)
