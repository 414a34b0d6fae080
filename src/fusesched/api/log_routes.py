"""The log routes: one log of a job as text (``GET /v1/jobs/{id}/logs``), and the new output of
many of its tasks at once as JSON (``POST /v1/jobs/{id}/logs``: ``fusesched run -n 256`` makes
one request a round, not 256). Both say whether each log is complete
(:func:`~fusesched.controller.logs.log_state`), so a reader stops exactly at its end.
"""

from __future__ import annotations

from typing import Annotated

from fastapi import FastAPI, HTTPException, Query
from fastapi.responses import PlainTextResponse, Response
from pydantic import Field

from fusesched.api.access import Access, Caller, person
from fusesched.api.job_schemas import JobView
from fusesched.api.responses import json_response
from fusesched.api.schemas import _Input, _View
from fusesched.client_base import LOG_COMPLETE, LOG_CONFIRMED, LOG_MORE, NEXT_OFFSET
from fusesched.controller.auth import Principal, Role
from fusesched.controller.logs import LogState, job_of, log_state, loggable, task_order

#: Most tasks one ``POST /v1/jobs/{id}/logs`` names.
MAX_TASKS = 10_000
#: Text one answer carries by default, and at most (``POST``: :func:`fair_shares` splits it
#: among the tasks; ``GET``: one log's, ``max_bytes``).
DEFAULT_BYTES = 4 << 20
MAX_BYTES = 64 << 20
#: What a task with new output gets at least, however small its share: a whole character,
#: so that asking again always gets on (the answer may then pass ``max_bytes`` by this much
#: a task).
MIN_READ = 4
_ENDED = ("Completed", "Failed", "Cancelled")


class LogsRead(_Input):
    """``POST /v1/jobs/{id}/logs``: which tasks' logs to read, each from its byte offset."""

    offsets: dict[str, Annotated[int, Field(ge=0, le=1 << 62)]] = Field(
        default_factory=dict, max_length=MAX_TASKS
    )
    # also every other task of the job (from its record and its logs), from byte 0
    all: bool = False
    max_bytes: int = Field(default=DEFAULT_BYTES, ge=1, le=MAX_BYTES)


class TaskLogView(_View):
    task_id: str
    offset: int  # where ``text`` starts
    next_offset: int  # the offset to ask for next (not offset + the text's length in bytes)
    text: str
    # the text reaches the end of the log, and nothing more will be written to it
    complete: bool
    # its agent said where the log ends; False with complete: the end may be missing (the
    # task was lost, or its agent is older than end marks)
    confirmed: bool


class JobLogsView(_View):
    job_id: str
    state: str  # the job's: Pending, Running, Completed, Failed, Cancelled
    tasks: list[TaskLogView]
    # some text stops short of what is written (``max_bytes``): ask again at once
    more: bool = False


def add_log_routes(app: FastAPI, access: Access) -> None:
    """Serve ``/v1/jobs/{id}/logs`` from ``app``."""
    controller = access.controller
    store = controller.logs

    def job_view(p: Principal, job_id: str) -> JobView:
        """The job, as ``p`` may read its logs: people who see it, and its own job token
        (``srun``'s steps following their tasks). Another machine credential gets 403 before
        the job is looked for, so that its answer says nothing of which jobs exist."""
        if p.role is Role.JOB and p.job_id == job_id:
            own = controller.persist.get_job(job_id)
            if own is None:
                raise HTTPException(404, f"no job {job_id!r}")
            return own
        return access.visible_job(person(p), job_id)

    def known(view: JobView, task_id: str) -> bool:
        """Whether the task is one of the job's that the controller knows, written or not."""
        return (
            task_id in controller.tasks
            or task_id in controller.finished
            or any(t.task_id == task_id for t in view.tasks)
        )

    @app.get("/v1/jobs/{job_id}/logs", response_class=PlainTextResponse, tags=["jobs"])
    def logs(
        job_id: str,
        p: Caller,
        task: str | None = None,
        offset: Annotated[int, Query(ge=0, le=1 << 62)] = 0,
        max_bytes: Annotated[int, Query(ge=1, le=MAX_BYTES)] = DEFAULT_BYTES,
    ) -> Response:
        """The job's output (its first task's, run after run; or ``task``'s) from byte
        ``offset`` on, at most ``max_bytes`` of it (4 MiB unless asked; at least a whole
        character). ``X-Next-Offset`` is the offset to ask for next (the text's length in
        bytes is not: bytes that are not UTF-8 are shown as U+FFFD, and a character not yet
        wholly written is held back). ``X-Log-More: true``: the text stops short of what is
        written (``max_bytes``): ask again at once from the next offset.
        ``X-Log-Complete: true``: the text reaches the end and nothing more will be written
        (for the job's output: the job has ended, too); ``X-Log-Confirmed: false`` with it:
        the end of the output may be missing (a task lost with its node, or an agent too old
        to say where a log ends)."""
        view = job_view(p, job_id)
        ended = _end(view)
        limit = max(max_bytes, MIN_READ)
        if task is not None:
            if job_of(task) != job_id or (
                task not in store.tasks(job_id) and not known(view, task)
            ):
                raise HTTPException(404, f"job {job_id} has no log for task {task!r}")
            state = log_state(controller, task, ended)
            text, after, at_end = store.read_some(task, offset, state.complete, limit)
        else:
            parts, state = job_log(view, ended)
            text, after, at_end = store.read_parts(parts, offset, state.complete, limit)
        whole = state.complete and at_end
        headers = {
            NEXT_OFFSET: str(after),
            LOG_MORE: _flag(not at_end),
            LOG_COMPLETE: _flag(whole),
            LOG_CONFIRMED: _flag(whole and state.confirmed),
        }
        return PlainTextResponse(text, headers=headers)

    @app.post("/v1/jobs/{job_id}/logs", response_model=JobLogsView, tags=["jobs"])
    def task_logs(job_id: str, body: LogsRead, p: Caller) -> Response:
        """The new output of several of the job's tasks at once: those ``offsets`` names,
        each from its offset, and with ``all`` every other task of the job from byte 0. Each
        task's text is at most its share of ``max_bytes`` (``more``: some stop short; ask
        again at once), with its next offset and whether its log is complete (as ``GET``'s
        headers say). A POST because the offsets travel in the body; it changes nothing."""
        view = job_view(p, job_id)
        ended = _end(view)
        for task_id in body.offsets:
            if job_of(task_id) != job_id:
                raise HTTPException(400, f"task {task_id!r} is not a task of job {job_id}")
        offsets = dict(body.offsets)
        if body.all:
            for task_id in [*store.tasks(job_id), *(t.task_id for t in view.tasks)]:
                if loggable(task_id):  # (a task whose id names no file has no log)
                    offsets.setdefault(task_id, 0)
        order = sorted(offsets, key=task_order)
        try:
            states = [log_state(controller, t, ended) for t in order]  # (before the sizes)
            found = [store.stat(t) for t in order]
        except ValueError as exc:  # a task id that cannot name a log
            raise HTTPException(400, str(exc)) from None
        new = [
            max(0, f.st_size - offsets[t]) if f else 0 for t, f in zip(order, found, strict=True)
        ]
        shares = fair_shares(new, body.max_bytes)
        out: list[TaskLogView] = []
        more = False
        for task_id, state, share, size in zip(order, states, shares, new, strict=True):
            start = offsets[task_id]
            text, after, at_end = store.read_some(task_id, start, state.complete, share)
            # (cut short by its share; what was written since the sizes comes next round)
            more = more or (not at_end and share < size)
            whole = state.complete and at_end
            out.append(
                TaskLogView(
                    task_id=task_id,
                    offset=start,
                    next_offset=after,
                    text=text,
                    complete=whole,
                    confirmed=whole and state.confirmed,
                )
            )
        return json_response(JobLogsView(job_id=job_id, state=view.state, tasks=out, more=more))

    def job_log(view: JobView, ended: float | None) -> tuple[list[str], LogState]:
        """The tasks whose logs make the job's output (its first task's, run after run), and
        whether it is complete. A run's output is shown once the run before it is complete:
        so a run's last output arriving late (a job restarted in place: its new run starts
        as the old one's agent sends the rest) lands where the offsets say, not in the middle
        of the next run's."""
        parts: list[str] = []
        states: list[LogState] = []
        for task_id in store.job_parts(view.id, (t.task_id for t in view.tasks)):
            parts.append(task_id)
            states.append(log_state(controller, task_id, ended))
            if not states[-1].complete:
                break
        complete = ended is not None and all(s.complete for s in states)
        return parts, LogState(complete, all(s.confirmed for s in states))


def fair_shares(sizes: list[int], budget: int) -> list[int]:
    """How many bytes of each of ``sizes`` (what each task has new) one answer carries: all of
    it while they fit in ``budget``; else each as much as the others up to what it has, what
    the small ones leave going to the large ones (no task's output starves the others'); at
    least :data:`MIN_READ` for one with something new."""
    shares = [0] * len(sizes)
    left = budget
    order = sorted(range(len(sizes)), key=sizes.__getitem__)
    for done, i in enumerate(order):
        level = left // (len(order) - done)
        shares[i] = min(sizes[i], max(level, MIN_READ))
        left = max(0, left - shares[i])
    return shares


def _end(view: JobView) -> float | None:
    """When the job ended (on the controller's clock); ``None`` while it has not."""
    if view.state not in _ENDED:
        return None
    return view.end_time if view.end_time is not None else 0.0


def _flag(value: bool) -> str:
    return "true" if value else "false"
