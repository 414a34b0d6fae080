"""``POST /v1/jobs/{job_id}/resubmit``: submit a job's stored request again, on the server.

The portal's **Resubmit** and :meth:`fusesched.sdk.Client.resubmit` use it. Resubmitting on the
server, not by sending the request read back from ``GET /v1/portal/jobs/{id}``, is what lets
the new job inherit the submitting environment (``submit_env``: the shell's ``PATH``, its
virtual environment …), which is kept apart from the request and never shown
(store/environments.py): it never leaves the controller.

The rules (docs/PORTAL.md, "Resubmit"):

* whoever sees the job may resubmit it: people of its tenant and cluster-admins (404 for
  everyone else, as ``GET /v1/jobs/{id}``; 403 for machine credentials);
* the new job is the caller's (its user from the token, as ``POST /v1/jobs``), not held; a
  member of an array (or the array's own id) resubmits the whole array;
* the environment goes with it only when the caller is the job's own user: anyone else's
  resubmission inherits none, and the answer's ``warnings`` says so. With authentication off
  nobody is told apart: the job keeps its user and its environment;
* a stored request that no longer validates (a queue removed since, …) is a 400 with the
  reason, as a submission would be.

No audit entry: submissions are not audited, and the new job is the caller's own (the
resubmitted job is not changed).
"""

from __future__ import annotations

from fastapi import FastAPI, HTTPException
from fastapi.responses import Response
from pydantic import Field

from fusesched.api.access import Access, Caller, person, sees
from fusesched.api.responses import json_response
from fusesched.api.schemas import Submitted
from fusesched.controller.auth import Principal
from fusesched.store.records import JobRow
from fusesched.submit.request import JobRequest, parse_request


class Resubmitted(Submitted):
    """What ``POST /v1/jobs/{id}/resubmit`` answers: the new job's id (an array's: its
    members' ``ids``, as ``POST /v1/jobs``), and what the caller should know about it."""

    warnings: list[str] = Field(default_factory=list)


def stored_row(access: Access, p: Principal, job_id: str) -> JobRow:
    """The stored row of ``job_id`` (an array's id: its first member's, which holds the whole
    array's request) when ``p`` sees it; 404 otherwise."""
    person(p)
    store = access.controller.persist.store
    detail = store.get_job(job_id)
    if detail is None:
        member = access.array_member(p, job_id)
        detail = None if member is None else store.get_job(member.id)
    if detail is None or not sees(p, detail.job.tenant):
        raise HTTPException(404, f"no job {job_id!r}")
    return detail.job


def resubmission(access: Access, p: Principal, row: JobRow) -> tuple[JobRequest, list[str]]:
    """``row``'s request as ``p`` resubmits it, with what to tell ``p``: not held, as ``p``,
    with its submitting environment only when ``p`` is the job's user."""
    request = parse_request(row.request, source=f"job {row.id}'s stored request")
    own = not access.auth.enabled or p.user == row.user
    warnings: list[str] = []
    env = None
    if row.env_id is not None:
        if own:
            env = access.controller.persist.store.environments([row.env_id]).get(row.env_id)
        else:
            warnings.append(
                f"job {row.id} is {row.user}'s: the environment of the shell that submitted "
                "it (PATH, virtual environment, …) goes only with its own user's "
                "resubmission, so the new job inherits none"
            )
    update: dict[str, object] = {"hold": False, "submit_env": env}
    if access.auth.enabled:
        update["user"] = ""  # the caller's, from the token (Access.owned)
    (request,) = access.owned(p, [request.model_copy(update=update)])
    return request, warnings


def add_resubmit_routes(app: FastAPI, access: Access) -> None:
    """Serve ``POST /v1/jobs/{job_id}/resubmit`` from ``app``."""

    @app.post(
        "/v1/jobs/{job_id}/resubmit",
        status_code=201,
        response_model=Resubmitted,
        tags=["jobs"],
    )
    def resubmit(job_id: str, p: Caller) -> Response:
        """Submit the job's stored request again as the caller, not held (an array member:
        the whole array), with the environment of the shell that submitted it when the
        caller is the job's own user; 404 for a job the caller does not see, 400 for a
        request that no longer validates."""
        row = stored_row(access, p, job_id)
        request, warnings = resubmission(access, p, row)
        (new_id,) = access.controller.submit([request])
        a = request.array
        ids = [] if a is None else [f"{new_id}_{i}" for i in range(a.start, a.stop + 1, a.step)]
        return json_response(Resubmitted(id=new_id, ids=ids, warnings=warnings), 201)
