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

from fusesched.controller.inactive import ended_by_limit

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
    said = job.get("reason") or ""
    # (a reason that only repeats the code says nothing more: "exit 3", "exit -9")
    reason = f": {said}" if said and said != f"exit {code}" else ""
    if state == "Completed":
        return "completed"
    if phase == "timeout" and ended_by_limit(said):  # (its salloc or run went silent)
        return f"was ended: {said}"
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
    return f"failed with exit code {code}{reason}"


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


@dataclass(frozen=True, slots=True)
class Target:
    """A submitted job to wait for: a plain job (``members`` None) or an array of
    ``members`` members, whose ids are ``<id>_<index>``."""

    id: str
    members: int | None = None

    @property
    def count(self) -> int:
        return 1 if self.members is None else self.members


def target(job_id: str, array: Any) -> Target:
    """What to wait for after submitting ``job_id``: ``array`` is its request's array
    (start, stop, step), or None."""
    if array is None:
        return Target(job_id)
    return Target(job_id, len(range(array.start, array.stop + 1, array.step)))


#: an array's members listed per request (the API's most)
PAGE = 1000
#: an array's unfinished members are counted up to this many in what is said
SHOWN_UNFINISHED = PAGE
#: the members of an array that did not complete named one by one at its end (then a count)
SHOWN_MEMBERS = 20


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
    targets: Sequence[Target],
    say: Callable[[str], None],
    sleep: Callable[[float], None] = time.sleep,
) -> tuple[int, list[dict[str, Any]]]:
    """Poll until every job of ``targets`` has ended: (how many jobs in all, the final
    records of those that did not complete plus each plain job's).

    A plain job is read with ``GET /v1/jobs/{id}``; an array with one listing of its
    unfinished members per round (``GET /v1/jobs?array=ID``), however many it has, and once
    they have all ended one listing of those that failed or were cancelled (the first
    :data:`PAGE`). Each change is passed to ``say`` (a line for stderr). A controller error
    is raised (:class:`fusesched.sdk.ControllerError`); Ctrl-C raises KeyboardInterrupt."""
    seen: dict[str, str] = {}
    final: dict[str, list[dict[str, Any]]] = {}
    pause = poll_interval(sum(1 for t in targets if t.members is None) + len(targets))
    while True:
        for job in targets:
            if job.id in final:
                continue
            if job.members is None:
                record = client.show(job.id)
                shown = _change(record)
                if record["state"] in FINISHED:
                    final[job.id] = [record]
            else:
                left = _members(client, job.id, ("Pending", "Running"))
                shown = _array_change(job, left)
                if not left:
                    final[job.id] = _members(client, job.id, ("Failed", "Cancelled"))
            if seen.get(job.id) != shown:
                seen[job.id] = shown
                say(shown)
            if job.members is not None and job.id in final:  # its members that did not complete
                ended = sorted(final[job.id], key=lambda m: _index(m["id"]))
                for record in ended[:SHOWN_MEMBERS]:
                    say(_change(record))
                if len(ended) > SHOWN_MEMBERS:
                    say(f"array {job.id}: {len(ended) - SHOWN_MEMBERS} more did not complete")
        if len(final) == len(targets):
            return sum(t.count for t in targets), [r for t in targets for r in final[t.id]]
        sleep(pause)


def _members(client: Any, array: str, states: Sequence[str]) -> list[dict[str, Any]]:
    """An array's members in ``states`` (the first :data:`PAGE`). A controller too old for
    the ``array`` filter lists other jobs too: only the array's own are kept."""
    found = client.jobs(array=array, states=states, limit=PAGE)
    return [job for job in found if job.get("array_parent") == array]


def _index(member: str) -> int:
    """An array member's index (``12_7`` → 7), for the order they are named in."""
    tail = member.rpartition("_")[2]
    return int(tail) if tail.isascii() and tail.isdigit() else 0


def _array_change(job: Target, left: Sequence[Mapping[str, Any]]) -> str:
    """An array's progress as said on stderr: ``array 12: 3 running, 5 pending of 10``."""
    if not left:
        return f"array {job.id}: all {job.members} members have ended"
    running = sum(1 for m in left if m["state"] == "Running")
    more = "+" if len(left) >= SHOWN_UNFINISHED else ""
    pending = f"{len(left) - running}{more}"
    return f"array {job.id}: {running} running, {pending} pending of {job.members}"
