"""Small builders for store records, with defaults that tests override by keyword."""

from __future__ import annotations

from typing import Any

from fusesched.store import EventRow, JobRow, JobState, NodeRow, TaskRow


def job(seq: int, **fields: Any) -> JobRow:
    values: dict[str, Any] = {
        "id": str(seq),
        "seq": seq,
        "user": "alice",
        "state": JobState.PENDING,
        "phase": "queued",
        "submit_time": 1000.0 + seq,
        "request": {"name": f"job{seq}", "tasks": [{"count": 1, "resources": {"cpu": "2"}}]},
        "name": f"job{seq}",
    }
    values.update(fields)
    return JobRow(**values)


def task(job_id: str, index: int = 0, group: str = "main", **fields: Any) -> TaskRow:
    values: dict[str, Any] = {
        "task_id": f"{job_id}.{group}.{index}",
        "job_id": job_id,
        "group": group,
        "index": index,
    }
    values.update(fields)
    return TaskRow(**values)


def node(name: str, **fields: Any) -> NodeRow:
    values: dict[str, Any] = {
        "name": name,
        "address": f"{name}:7070",
        "registered_at": 50.0,
        "capacity": {"cpu": "64", "memory": "256Gi", "nvidia.com/gpu": "8"},
        "labels": {"fusesched.io/gpu-model": "H100"},
        "devices": ({"index": 0, "uuid": "GPU-0", "model": "H100"},),
    }
    values.update(fields)
    return NodeRow(**values)


def event(kind: str, job_id: str | None = None, time: float = 1.0, **data: Any) -> EventRow:
    return EventRow(time=time, kind=kind, job_id=job_id, data=data)
