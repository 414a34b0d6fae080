"""``POST /v1/reconfigure``: the controller re-reads its tenancy file and takes new license
counts without a restart (controller/reconfigure.py; ``fusesched reconfigure``).
Cluster-admins only; an applied change goes to the audit log."""

from __future__ import annotations

from typing import Annotated, Literal

from fastapi import Body, FastAPI, HTTPException
from pydantic import BaseModel, ConfigDict, Field, StrictInt

from fusesched.api.access import Access, Caller, person
from fusesched.api.responses import forbidden
from fusesched.controller import reconfigure as reconfiguring
from fusesched.controller.auth import Role


class ReconfigureRequest(BaseModel):
    """What to change besides re-reading the tenancy file (an empty body: only that)."""

    model_config = ConfigDict(extra="forbid")

    licenses: dict[str, StrictInt] | None = Field(
        default=None,
        description="The cluster's licenses from now on, all of them, by name and count "
        '({"matlab": 12, "ansys": 4}): a license left out is removed (refused while jobs '
        "use it), {} removes them all; absent: the counts stay as they are.",
    )
    dry_run: bool = Field(
        default=False, description="Check and say what would change; change nothing."
    )


class ConfigChangeView(BaseModel):
    """One change: ``queue small changed (quota cpu/cpu nominal 2 → 4)``."""

    kind: str  # organisation, tenant, queue, flavor, cohort, qos, setting, scheduling, license
    name: str
    change: Literal["added", "removed", "changed"]
    detail: str = ""
    text: str  # the whole change in words


class ReconfigureReply(BaseModel):
    """What was changed (or, for a dry run, would be)."""

    applied: bool  # false for a dry run, and when nothing differs
    dry_run: bool
    tenancy_file: str | None  # the file re-read; null: the controller has none
    changes: list[ConfigChangeView]
    notes: list[str]  # running jobs above a smaller quota or count, and the like


def add_reconfigure_routes(app: FastAPI, access: Access) -> None:
    """Serve ``POST /v1/reconfigure`` from ``app``."""
    controller = access.controller

    @app.post("/v1/reconfigure", response_model=ReconfigureReply, tags=["cluster"])
    def reconfigure(
        p: Caller, body: Annotated[ReconfigureRequest | None, Body()] = None
    ) -> ReconfigureReply:
        """Re-read the tenancy file the controller was started with (`--tenancy FILE`) and
        apply it, and the license counts in the body, between scheduling cycles; all or
        nothing. 400: the file (or the license list) is invalid; 409: the change would
        orphan work (a queue, QoS tier or license that jobs still use). Running jobs keep
        running under a smaller quota or license count; new admissions wait."""
        person(p)
        if access.auth.enabled and p.role is not Role.CLUSTER_ADMIN:
            raise forbidden("only cluster-admins may reconfigure the controller")
        request = body or ReconfigureRequest()
        licenses = None if request.licenses is None else tuple(request.licenses.items())
        try:
            outcome = reconfiguring.reconfigure(controller, licenses, request.dry_run)
        except reconfiguring.ReconfigureFailed as exc:
            raise HTTPException(exc.status, str(exc)) from None
        changes = [
            ConfigChangeView(
                kind=c.kind, name=c.name, change=c.change, detail=c.detail, text=str(c)
            )
            for c in outcome.changes
        ]
        if outcome.applied:
            access.audit(p, "reconfigure", changes=[c.text for c in changes])
        return ReconfigureReply(
            applied=outcome.applied,
            dry_run=outcome.dry_run,
            tenancy_file=None if outcome.tenancy_file is None else str(outcome.tenancy_file),
            changes=changes,
            notes=list(outcome.notes),
        )
