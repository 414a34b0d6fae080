"""Waiting for task reports from a runtime."""

from __future__ import annotations

import time

from fusesched.agent.logtext import chunk_end
from fusesched.agent.runtime import ProcessRuntime
from fusesched.api.wire import TaskLaunch, TaskReport, TaskState


def launch(task_id: str, /, *argv: str, **fields: object) -> TaskLaunch:
    job_id = task_id.split(".")[0]
    return TaskLaunch.model_validate(
        {"task_id": task_id, "job_id": job_id, "argv": list(argv), **fields}
    )


def wait_end(rt: ProcessRuntime, *task_ids: str, timeout: float = 10.0) -> dict[str, TaskReport]:
    """Poll until every task has an end report (exit or failed start); the end reports."""
    ended: dict[str, TaskReport] = {}
    deadline = time.monotonic() + timeout
    while set(task_ids) - set(ended):
        for report in rt.poll():
            if report.state is not TaskState.RUNNING:
                ended[report.task_id] = report
        if time.monotonic() > deadline:
            raise AssertionError(f"tasks did not end in {timeout} s: {set(task_ids) - set(ended)}")
        time.sleep(0.01)
    return ended


def run_one(rt: ProcessRuntime, spec: TaskLaunch, timeout: float = 10.0) -> tuple[TaskReport, str]:
    rt.start(spec)
    report = wait_end(rt, spec.task_id, timeout=timeout)[spec.task_id]
    return report, read_all(rt, spec.task_id)


def read_all(rt: ProcessRuntime, task_id: str) -> str:
    text, offset = "", 0
    while (chunk := rt.read_log(task_id, offset)) is not None:
        text, offset = text + chunk.data, chunk_end(chunk)
    return text
