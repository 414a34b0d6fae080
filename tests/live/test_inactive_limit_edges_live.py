"""Slurm's InactiveLimit at its edges, live (a controller started with ``--inactive-limit 2``
and a real agent): a held attended job waits in the queue past the limit for as long as its
holder pings (the real keepalive thread), and is cancelled once the pings stop; a ``fusesched
run`` whose keepalive thread is still running leaves at once when its job ends, with nothing
said at the interpreter's shutdown."""

from __future__ import annotations

import subprocess
import time

from tests.live.test_inactive_limit_live import (  # noqa: F401 (limited: a fixture)
    ENDS_WITHIN_S,
    HELD,
    LIMIT_S,
    env,
    limited,
)
from tests.live.test_salloc_live import PYTHON, SIZE

from fusesched.cli.keepalive import Attended, Keepalive
from fusesched.cli.local import LocalCluster
from fusesched.sdk import Client


def test_a_held_job_waits_past_the_limit_while_pinged_and_is_cancelled_after(
    limited: LocalCluster,  # noqa: F811
) -> None:
    client = Client(limited.url)
    held = Attended(client.submit, print)(dict(HELD))
    pinging = Keepalive(client, held).start()
    try:
        time.sleep(2 * LIMIT_S + 0.5)  # (salloc waiting on a held job: for hours, here 4.5 s)
        job = client.show(held)
        assert job["state"] == "Pending" and pinging.refused is None, job
    finally:
        pinging.stop()
    stopped_at = time.monotonic()
    assert pinging.ended(timeout=5)
    job = client.wait(held, timeout=30)
    assert (job["state"], job["phase"]) == ("Cancelled", "cancelled"), job
    assert str(job["reason"]).startswith(
        "InactiveLimit: the salloc/run waiting for the allocation stopped answering for"
    ), job
    assert time.monotonic() - stopped_at < ENDS_WITHIN_S + 2


def test_run_leaves_at_once_with_its_keepalive_thread_still_running(
    limited: LocalCluster,  # noqa: F811
) -> None:
    began = time.monotonic()
    done = subprocess.run(
        [*PYTHON, "run", "-n", "1", *SIZE, "sh", "-c", "sleep 1; echo done"],
        capture_output=True,
        text=True,
        timeout=60,
        stdin=subprocess.DEVNULL,
        env=env(limited),
    )
    took = time.monotonic() - began
    assert (done.returncode, done.stdout) == (0, "done\n"), done.stderr
    for said in ("Traceback", "Exception", "Fatal Python error", "warning"):
        assert said not in done.stderr, done.stderr
    assert took < 20, took  # (no wait on the pinging thread at exit)
