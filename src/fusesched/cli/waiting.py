"""Waiting for submitted jobs to end, as ``sbatch -W/--wait`` does: ``fusesched sbatch --wait``,
``fusesched submit --wait`` and ``fusesched run``.

What a job's end means for the exit status is pure (:func:`exit_status`); :func:`wait_for`
polls the controller through the SDK and says each change of state on stderr.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

#: The states a job ends in.
FINISHED = frozenset({"Completed", "Failed", "Cancelled"})
#: The exit status for an interrupted wait (128 + SIGINT), as a shell gives.
INTERRUPTED = 130


@dataclass(frozen=True, slots=True)
class Outcome:
    """What a set of ended jobs means for the command: its exit status and, for each job that
    did not complete, a line that says why."""

    code: int
    lines: tuple[str, ...]


def exit_code(job: Mapping[str, Any]) -> int:
    """The exit status one ended job stands for: 0 when it completed; its own exit code when
    it failed with one (a signal -N as a shell shows it, 128 + N); 1 when it timed out, was
    cancelled or failed without a code (it never started, its node was lost)."""
    if job.get("state") == "Completed":
        return 0
    code = job.get("exit_code")
    if job.get("phase") == "timeout" or job.get("state") == "Cancelled" or code is None:
        return 1
    code = int(code)
    if code < 0:
        code = 128 + min(-code, 127)
    return code if 0 < code < 256 else 1


def describe(job: Mapping[str, Any]) -> str:
    """How an ended job ended, for a person: ``completed``, ``failed with exit code 3``,
    ``reached its time limit (00:00:02)``, ``was cancelled``…"""
    state, phase, code = job.get("state"), job.get("phase"), job.get("exit_code")
    reason = f": {job['reason']}" if job.get("reason") else ""
    if state == "Completed":
        return "completed"
    if phase == "timeout":
        limit = job.get("time_limit_s")
        shown = "" if limit is None else f" ({_hms(limit)})"
        return f"reached its time limit{shown} and was stopped"
    if state == "Cancelled":
        return f"was cancelled{reason}"
    if code is None:
        return f"failed without an exit code{reason}"
    if int(code) < 0:
        return f"was killed by signal {-int(code)}{reason}"
    return f"failed with exit code {code}"


def exit_status(jobs: Iterable[Mapping[str, Any]]) -> Outcome:
    """The exit status for several ended jobs (an array's members): 0 when all completed,
    else the highest of their :func:`exit_code`, with a line for each job that did not."""
    code = 0
    lines: list[str] = []
    for job in jobs:
        own = exit_code(job)
        if own:
            lines.append(f"job {job['id']} {describe(job)}")
        code = max(code, own)
    return Outcome(code, tuple(lines))


def member_ids(job_id: str, array: Any) -> list[str]:
    """The ids to wait for: an array's members (``<id>_<index>``), else the job itself.
    ``array`` is the request's array (start, stop, step), or None."""
    if array is None:
        return [job_id]
    return [f"{job_id}_{i}" for i in range(array.start, array.stop + 1, array.step)]


def poll_interval(count: int) -> float:
    """Seconds between rounds of polling ``count`` jobs: quick for a few, gentler for many."""
    return min(5.0, 0.25 + count / 200)


def _hms(seconds: float) -> str:
    from fusesched.cli.live import slurm_duration

    return slurm_duration(seconds)


def _change(job: Mapping[str, Any]) -> str:
    """A state change as said on stderr: ``job 12 Running on node-a``."""
    state = job["state"]
    if state == "Running" and job.get("nodes"):
        return f"job {job['id']} Running on {','.join(job['nodes'])}"
    if state in FINISHED:
        return f"job {job['id']} {describe(job)}"
    held = " (held)" if job.get("phase") == "held" else ""
    return f"job {job['id']} {state}{held}"


def wait_for(
    client: Any,
    ids: Sequence[str],
    say: Callable[[str], None],
    sleep: Callable[[float], None] = time.sleep,
) -> list[dict[str, Any]]:
    """Poll the jobs ``ids`` until every one has ended; their final records, in order.

    Each change of state is passed to ``say`` (a line for stderr). A controller error is
    raised (:class:`fusesched.sdk.ControllerError`); Ctrl-C raises KeyboardInterrupt."""
    seen: dict[str, str] = {}
    final: dict[str, dict[str, Any]] = {}
    pause = poll_interval(len(ids))
    while True:
        for job_id in ids:
            if job_id in final:
                continue
            job = client.show(job_id)
            shown = _change(job)
            if seen.get(job_id) != shown:
                seen[job_id] = shown
                say(shown)
            if job["state"] in FINISHED:
                final[job_id] = job
        if len(final) == len(ids):
            return [final[i] for i in ids]
        sleep(pause)
