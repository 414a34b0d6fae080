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

from fusesched.agent.logtext import complete_utf8
from fusesched.api.wire import LogChunk

_SAFE = re.compile(r"^[A-Za-z0-9_.-]+$")


class LogStore:
    def __init__(self, root: Path) -> None:
        self.root = root
        self.root.mkdir(mode=0o700, parents=True, exist_ok=True)
        os.chmod(self.root, 0o700)

    def path(self, task_id: str) -> Path:
        if not _SAFE.fullmatch(task_id) or task_id.startswith("."):
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
        if not _SAFE.fullmatch(job_id) or not folder.is_dir():
            return []
        names = [p.stem for p in folder.glob("*.log")]
        return sorted(names, key=_task_order)

    def read(self, task_id: str, offset: int = 0, final: bool = False) -> tuple[str, int]:
        """The task's log from byte ``offset`` on, and the offset to read from next
        (:func:`complete_text`)."""
        path = self.path(task_id)
        if not path.exists():
            return "", offset
        with open(path, "rb") as f:
            f.seek(offset)
            return complete_text(f.read(), offset, final)

    def read_job(self, job_id: str, offset: int = 0, final: bool = False) -> tuple[str, int]:
        """The job's log: its first task's, run after run (a requeued job's restarts append,
        as a requeued Slurm job's output file does); ``offset`` counts over the whole."""
        first: dict[int, str] = {}
        for task_id in self.tasks(job_id):
            remote, attempt, _, _ = _task_order(task_id)
            if not remote:
                first.setdefault(attempt, task_id)
        data = b"".join(self.path(t).read_bytes() for _, t in sorted(first.items()))
        return complete_text(data[offset:], offset, final)


def complete_text(data: bytes, offset: int, final: bool = False) -> tuple[str, int]:
    """``data`` (read from byte ``offset``) as text, and the byte offset after what the text
    covers: a reader that follows a log asks for that offset next.

    A character whose last bytes have not been written yet (a chunk being written while it is
    read) is held back for the next read instead of being shown as U+FFFD and then skipped;
    once the log is ``final`` everything is shown. Agents send valid UTF-8 (agent/logtext.py),
    but a reader must not count on the text's length in bytes for the offset."""
    whole = data if final else complete_utf8(data)
    return whole.decode(errors="replace"), offset + len(whole)


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
