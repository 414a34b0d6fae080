"""The JSON routes the portal needs beyond the public API (``/v1/portal/...``).

The same bearer tokens and the same scoping as the rest of the API: a job is shown to people
of its tenant (and cluster-admins) and is a 404 to everyone else; the operator routes
(cluster, queues, history, what-if) need a cluster-admin. Machine credentials (agent, job,
join) get 403 everywhere here.
"""

from __future__ import annotations

import threading
import time
from enum import Enum
from typing import Annotated, Final

from fastapi import FastAPI, HTTPException, Query

from fusesched.api.access import Access, Caller
from fusesched.api.queues import queue_view
from fusesched.controller import completing_views
from fusesched.controller.auth import Authenticator, Principal, Role
from fusesched.controller.service import Controller
from fusesched.model.tenancy import DEFAULT_QOS
from fusesched.portal.schemas import (
    ClusterView,
    EventView,
    HistoryView,
    JobDetailView,
    Me,
    QueuesView,
    Span,
    WhatIfList,
    WhatIfRequest,
    WhatIfRun,
)
from fusesched.portal.views import NodeReasons, cluster_view, history_view
from fusesched.portal.whatif import WhatIfError, WhatIfRunner
from fusesched.store.records import EventRecord
from fusesched.store.usage import UsageQueryError, parse_time

#: Event kinds only cluster-admins see in a job's events (they name who did what, by token).
ADMIN_EVENTS: Final = frozenset({"Audit"})
MAX_BUCKETS: Final = 96
MAX_HISTORY_S: Final = 366 * 86400.0
MAX_EVENTS: Final = 1_000
PREFIX: Final = "/v1/portal"
HISTORY_TTL_S: Final = 5.0


def _person(p: Principal) -> Principal:
    if not p.person:
        article = "an" if p.role.value[:1] in "aeiou" else "a"
        raise HTTPException(403, f"{article} {p.role.value} credential cannot use the portal")
    return p


def _operator(p: Principal) -> Principal:
    if _person(p).role is not Role.CLUSTER_ADMIN:
        raise HTTPException(403, "only cluster-admins may see the operator pages")
    return p


def qos_tiers(controller: Controller) -> tuple[list[str], str]:
    """The QoS tiers' names, highest priority first (equal priorities in the configuration's
    order), and the default tier: the tenancy configuration's, else the default tiers."""
    tenants = controller.core.tenants
    tiers = tenants.config.qos if tenants is not None else DEFAULT_QOS
    default = tenants.config.default_qos if tenants is not None else "silver"
    ordered = sorted(tiers.values(), key=lambda tier: -tier.priority)
    return [tier.name for tier in ordered], default


def timeline(
    submit: float | None,
    start: float | None,
    end: float | None,
    tasks: list[tuple[str, str, float | None, float | None]],
    requeues: list[float],
) -> list[Span]:
    """Spans for the job's timeline: each wait (submit or requeue until the next start), the
    run, and each task's run on its node."""
    spans: list[Span] = []
    if submit is not None:
        wait_end = start if start is not None else end
        first_requeue = min(requeues, default=None)
        if first_requeue is not None and start is not None and first_requeue < start:
            spans.append(Span(label="queued", kind="wait", start=submit, end=first_requeue))
            spans.append(Span(label="requeued", kind="wait", start=first_requeue, end=start))
        else:
            spans.append(Span(label="queued", kind="wait", start=submit, end=wait_end))
    if start is not None:
        spans.append(Span(label="running", kind="run", start=start, end=end))
    for task_id, node, t0, t1 in tasks:
        if t0 is not None:
            spans.append(Span(label=task_id, kind="task", start=t0, end=t1, node=node or None))
    return spans


def _no_job(access: Access, p: Principal, job_id: str) -> HTTPException:
    """The 404 for ``job_id``: an array (which has no page of its own) names its members."""
    members = [m.id for m in access.array_members(p, job_id, 4)]
    if not members:
        return HTTPException(404, f"no job {job_id!r}")
    more = ", …" if len(members) > 3 else ""
    return HTTPException(
        404,
        f"job {job_id} is a job array: each of its members is a job of its own "
        f"({', '.join(members[:3])}{more}); open one of them from the job list",
    )


def _event(record: EventRecord) -> EventView:
    e = record.event
    return EventView(time=e.time, kind=e.kind, node=e.node, data=dict(e.data))


def add_portal_routes(app: FastAPI, controller: Controller, auth: Authenticator) -> None:
    """Add the portal's JSON routes for ``controller`` to ``app`` (on the app itself, so that
    they are listed in ``app.routes`` like every other route of the API)."""
    tags: list[str | Enum] = ["portal"]
    reasons = NodeReasons()
    # the history costs a usage query per bucket: pages polling the same window share one
    history_cache: dict[tuple[str, str, int], tuple[float, HistoryView]] = {}
    history_lock = threading.Lock()
    whatif = WhatIfRunner(controller)
    access = Access(controller, auth)

    @app.get(f"{PREFIX}/me", tags=tags, response_model=Me)
    def me(p: Caller) -> Me:
        """Who this token is: what the portal shows after logging in."""
        _person(p)
        tiers, default_qos = qos_tiers(controller)
        return Me(
            user=p.user,
            tenant=p.tenant,
            role=p.role.value,
            auth=auth.enabled,
            operator=p.role is Role.CLUSTER_ADMIN,
            qos_tiers=tiers,
            default_qos=default_qos,
        )

    @app.get(PREFIX + "/jobs/{job_id}", tags=tags, response_model=JobDetailView)
    def job_detail(job_id: str, p: Caller) -> JobDetailView:
        """A job with its request (for resubmitting), its events and its timeline."""
        _person(p)
        detail = controller.persist.store.get_job(job_id)
        view = controller.persist.get_job(job_id)
        admin = p.role is Role.CLUSTER_ADMIN
        if detail is None or view is None or not (admin or p.tenant == view.tenant):
            raise _no_job(access, p, job_id)
        (view,) = completing_views.with_completing(controller, [view])  # (as GET /v1/jobs/{id})
        records = controller.persist.store.events_for_job(job_id)[-MAX_EVENTS:]
        shown = [_event(r) for r in records if admin or r.event.kind not in ADMIN_EVENTS]
        requeues = [e.time for e in shown if e.kind == "JobRequeued"]
        tasks = [(t.task_id, t.node, t.start_time, t.end_time) for t in view.tasks]
        expected = None
        if view.state == "Pending" and view.phase != "held":
            projection = controller.forecasts.get(controller)
            expected = next((j for j in projection.jobs if j.job_id == job_id), None)
        live = controller.jobs.get(job_id)
        return JobDetailView(
            job=view,
            request=dict(detail.job.request),
            events=shown,
            timeline=timeline(view.submit_time, view.start_time, view.end_time, tasks, requeues),
            expected_start=expected.start if expected is not None else None,
            expected_nodes=list(expected.nodes) if expected is not None else [],
            external=live is not None and live.pool is not None,
        )

    @app.get(f"{PREFIX}/cluster", tags=tags, response_model=ClusterView)
    def cluster(p: Caller) -> ClusterView:
        """Nodes and pools with CPU, memory, GPU and MIG occupancy, states and power."""
        _operator(p)
        return ClusterView(**cluster_view(controller, reasons.refresh(controller.persist.store)))

    @app.get(f"{PREFIX}/queues", tags=tags, response_model=QueuesView)
    def queues(p: Caller) -> QueuesView:
        """Queues with quotas and borrowing; accounts with their fair-share standing."""
        _operator(p)
        return QueuesView(**queue_view(controller))

    @app.get(f"{PREFIX}/history", tags=tags, response_model=HistoryView)
    def history(
        p: Caller,
        start: Annotated[str, Query(description="ISO date/time, epoch s or -24h")] = "-1h",
        end: Annotated[str, Query(description="ISO date/time, epoch s or now")] = "now",
        buckets: Annotated[int, Query(ge=1, le=MAX_BUCKETS)] = 30,
    ) -> HistoryView:
        """Utilisation, mean wait and estimated energy over time."""
        _operator(p)
        now = time.time()
        try:
            t0, t1 = parse_time(start, now), parse_time(end, now)
        except UsageQueryError as exc:
            raise HTTPException(422, str(exc)) from None
        if t1 <= t0:
            raise HTTPException(422, "the window must end after it starts")
        if t1 - t0 > MAX_HISTORY_S:
            raise HTTPException(422, "the window may span at most 366 days")
        key = (start, end, buckets)
        with history_lock:
            kept = history_cache.get(key)
            if kept is not None and now - kept[0] < HISTORY_TTL_S:
                return kept[1]
        view = history_view(controller, t0, t1, buckets)
        with history_lock:
            history_cache.clear()  # one window at a time: what the open chart page asks for
            history_cache[key] = (now, view)
        return view

    @app.get(f"{PREFIX}/whatif", tags=tags, response_model=WhatIfList)
    def whatif_list(p: Caller) -> WhatIfList:
        """The policies a what-if may choose, today's, and the runs so far."""
        _operator(p)
        return whatif.listing()

    @app.post(f"{PREFIX}/whatif", tags=tags, status_code=202, response_model=WhatIfRun)
    def whatif_start(body: WhatIfRequest, p: Caller) -> WhatIfRun:
        """Simulate the current queue under another policy or cluster size (poll the run)."""
        _operator(p)
        try:
            return whatif.start(body)
        except WhatIfError as exc:
            raise HTTPException(exc.status, str(exc)) from None

    @app.get(PREFIX + "/whatif/{run_id}", tags=tags, response_model=WhatIfRun)
    def whatif_get(run_id: str, p: Caller) -> WhatIfRun:
        _operator(p)
        run = whatif.get(run_id)
        if run is None:
            raise HTTPException(404, f"no what-if run {run_id!r}")
        return run
