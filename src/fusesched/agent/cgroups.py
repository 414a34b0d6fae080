"""Hard memory limits through a cgroup v1 memory cgroup per task.

Layout: ``/sys/fs/cgroup/memory/<the agent's own memory cgroup>/fusesched/<task id>``; on a
host where the agent runs in the root cgroup that is ``/sys/fs/cgroup/memory/fusesched/<task>``.
Nesting under the agent's own cgroup keeps tasks inside whatever limit the agent itself lives
under (a systemd slice, a container).

``RLIMIT_AS`` is deliberately not used as a fallback: it limits *address space*, not memory,
and breaks the CUDA runtime, the JVM, Go programs and many allocators that reserve large
virtual ranges. Where no memory cgroup can be written, tasks run without a hard limit and the
runtime says so in the task's start report.
"""

from __future__ import annotations

import contextlib
import errno
import os
import signal
from pathlib import Path

V1_ROOT = Path("/sys/fs/cgroup/memory")


def _own_v1_path(proc_cgroup: Path = Path("/proc/self/cgroup")) -> str | None:
    try:
        text = proc_cgroup.read_text()
    except OSError:
        return None
    for line in text.splitlines():
        parts = line.split(":", 2)
        if len(parts) == 3 and "memory" in parts[1].split(","):
            return parts[2]
    return None


def own_memory_limit() -> int | None:
    """The memory limit of the cgroup this process lives in (v1 or v2), if any is set."""
    own = _own_v1_path()
    candidates: list[Path] = []
    if own is not None:
        candidates.append(V1_ROOT / own.lstrip("/") / "memory.limit_in_bytes")
    with contextlib.suppress(OSError):
        for line in Path("/proc/self/cgroup").read_text().splitlines():
            if line.startswith("0::"):
                candidates.append(Path("/sys/fs/cgroup") / line[3:].lstrip("/") / "memory.max")
    for path in candidates:
        try:
            text = path.read_text().strip()
        except OSError:
            continue
        if text.isdigit() and int(text) < 2**62:
            return int(text)
    return None


class TaskCgroup:
    """One task's memory cgroup."""

    def __init__(self, path: Path) -> None:
        self.path = path

    def add(self, pid: int) -> None:
        (self.path / "cgroup.procs").write_text(f"{pid}\n")

    def pids(self) -> list[int]:
        try:
            return [int(x) for x in (self.path / "cgroup.procs").read_text().split()]
        except OSError:
            return []

    def oom_kills(self) -> int:
        """How many processes the kernel's OOM killer killed in this cgroup."""
        try:
            text = (self.path / "memory.oom_control").read_text()
        except OSError:
            return 0
        for line in text.splitlines():
            key, _, value = line.partition(" ")
            if key == "oom_kill" and value.strip().isdigit():
                return int(value)
        return 0

    def limit_hits(self) -> int:
        try:
            return int((self.path / "memory.failcnt").read_text())
        except (OSError, ValueError):
            return 0

    def kill_all(self, sig: int = signal.SIGKILL) -> None:
        for pid in self.pids():
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.kill(pid, sig)

    def remove(self) -> bool:
        """Delete the cgroup; ``False`` while processes are still in it (try again later)."""
        try:
            self.path.rmdir()
        except FileNotFoundError:
            return True
        except OSError as exc:
            if exc.errno in (errno.EBUSY, errno.ENOTEMPTY):
                return False
            raise
        return True


class MemoryCgroups:
    """Creates per-task memory cgroups under one parent, or explains why it cannot."""

    def __init__(self, parent: Path | None, unavailable_reason: str = "") -> None:
        self.parent = parent
        self.unavailable_reason = unavailable_reason

    @property
    def available(self) -> bool:
        return self.parent is not None

    @classmethod
    def disabled(cls, reason: str) -> MemoryCgroups:
        return cls(None, reason)

    @classmethod
    def detect(cls, root: Path = V1_ROOT, name: str = "fusesched") -> MemoryCgroups:
        """Use ``<root>/<own cgroup>/<name>`` if the v1 memory controller is writable there."""
        if not (root / "memory.limit_in_bytes").exists():
            return cls.disabled(f"no cgroup v1 memory controller at {root}")
        own = _own_v1_path() or "/"
        parent = root / own.lstrip("/") / name
        try:
            parent.mkdir(parents=True, exist_ok=True)
        except OSError as exc:
            return cls.disabled(f"cannot create memory cgroup {parent}: {exc.strerror}")
        if not os.access(parent, os.W_OK):
            return cls.disabled(f"memory cgroup {parent} is not writable")
        return cls(parent)

    def create(self, task_id: str, limit_bytes: int) -> TaskCgroup:
        """Make the task's cgroup with ``limit_bytes`` (memory and, where present, memory+swap).

        Raises ``OSError`` (the caller falls back to no limit and reports why).
        """
        if self.parent is None:
            raise OSError(errno.ENOTSUP, self.unavailable_reason)
        path = self.parent / task_id
        cgroup = TaskCgroup(path)
        if path.exists():  # a leftover from an earlier run of the same task id
            cgroup.kill_all()
            cgroup.remove()
        path.mkdir()
        try:
            (path / "memory.limit_in_bytes").write_text(f"{limit_bytes}\n")
            memsw = path / "memory.memsw.limit_in_bytes"
            if memsw.exists():  # no escaping the limit into swap
                with contextlib.suppress(OSError):
                    memsw.write_text(f"{limit_bytes}\n")
        except OSError:
            cgroup.remove()
            raise
        return cgroup
