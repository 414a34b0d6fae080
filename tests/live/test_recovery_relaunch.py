"""A gang adopted after a controller crash restarts in place whole (controller/in_place.py):
its task that failed while no controller listened is launched again with the one still
running, each with its rank, rather than the survivor alone."""

from __future__ import annotations

import time
from pathlib import Path

from .test_recovery import Crashable, crashable, wait_for

__all__ = ["crashable"]  # (the fixture, from the crash tests)


def lines(path: Path) -> list[str]:
    return path.read_text().splitlines() if path.exists() else []


def test_a_gang_restarts_whole_after_a_task_failed_during_the_outage(
    crashable: Crashable, scratch: Path
) -> None:
    client = crashable.client
    flag, failed, marks = scratch / "fail", scratch / "failed", scratch / "marks"
    # run 0: rank 0 fails once the flag is there, rank 1 runs on; run 1: both say who they are
    script = (
        f'echo "$FUSESCHED_RESTART_COUNT $RANK" >> {marks}; '
        '[ "$FUSESCHED_RESTART_COUNT" = 1 ] && exit 0; '
        f'if [ "$RANK" = 0 ]; then while [ ! -e {flag} ]; do sleep 0.05; done; '
        f"touch {failed}; exit 1; fi; exec sleep 60"
    )
    group = {"argv": ["sh", "-c", script], "resources": {"cpu": "1", "memory": "32Mi"}}
    restart = {"mode": "restart-in-place", "backoff_s": 0, "retry_application_failures": True}
    body = {"walltime_s": 120, "restart": restart, "groups": [{**group, "replicas": 2}]}
    job = client.submit(body)
    wait_for("both ranks to start", lambda: len(lines(marks)) == 2)
    crashable.kill_controller()
    flag.touch()
    wait_for("rank 0 to fail", failed.exists)
    time.sleep(0.2)  # (its agent keeps its exit for the next controller)
    crashable.start_controller()
    view = client.wait(job, timeout=60)
    assert view["state"] == "Completed", view
    assert sorted(lines(marks)) == ["0 0", "0 1", "1 0", "1 1"]
