"""Who is calling the API and what they may see and do.

:data:`Caller` is the FastAPI dependency that authenticates a request's bearer token into a
:class:`Principal`; :func:`person` and :func:`sees` are the basic checks, and :class:`Access`
holds the scoping rules the routes share (a job's visibility, a submission's user and tenant, a
node's own credential) and writes the audit log of admin actions and node joins.
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from typing import Annotated, Any

from fastapi import Depends, HTTPException, Request
from fastapi.security import HTTPAuthorizationCredentials, HTTPBearer
from starlette.concurrency import run_in_threadpool

from fusesched.api.job_schemas import JobView
from fusesched.api.responses import forbidden
from fusesched.controller.auth import Authenticator, Principal, Role
from fusesched.controller.service import Controller
from fusesched.store import EventRow
from fusesched.submit.request import JobRequest

#: The tenant of a request that names none.
DEFAULT_TENANT = JobRequest.model_fields["tenant"].default

#: Event kind of the audit log (admin actions, node joins).
AUDIT = "Audit"

_bearer = HTTPBearer(
    auto_error=False,
    description="An API token (fsk_...): a person's, a node's, or a running job's.",
)


async def _principal(
    request: Request,
    credentials: Annotated[HTTPAuthorizationCredentials | None, Depends(_bearer)],
) -> Principal:
    """The caller (a FastAPI dependency): 401 through :class:`AuthError` without a valid
    bearer token, :data:`~fusesched.controller.auth.ANONYMOUS` when authentication is off.

    A coroutine, so that a request without authentication costs no trip through the thread
    pool; looking a token up in the store does go there."""
    auth: Authenticator = request.app.state.auth
    token = credentials.credentials if credentials else None
    if not auth.enabled:
        return auth.authenticate(token)
    return await run_in_threadpool(auth.authenticate, token)


Caller = Annotated[Principal, Depends(_principal)]


def person(p: Principal) -> Principal:
    """``p`` if it is a person's credential; 403 for machine credentials (agent, job, join)."""
    if not p.person:
        kind = p.role.value
        article = "an" if kind[:1] in ("a", "e", "i", "o", "u") else "a"
        raise forbidden(f"{article} {kind} credential cannot use this endpoint")
    return p


def sees(p: Principal, tenant: str) -> bool:
    """Whether ``p`` sees the jobs of ``tenant``."""
    return p.role is Role.CLUSTER_ADMIN or (p.person and p.tenant == tenant)


class Access:
    """The scoping rules of ``controller``'s API under ``auth`` (everything is allowed when
    authentication is off)."""

    def __init__(self, controller: Controller, auth: Authenticator) -> None:
        self.controller = controller
        self.auth = auth

    def runs_steps(self, p: Principal, job_id: str) -> bool:
        """Whether ``p`` may launch, stop and attach to ``job_id``'s step tasks: the job's own
        credential (``srun`` in its batch script), its owner (``srun`` under ``salloc``, ``run
        --jobid``: the same person, not merely one who sees the job) or a cluster-admin."""
        if not self.auth.enabled or p.role is Role.CLUSTER_ADMIN:
            return True
        if p.role is Role.JOB:
            return p.job_id == job_id
        owner = self.controller.owner(job_id) if p.person else None
        return owner is not None and owner == (p.user, p.tenant)

    def may_act(
        self, p: Principal, job_id: str, what: str, ended_arrays: bool = False
    ) -> tuple[str, str]:
        """(user, tenant) of a job ``p`` may ``what`` (hold, release, signal …): its own
        user, an admin of its tenant or a cluster-admin; 404 when ``p`` does not see it, 403
        otherwise. With ``ended_arrays``, also of an array whose members have all ended (the
        action then answers 409, as for an ended job)."""
        person(p)
        owner = self.controller.owner(job_id)
        if owner is None and ended_arrays:
            member = self.array_member(p, job_id)
            owner = None if member is None else (member.user, member.tenant)
        if owner is None or not sees(p, owner[1]):
            raise HTTPException(404, f"no job {job_id!r}")
        user, _ = owner
        if self.auth.enabled and user != p.user and p.role is Role.USER:
            raise forbidden(f"job {job_id} is {user}'s; only they or an admin may {what} it")
        return owner

    def audit(self, p: Principal, action: str, **data: Any) -> None:
        if not self.auth.enabled:
            return
        job_id = data.pop("job_id", None)
        node = data.pop("node", None)
        row = EventRow(
            time.time(),
            AUDIT,
            job_id=job_id,
            node=node,
            data={"action": action, "by": p.user, "role": p.role.value, "token": p.token_id} | data,
        )
        self.controller.persist.store.add_events([row])

    def owned(self, p: Principal, requests: Sequence[JobRequest]) -> list[JobRequest]:
        """The requests as ``p`` may submit them: user and tenant from the token. As in
        Slurm, a user may not raise a job's priority above 0 (403); it may lower it, and
        admins may set any (as ``fusesched update`` allows)."""
        person(p)
        if not self.auth.enabled:
            return list(requests)
        out = []
        for request in requests:
            user = request.user or p.user
            # the tenant named, else the token's; for people below cluster-admin the default
            # tenant's name means "mine" too (the CLI's parsers always write it out)
            named = "tenant" in request.model_fields_set and not (
                request.tenant == DEFAULT_TENANT and p.role is not Role.CLUSTER_ADMIN
            )
            tenant = request.tenant if named else p.tenant
            if p.role is not Role.CLUSTER_ADMIN:
                if tenant != p.tenant:
                    raise forbidden(f"you cannot submit jobs for tenant {tenant!r}")
                if p.role is Role.USER and user != p.user:
                    raise forbidden(f"you cannot submit jobs as user {user!r}")
                if p.role is Role.USER and request.priority > 0:  # (as sbatch --priority)
                    raise forbidden(
                        f"only an admin may give a job a priority above 0 (not "
                        f"{request.priority}); users may lower it (sbatch --nice)"
                    )
            out.append(request.model_copy(update={"user": user, "tenant": tenant}))
        return out

    def visible_job(self, p: Principal, job_id: str) -> JobView:
        """The job as ``p`` sees it; 404 when it does not exist or ``p`` may not see it (for
        an array's own id, the 404 names its members' ids)."""
        view = self.controller.persist.get_job(job_id)
        if view is None or not sees(person(p), view.tenant):
            member = self.array_member(p, job_id)
            if member is not None:
                raise HTTPException(
                    404,
                    f"no job {job_id!r}: {job_id} is an array, whose members have ids "
                    f"{job_id}_<index> (the first is {member.id}; `fusesched jobs` lists them)",
                )
            raise HTTPException(404, f"no job {job_id!r}")
        return view

    def array_member(self, p: Principal, job_id: str) -> JobView | None:
        """The first member of the array ``job_id`` when it is one that ``p`` sees, else
        ``None``."""
        members = self.array_members(p, job_id, 1)
        return members[0] if members else None

    def array_members(self, p: Principal, job_id: str, limit: int) -> list[JobView]:
        """The first ``limit`` members of the array ``job_id`` when it is one that ``p`` sees
        (else none). An array has no row of its own: its members hold the numbers from its
        own on (``<id>_<index>``), so this reads them by number, never by scanning."""
        if not (job_id.isascii() and job_id.isdigit()) or len(job_id) > 18:
            return []
        rows = self.controller.persist.list_jobs(limit=limit, before_seq=int(job_id) + limit)
        members = [r for r in reversed(rows) if r.array_parent == job_id]
        if not members or not sees(person(p), members[0].tenant):
            return []
        return members

    def the_node(self, p: Principal, name: str) -> None:
        """403 unless ``p`` is node ``name``'s own credential."""
        if self.auth.enabled and (p.role is not Role.AGENT or p.node != name):
            raise forbidden(f"this credential is not node {name!r}'s")
