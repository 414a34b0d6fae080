"""Task logs on the controller's disk: one file per task, written at the offsets agents send.

Agents send each chunk with its byte offset, so a chunk sent twice (a retried heartbeat)
lands on the same bytes instead of being appended again. Folders are created mode 0700 and
files mode 0600: only the controller reads them, and serves each job's logs through the API to
its tenant only.
"""

from __future__ import annotations

import os
import re
from pathlib import Path

from fusesched.api.wire import LogChunk

_SAFE = re.compile(r"^[A-Za-z0-9_.-]+$")


class LogStore:
    def __init__(self, root: Path) -> None:
        self.root = root
        self.root.mkdir(mode=0o700, parents=True, exist_ok=True)
        os.chmod(self.root, 0o700)

    def path(self, task_id: str) -> Path:
        if not _SAFE.match(task_id) or task_id.startswith("."):
            raise ValueError(f"bad task id {task_id!r}")
        return self.root / job_of(task_id) / f"{task_id}.log"

    def write(self, chunk: LogChunk) -> None:
        path = self.path(chunk.task_id)
        path.parent.mkdir(mode=0o700, exist_ok=True)
        data = chunk.data.encode()
        fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o600)
        with os.fdopen(fd, "r+b") as f:
            f.seek(chunk.offset)
            f.write(data)

    def tasks(self, job_id: str) -> list[str]:
        folder = self.root / job_id
        if not _SAFE.match(job_id) or not folder.is_dir():
            return []
        names = [p.stem for p in folder.glob("*.log")]
        return sorted(names, key=_task_order)

    def read(self, task_id: str, offset: int = 0) -> str:
        path = self.path(task_id)
        if not path.exists():
            return ""
        with open(path, "rb") as f:
            f.seek(offset)
            return f.read().decode(errors="replace")

    def read_job(self, job_id: str, offset: int = 0) -> str:
        """The job's log: its first task's, run after run (a requeued job's restarts append,
        as a requeued Slurm job's output file does); ``offset`` counts over the whole."""
        first: dict[int, str] = {}
        for task_id in self.tasks(job_id):
            remote, attempt, _, _ = _task_order(task_id)
            if not remote:
                first.setdefault(attempt, task_id)
        data = b"".join(self.path(t).read_bytes() for _, t in sorted(first.items()))
        return data[offset:].decode(errors="replace")


_RESTART = re.compile(r"-r(\d+)$")


def job_of(task_id: str) -> str:
    """The job a task id belongs to (``<job>[-r<attempt>].<group>.<index>``)."""
    return _RESTART.sub("", task_id.split(".", 1)[0])


def _task_order(task_id: str) -> tuple[int, int, str, int]:
    """Tasks in order: the gang's before remote helpers, then by run, group and index."""
    parts = task_id.split(".")
    remote = 1 if len(parts) > 1 and parts[1] == "remote" else 0
    index = int(parts[-1]) if parts[-1].isdigit() else 0
    restart = _RESTART.search(parts[0])
    attempt = int(restart.group(1)) if restart else 0
    return remote, attempt, ".".join(parts[1:-1]), index
