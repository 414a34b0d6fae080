"""Reading Slurm's JSON (``squeue --json``, ``sacct --json``, ``sinfo --json``) into the
one state model and node list of :mod:`fusesched.backends.base`.

Slurm 22.05 writes plain strings and numbers; later versions write state lists and
``{"set": …, "number": …}`` values, and sacct has keys of its own: all are read.
Exit codes are Slurm's wait statuses (``exit_code >> 8``, or 128 + signal).
"""

from __future__ import annotations

import logging
from collections.abc import Mapping, Sequence
from typing import Any, Final

from fusesched.backends.base import RemoteNode, RemoteState, RemoteStatus
from fusesched.model.node import LABEL_ARCH
from fusesched.model.resources import CPU, GPU, MEMORY, Resources

log = logging.getLogger("fusesched.backends.slurm")

MIB: Final = 1024 * 1024
LABEL_PARTITION: Final = "slurm.schedmd.com/partition"
LABEL_FEATURE_PREFIX: Final = "slurm.schedmd.com/feature."

#: Slurm job states → the one state model (anything else: PENDING while Slurm keeps it)
_STATES: Final = {
    "PENDING": RemoteState.PENDING,
    "CONFIGURING": RemoteState.PENDING,
    "REQUEUED": RemoteState.PENDING,
    "REQUEUE_HOLD": RemoteState.PENDING,
    "RESV_DEL_HOLD": RemoteState.PENDING,
    "RUNNING": RemoteState.RUNNING,
    "COMPLETING": RemoteState.RUNNING,
    "SUSPENDED": RemoteState.RUNNING,
    "STAGE_OUT": RemoteState.RUNNING,
    "SIGNALING": RemoteState.RUNNING,
    "COMPLETED": RemoteState.SUCCEEDED,
    "FAILED": RemoteState.FAILED,
    "TIMEOUT": RemoteState.FAILED,
    "NODE_FAIL": RemoteState.FAILED,
    "OUT_OF_MEMORY": RemoteState.FAILED,
    "BOOT_FAIL": RemoteState.FAILED,
    "DEADLINE": RemoteState.FAILED,
    "PREEMPTED": RemoteState.FAILED,
    "CANCELLED": RemoteState.CANCELLED,
    "REVOKED": RemoteState.CANCELLED,
}


def _number(value: object) -> float | None:
    """A number as 22.05 writes it, or as later versions do (``{"set": …, "number": …}``)."""
    if isinstance(value, Mapping):
        if value.get("set") is False or value.get("infinite") is True:
            return None
        value = value.get("number")
    if isinstance(value, bool) or not isinstance(value, int | float):
        return None
    return float(value)


def _epoch(value: object) -> float | None:
    number = _number(value)
    return number if number is not None and number > 0 else None


def _state_name(raw: object) -> str:
    """A job's state: a string (22.05), a list of state and flags (later), or sacct's
    ``{"current": …}``."""
    if isinstance(raw, Mapping):
        raw = raw.get("current")
    if isinstance(raw, list):
        names = [str(x).upper() for x in raw]
        return next((n for n in names if n in _STATES), names[0] if names else "")
    return str(raw or "").upper()


def exit_code(raw: object) -> int | None:
    """Slurm's exit code → a shell-style one (128 + signal when killed): a wait status
    (22.05), or ``{"return_code": …, "signal": {"id": …}}`` (later versions, sacct)."""
    if isinstance(raw, Mapping):
        signal = raw.get("signal")
        number = _number(signal.get("id")) if isinstance(signal, Mapping) else None
        if number:
            return 128 + int(number)
        code = _number(raw.get("return_code"))
        return None if code is None else int(code)
    if isinstance(raw, bool) or not isinstance(raw, int):
        return None
    signal_number = raw & 0x7F
    return 128 + signal_number if signal_number else raw >> 8


def parse_squeue(data: Mapping[str, Any], wanted: Sequence[str]) -> list[RemoteStatus]:
    """Statuses of the ``wanted`` job ids in ``squeue --json`` (or ``sacct --json``) output."""
    want = set(wanted)
    out: list[RemoteStatus] = []
    for job in data.get("jobs", []):
        external = str(job.get("job_id"))
        if external not in want:
            continue
        name = _state_name(job.get("job_state", job.get("state")))
        if name not in _STATES:
            log.warning("slurm job %s: unknown state %r, taken as pending", external, name)
        state = _STATES.get(name, RemoteState.PENDING)
        times = job.get("time") if isinstance(job.get("time"), Mapping) else {}  # sacct
        start = job.get("start_time", times.get("start"))
        end = job.get("end_time", times.get("end"))
        code = exit_code(job.get("exit_code")) if state.terminal else None
        if state is RemoteState.FAILED and code == 0:
            code = 1  # failed without a non-zero status (node failure, time limit)
        reason = str(job.get("state_reason") or "")
        out.append(
            RemoteStatus(
                external_id=external,
                state=state,
                exit_code=code,
                reason=f"slurm {name.lower()}"
                + (f" ({reason})" if reason not in ("", "None") else ""),
                start_time=_epoch(start) if name != "PENDING" else None,
                end_time=_epoch(end) if state.terminal else None,
                nodes=tuple(n for n in str(job.get("nodes") or "").split(",") if n),
                timed_out=name == "TIMEOUT",
                node_failed=name == "NODE_FAIL",
                out_of_memory=name == "OUT_OF_MEMORY",
            )
        )
    return out


def parse_sinfo(data: Mapping[str, Any], partition: str | None) -> list[RemoteNode]:
    """The nodes of ``sinfo --json`` (those in ``partition`` when given)."""
    nodes: list[RemoteNode] = []
    seen: set[str] = set()
    for node in data.get("nodes", []):
        name = str(node.get("name", ""))
        partitions = [str(p) for p in node.get("partitions", [])]
        if not name or name in seen or (partition and partition not in partitions):
            continue
        seen.add(name)
        amounts = {
            CPU: int(_number(node.get("cpus")) or 0) * 1000,
            MEMORY: int(_number(node.get("real_memory")) or 0) * MIB,
        }
        gpus = _gres_gpus(str(node.get("gres", "")))
        if gpus:
            amounts[GPU] = gpus
        labels = {LABEL_PARTITION: partition or (partitions[0] if partitions else "")}
        arch = str(node.get("architecture", ""))
        if arch:
            labels[LABEL_ARCH] = {"x86_64": "amd64", "aarch64": "arm64"}.get(arch, arch)
        for feature in str(node.get("active_features") or "").split(","):
            if feature:
                labels[LABEL_FEATURE_PREFIX + feature] = "true"
        raw = node.get("state", "")
        words = [str(w) for w in raw] if isinstance(raw, list) else [str(raw)]  # later: a list
        state = words[0].lower() if words else ""
        flags = {str(f).upper() for f in node.get("state_flags", [])}
        flags |= {w.upper() for w in words[1:]}
        up = state in ("idle", "mixed", "allocated", "completing") and not flags & {
            "DRAIN",
            "DRAINING",
            "DRAINED",
            "NOT_RESPONDING",
            "MAINTENANCE",
        }
        nodes.append(RemoteNode(name, Resources(amounts), labels, up))
    return nodes


def _gres_gpus(gres: str) -> int:
    """GPUs in a node's Gres string (``gpu:a100:4(S:0-1),gpu:2``)."""
    total = 0
    for item in gres.split(","):
        parts = item.split("(")[0].split(":")
        if parts[0] == "gpu" and len(parts) >= 2 and parts[-1].isdigit():
            total += int(parts[-1])
    return total
