"""Records to column dicts and back. Column names equal field names throughout."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from sqlalchemy import RowMapping

from fusesched.store.records import EventRecord, EventRow, JobRow, NodeRow, TaskRow, TokenRow


def job_values(row: JobRow) -> dict[str, Any]:
    return {
        "id": row.id,
        "seq": row.seq,
        "name": row.name,
        "user": row.user,
        "tenant": row.tenant,
        "queue": row.queue,
        "type": row.type,
        "state": row.state.value,
        "phase": row.phase,
        "reason": row.reason,
        "exit_code": row.exit_code,
        "priority": row.priority,
        "submit_time": row.submit_time,
        "start_time": row.start_time,
        "end_time": row.end_time,
        "request": _plain(row.request),
        "nodes": list(row.nodes),
        "array_parent": row.array_parent,
        "pool": row.pool,
        "energy_j": row.energy_j,
        "energy_measured_j": row.energy_measured_j,
        "env_id": row.env_id,
    }


def task_values(row: TaskRow) -> dict[str, Any]:
    return {
        "task_id": row.task_id,
        "job_id": row.job_id,
        "group": row.group,
        "index": row.index,
        "node": row.node,
        "state": row.state.value,
        "exit_code": row.exit_code,
        "pid": row.pid,
        "start_time": row.start_time,
        "end_time": row.end_time,
        "devices": list(row.devices),
        "log_path": row.log_path,
        "external_id": row.external_id,
        "cpu_seconds": row.cpu_seconds,
        "max_rss_bytes": row.max_rss_bytes,
        "gpu_util_mean": row.gpu_util_mean,
        "max_gpu_memory_bytes": row.max_gpu_memory_bytes,
        "step_id": row.step_id,
        "step_tasks": row.step_tasks,
        "step_name": row.step_name,
        "reason": row.reason,
    }


def node_values(row: NodeRow) -> dict[str, Any]:
    return {
        "name": row.name,
        "address": row.address,
        "capacity": dict(row.capacity),
        "labels": dict(row.labels),
        "devices": [_plain(d) for d in row.devices],
        "state": row.state.value,
        "last_heartbeat": row.last_heartbeat,
        "registered_at": row.registered_at,
        "drain_reason": row.drain_reason,
    }


def event_values(row: EventRow) -> dict[str, Any]:
    return {
        "time": row.time,
        "kind": row.kind,
        "job_id": row.job_id,
        "node": row.node,
        "data": _plain(row.data),
    }


def token_values(row: TokenRow) -> dict[str, Any]:
    return {
        "id": row.id,
        "hash": row.hash,
        "kind": row.kind.value,
        "user": row.user,
        "tenant": row.tenant,
        "role": row.role,
        "node": row.node,
        "job_id": row.job_id,
        "created_at": row.created_at,
        "expires_at": row.expires_at,
        "used_at": row.used_at,
        "revoked": row.revoked,
    }


def token_row(m: RowMapping) -> TokenRow:
    return TokenRow(**m)


def job_row(m: RowMapping) -> JobRow:
    return JobRow(**m)


def task_row(m: RowMapping) -> TaskRow:
    return TaskRow(**m)


def node_row(m: RowMapping) -> NodeRow:
    return NodeRow(**m)


def event_record(m: RowMapping) -> EventRecord:
    values = dict(m)
    return EventRecord(id=values.pop("id"), event=EventRow(**values))


def _plain(value: Mapping[str, Any]) -> dict[str, Any]:
    """A JSON-able dict (read-only mappings such as ``MappingProxyType`` are copied)."""
    return value if type(value) is dict else dict(value)
