"""The terminals ``fusesched run --pty``'s relay serves (:mod:`fusesched.cli.pty_client`): a
``run --pty`` job's own (:class:`JobTerminal`, ``/v1/jobs/{id}/pty/...``) and a job step's
task's (:class:`StepTerminal`: ``srun --pty``, ``run --jobid``, ``/v1/tasks/{id}/pty/...``).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Protocol, cast


class Endpoint(Protocol):
    """A terminal the relay serves. :meth:`input` posts keystrokes from ``offset`` (the client
    keeps them from ``kept`` on) and answers (the offset to send from next, how far the task
    has read them)."""

    def output(self, offset: int, wait: float) -> tuple[bytes, int, bool]: ...

    def input(
        self, offset: int, data: bytes, size: tuple[int, int] | None, wait: float, kept: int
    ) -> tuple[int, int]: ...

    def ended(self) -> bool: ...


@dataclass(frozen=True, slots=True)
class JobTerminal:
    """A ``run --pty`` job's terminal; it has ended with its job."""

    client: Any
    job_id: str

    def output(self, offset: int, wait: float) -> tuple[bytes, int, bool]:
        return cast(tuple[bytes, int, bool], self.client.pty_output(self.job_id, offset, wait))

    def input(
        self, offset: int, data: bytes, size: tuple[int, int] | None, wait: float, kept: int
    ) -> tuple[int, int]:
        answer = self.client.pty_send(self.job_id, offset, data, size, wait, kept)
        return cast(tuple[int, int], answer)

    def ended(self) -> bool:
        from fusesched.sdk import FINISHED

        return bool(self.client.show(self.job_id)["state"] in FINISHED)


@dataclass(frozen=True, slots=True)
class StepTerminal:
    """A job step's task's terminal; it has ended with its task (or, gone, with its job)."""

    client: Any
    task_id: str

    def output(self, offset: int, wait: float) -> tuple[bytes, int, bool]:
        return cast(
            tuple[bytes, int, bool], self.client.task_pty_output(self.task_id, offset, wait)
        )

    def input(
        self, offset: int, data: bytes, size: tuple[int, int] | None, wait: float, kept: int
    ) -> tuple[int, int]:
        answer = self.client.task_pty_send(self.task_id, offset, data, size, wait, kept)
        return cast(tuple[int, int], answer)

    def ended(self) -> bool:
        from fusesched.sdk import ControllerError

        try:
            return bool(self.client.task(self.task_id)["state"] == "exited")
        except ControllerError as exc:
            if exc.status in (401, 404):  # (its job has ended: the task and its credential)
                return True
            raise
