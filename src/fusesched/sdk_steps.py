"""The SDK's calls for a running job's steps and terminals: start a step (``srun``), follow
and stop its tasks, relay a terminal's keystrokes and output (``run --pty``, ``srun --pty``),
and say that an attended job's holder is still there. :class:`fusesched.sdk.Client` has them.
"""

from __future__ import annotations

import base64
from collections.abc import Mapping
from typing import Any

from fusesched.sdk_transport import Transport, path_segment


class StepCalls(Transport):
    """The routes under ``/v1/jobs/{id}/steps``, ``/v1/tasks/{id}``, the ``pty`` ones and
    ``/v1/jobs/{id}/alive``."""

    def alive(self, job_id: str) -> dict[str, Any]:
        """Say that the command holding an attended job (``attended: true``, as salloc's and
        run's) is still there (``POST /v1/jobs/{id}/alive``): ``{"job_id", "inactive_limit_s"
        (0: off), "ping_every_s"}``. A job whose holder stays silent longer than the limit is
        ended (Slurm's InactiveLimit)."""
        return dict(self._call("POST", f"/v1/jobs/{path_segment(job_id)}/alive", {}))

    def pty_input(
        self,
        job_id: str,
        offset: int,
        data: bytes,
        size: tuple[int, int] | None = None,
        wait: float = 10.0,
    ) -> int:
        """Keystrokes for a ``fusesched run --pty`` job's terminal, from ``offset`` on
        (``POST /v1/jobs/{id}/pty/input``; at most 64 KiB), and its window's new ``size``
        (rows, columns); the offset to send from next (less than the end of ``data`` when
        the relay had no room for all of it within ``wait`` seconds)."""
        return self.pty_send(job_id, offset, data, size, wait)[0]

    def pty_send(
        self,
        job_id: str,
        offset: int,
        data: bytes,
        size: tuple[int, int] | None = None,
        wait: float = 10.0,
        kept: int | None = None,
    ) -> tuple[int, int]:
        """As :meth:`pty_input`, saying that the caller keeps what it sent from ``kept`` on
        (a restarted controller asks for it again: the offset answered is then before the
        caller's); (the offset to send from next, how far the task has read)."""
        return self._pty_in(f"/v1/jobs/{path_segment(job_id)}/pty", offset, data, size, wait, kept)

    def pty_output(self, job_id: str, offset: int, wait: float = 10.0) -> tuple[bytes, int, bool]:
        """A ``fusesched run --pty`` job's terminal output from ``offset`` on (``GET
        /v1/jobs/{id}/pty/output``), waiting up to ``wait`` seconds for some: (the bytes, the
        offset to read from next, whether the output ends there)."""
        return self._pty_out(f"/v1/jobs/{path_segment(job_id)}/pty", offset, wait)

    def task_pty_input(
        self,
        task_id: str,
        offset: int,
        data: bytes,
        size: tuple[int, int] | None = None,
        wait: float = 10.0,
    ) -> int:
        """As :meth:`pty_input`, for a job step's task on a terminal (``srun --pty``: ``POST
        /v1/tasks/{id}/pty/input``)."""
        return self.task_pty_send(task_id, offset, data, size, wait)[0]

    def task_pty_send(
        self,
        task_id: str,
        offset: int,
        data: bytes,
        size: tuple[int, int] | None = None,
        wait: float = 10.0,
        kept: int | None = None,
    ) -> tuple[int, int]:
        """As :meth:`pty_send`, for a job step's task on a terminal."""
        base = f"/v1/tasks/{path_segment(task_id)}/pty"
        return self._pty_in(base, offset, data, size, wait, kept)

    def task_pty_output(
        self, task_id: str, offset: int, wait: float = 10.0
    ) -> tuple[bytes, int, bool]:
        """As :meth:`pty_output`, for a job step's task on a terminal (``GET
        /v1/tasks/{id}/pty/output``)."""
        return self._pty_out(f"/v1/tasks/{path_segment(task_id)}/pty", offset, wait)

    def _pty_in(
        self,
        base: str,
        offset: int,
        data: bytes,
        size: tuple[int, int] | None,
        wait: float,
        kept: int | None,
    ) -> tuple[int, int]:
        body: dict[str, Any] = {"offset": offset, "data": base64.b64encode(data).decode()}
        if size is not None:
            body.update(rows=size[0], cols=size[1])
        query = "" if kept is None else f"?kept={kept}"  # (an older controller ignores it)
        answer = self._call("POST", f"{base}/input{query}", body | {"wait": wait})
        taken = int(answer["offset"])
        return taken, int(answer.get("acked", taken))

    def _pty_out(self, base: str, offset: int, wait: float) -> tuple[bytes, int, bool]:
        page = self._call("GET", f"{base}/output?offset={offset}&wait={wait}")
        return base64.b64decode(page["data"]), int(page["offset"]), bool(page["closed"])

    def start_step(self, job_id: str, step: Mapping[str, Any]) -> dict[str, Any]:
        """Start a step of a running job (``POST /v1/jobs/{id}/steps``, as ``srun`` does;
        the job's own credential, its owner or an admin): ``{"step_id", "task_ids"}``. A
        409 means running steps hold the slots it asks for now."""
        return dict(self._call("POST", f"/v1/jobs/{path_segment(job_id)}/steps", dict(step)))

    def task(self, task_id: str) -> dict[str, Any]:
        """A job step's task (``GET /v1/tasks/{id}``): ``state`` (``exited`` at its end),
        ``exit_code``, ``reason``."""
        return dict(self._call("GET", f"/v1/tasks/{path_segment(task_id)}"))

    def stop_task(self, task_id: str) -> None:
        """Stop a job step's task (``DELETE /v1/tasks/{id}``)."""
        self._call("DELETE", f"/v1/tasks/{path_segment(task_id)}")
