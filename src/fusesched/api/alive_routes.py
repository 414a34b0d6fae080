"""``POST /v1/jobs/{job_id}/alive``: the command that holds an attended job (``fusesched
salloc``, ``fusesched run``) says it is still there; Slurm's ``InactiveLimit`` ends a job
whose command went silent (:mod:`fusesched.controller.inactive`)."""

from __future__ import annotations

from fastapi import FastAPI, HTTPException
from pydantic import BaseModel, ConfigDict

from fusesched.api.access import Access, Caller
from fusesched.controller import attendance
from fusesched.controller.inactive import ping_every
from fusesched.controller.records import UnknownJobError


class Alive(BaseModel):
    model_config = ConfigDict(frozen=True)

    job_id: str
    inactive_limit_s: float  # the controller's --inactive-limit (0: off)
    ping_every_s: float  # how often the holder should say it again


def add_alive_routes(app: FastAPI, access: Access) -> None:
    """Serve ``POST /v1/jobs/{job_id}/alive`` from ``app``."""
    controller = access.controller

    @app.post("/v1/jobs/{job_id}/alive", response_model=Alive, tags=["jobs"])
    def alive(job_id: str, p: Caller) -> Alive:
        """The command holding the job (submitted with ``attended: true``) is alive: its
        silence counts from now. Answers the controller's inactive limit and how often to
        say it again. The job's own user or an admin, as for cancel; 404 for an unknown
        job, 409 for one that has ended, is being stopped or was not submitted attended."""
        access.may_act(p, job_id, "answer for")
        try:
            limit = attendance.alive(controller, job_id)
        except UnknownJobError:
            raise HTTPException(404, f"no job {job_id!r}") from None
        except attendance.AliveRefused as exc:
            raise HTTPException(409, str(exc)) from None
        return Alive(job_id=job_id, inactive_limit_s=limit, ping_every_s=ping_every(limit))
