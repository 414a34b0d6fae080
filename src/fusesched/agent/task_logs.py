"""A task's log file as the runtime reads it: chunks for the controller, and bwrap's message.

The log lies in the task's folder, which its user may write to: it is opened with
:func:`~fusesched.agent.task_files.open_task_file` (never through a link or a FIFO put in its
place). A chunk is text (:mod:`fusesched.agent.logtext`) and never ends inside a UTF-8
character of a task still running.
"""

from __future__ import annotations

import os
from pathlib import Path

from fusesched.agent.logtext import complete_utf8, decode_log_bytes
from fusesched.agent.task_files import open_task_file
from fusesched.api.wire import LogChunk


def read_chunk(
    task_id: str, path: Path, ended: bool, offset: int, max_bytes: int
) -> LogChunk | None:
    """Up to ``max_bytes`` of the log at ``path`` from byte ``offset``; ``None`` when there is
    nothing new. Only once the task has ``ended`` may the chunk that reaches the end of the log
    end with an unfinished UTF-8 character (its bytes read as ``?``)."""
    try:
        with open_task_file(path) as handle:
            handle.seek(offset)
            raw = handle.read(max(4, max_bytes))
            at_end = not handle.read(1)
    except OSError:
        return None
    if not (ended and at_end):
        raw = complete_utf8(raw)
    if not raw:
        return None
    return LogChunk(task_id=task_id, offset=offset, data=decode_log_bytes(raw))


def bwrap_error(log_path: Path) -> str:
    """bwrap's own message when it failed before or at ``exec`` (exit status 1)."""
    try:
        with open_task_file(log_path) as handle:
            handle.seek(max(0, os.fstat(handle.fileno()).st_size - 4096))
            tail = handle.read().decode("utf-8", errors="replace")
    except OSError:
        return ""
    lines = [line for line in tail.splitlines() if line.strip()]
    if lines and lines[-1].startswith("bwrap: "):
        return lines[-1].removeprefix("bwrap: ")
    return ""
