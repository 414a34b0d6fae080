"""``POST /v1/jobs/{job_id}/signal``: send a running job's tasks a signal (Slurm's ``scancel
--signal``); the job keeps running. See :mod:`fusesched.controller.signals`."""

from __future__ import annotations

from fastapi import FastAPI, HTTPException
from pydantic import BaseModel, ConfigDict, Field, StrictInt, StrictStr

from fusesched.api.access import Access, Caller
from fusesched.controller import signals
from fusesched.controller.records import UnknownJobError
from fusesched.submit.job_signal import signal_name


class JobSignalBody(BaseModel):
    """The signal: a name with or without ``SIG`` (``USR1``, ``SIGUSR1``) or its number;
    ``main_only``: each task's main process only (``scancel --batch``), else its whole
    process group; ``steps_only``: of a batch script's job, its job steps' tasks alone, not
    the script's shell (``scancel --signal`` without ``-b``/``-f``; none running: nothing is
    sent), of any other job every task (not with ``main_only``). Strict types: ``true`` is no
    signal (not SIGHUP), ``10.0`` no number."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    signal: StrictStr | StrictInt = Field(examples=["USR1"])
    main_only: bool = False
    steps_only: bool = False


class Signalled(BaseModel):
    model_config = ConfigDict(frozen=True)

    signalled: list[str]  # the job ids whose running tasks get it
    signal: str  # its bare name: "USR1"
    # array members left out (being stopped, still starting, waiting, ...): id -> why
    skipped: dict[str, str] = Field(default_factory=dict, exclude_if=lambda value: not value)


def add_signal_routes(app: FastAPI, access: Access) -> None:
    """Serve ``POST /v1/jobs/{job_id}/signal`` from ``app``."""
    controller = access.controller
    checker = access.auth

    @app.post("/v1/jobs/{job_id}/signal", status_code=202, response_model=Signalled, tags=["jobs"])
    def signal(job_id: str, body: JobSignalBody, p: Caller) -> Signalled:
        """Send the signal to every running task of the job (of an array: of its members
        that can be signalled, ``skipped`` says which were not and why); they keep running.
        ``steps_only``: a batch script's steps' tasks alone (a job with none running is
        signalled nothing, no error), not its shell; ``main_only``: each task's main process
        (a batch script's shell alone). The job's own user or an admin, as for cancel; 404
        for an unknown job, 409 for one that is not running (waiting, ended, being stopped;
        an array: no member can be), or runs on a node whose agent is too old to deliver
        signals; 422 for a bad signal, or ``main_only`` with ``steps_only``."""
        user, tenant = access.may_act(p, job_id, "signal", ended_arrays=True)
        try:
            name = signal_name(body.signal)
        except ValueError as exc:
            raise HTTPException(422, str(exc)) from None
        if body.main_only and body.steps_only:
            raise HTTPException(422, signals.EXCLUSIVE)
        try:
            done, skipped = signals.signal_array(
                controller, job_id, name, body.main_only, body.steps_only
            )
        except UnknownJobError:
            raise HTTPException(404, f"no job {job_id!r}") from None
        except signals.SignalRefused as exc:
            raise HTTPException(409, str(exc)) from None
        except ValueError as exc:  # HoldRefused: an ended job or array
            raise HTTPException(409, str(exc)) from None
        if checker.enabled and user != p.user:
            access.audit(p, "signal", job_id=job_id, owner=user, tenant=tenant, signal=name)
        return Signalled(signalled=done, signal=name, skipped=skipped)
