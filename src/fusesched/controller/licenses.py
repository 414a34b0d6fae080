"""Cluster licenses as people see them: ``GET /v1/licenses`` (``fusesched licenses``), the
waiting reason of a job its licenses hold back, and the refusal of a submission asking for
licenses the cluster does not have (docs/LICENSES.md). The counting is the core's
(:mod:`fusesched.core.licenses`); every function here reads it under the controller's lock.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING

from fusesched.api.job_schemas import JobView
from fusesched.api.schemas import LicenseView
from fusesched.model.job import JobSpec
from fusesched.model.licenses import refusal as license_refusal
from fusesched.model.phases import JobPhase

if TYPE_CHECKING:
    from fusesched.controller.service import Controller

#: The core phases of a job that waits to start (queued, or pending on its dependencies).
_WAITING = (JobPhase.QUEUED, JobPhase.PENDING)


def refusal(ctl: Controller, spec: JobSpec) -> str:
    """Why ``spec``'s licenses can never be had on this cluster, or ``""``."""
    return license_refusal(ctl.core.config.licenses, spec.licenses) if spec.licenses else ""


def views(ctl: Controller) -> list[LicenseView]:
    """Every configured license: total, in use, free, and what waiting jobs ask of it."""
    with ctl.lock:
        pool = ctl.core.licenses
        if pool is None:
            return []
        demand: dict[str, int] = dict.fromkeys(pool.total, 0)
        jobs: dict[str, int] = dict.fromkeys(pool.total, 0)
        for rec in ctl.core.jobs.values():
            if rec.spec.licenses and rec.phase in _WAITING:
                for name, count in rec.spec.licenses:
                    if name in demand:
                        demand[name] += count
                        jobs[name] += 1
        return [
            LicenseView(
                name=name,
                total=total,
                in_use=pool.used.get(name, 0),
                free=pool.free(name),
                waiting_demand=demand[name],
                waiting_jobs=jobs[name],
            )
            for name, total in sorted(pool.total.items())
        ]


def with_reasons(ctl: Controller, views: Sequence[JobView]) -> list[JobView]:
    """``views`` with the reason of each pending job its licenses hold back filled in
    (``waiting for licenses: matlab 2 (1 of 10 free)``) where it has no other reason."""
    pool = ctl.core.licenses
    if pool is None:
        return list(views)
    out: list[JobView] = []
    with ctl.lock:
        for view in views:
            if view.licenses and view.state == "Pending" and not view.reason:
                wanted = tuple(sorted(view.licenses.items()))
                said = pool.shortage(wanted)
                if said:
                    view = view.model_copy(update={"reason": said})
            out.append(view)
    return out
